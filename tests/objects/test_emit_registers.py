"""The register block of the emitted .s: one aligned ``.set`` per named allocation with the lines where
it is live; scratch allocations (anonymous intermediates) rendered physically and listed once per
name.  Checked against the text itself: every use of a symbol lies inside the lines its ``.set`` gives,
every scratch register the code names is one the summary lists, and LLVM assembles the result to the
same machine code as an all-physical rendering of the same instructions."""

import re

import pytest

from isagen.builders.program import KernelBuilder
from isagen.builders.spec import bundled_specs_dir, load_spec
from isagen.isa.instruction import Instruction
from isagen.isa.operands import Reg
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble

SET = re.compile(r"^\.set (\w+), +(\d+)  // (\S+) +(to the end|lines (\d+)-(\d+|end))$")


def small_kernel():
    k = KernelBuilder("regblock", "gfx942", workgroup_size=64)
    out = k.args.pointer("out", "f32", "write_only")
    rsrc = k.sgpr(4, "out_rsrc", align=4, kernel=True)
    k.s_load_dwordx2(rsrc[0:2], k.kernarg_ptr, out.offset, comment="out")
    k.s_mov_b32(rsrc[2], -1, comment="num_records")
    k.s_mov_b32(rsrc[3], 0x20000, comment="raw buffer")
    addr = k.vgpr(1, "addr")
    k.v_lshlrev_b32(addr, 2, k.tid, comment="byte offset of this lane")
    vals = []
    for i in range(3):                      # three short-lived scratch values, then one named value
        t = k.vgpr(1, "lane_tmp", scratch=True)
        k.v_add_u32(t, i, k.tid, comment=f"tid + {i}")
        vals.append(t)
    s = k.sgpr(1, "lane_tmp", scratch=True)
    k.s_mov_b32(s, 7, comment="seven")
    total = k.vgpr(1, "total")
    k.v_add3_u32(total, vals[0], vals[1], vals[2], comment="sum")
    k.v_add_u32(total, s, total, comment="+ 7")
    k.free(*vals, s, k.tid)
    k.wait(lgkmcnt=0, why="the pointer is in SGPRs")
    k.buffer_store_dword(total, addr, rsrc, 0, offen=True, comment="out[lane]")
    k.free(addr, total)
    return k.finish()


def register_block(text: str) -> list[str]:
    return text.split("// register names: .set symbol", 1)[1].split("\n\n", 1)[0].splitlines()[1:]


def code_lines(text: str, name: str) -> dict[int, str]:
    lines = text.splitlines()
    start = lines.index(f"{name}:") + 1
    end = lines.index(f".Lfunc_end_{name}:")
    return {i + 1: lines[i] for i in range(start, end)}


def check_lifetimes(text: str, name: str) -> int:
    """Every instruction naming a symbol lies within the lines its .set gives; returns uses checked."""
    sets = {}
    for line in register_block(text):
        if line.startswith(".set"):
            m = SET.match(line)
            assert m, f"malformed .set line: {line!r}"
            sets[m.group(1)] = None if m.group(4) == "to the end" else (int(m.group(5)), m.group(6))
    checked = 0
    for no, line in code_lines(text, name).items():
        code = line.split("//")[0]
        for sym in set(re.findall(r"\b((?:vgpr|agpr|sgpr)_\w+)", code)):
            assert sym in sets, f"line {no}: {sym} has no .set"
            life = sets[sym]
            if life is not None:
                first, last = life
                assert first <= no and (last == "end" or no <= int(last)), \
                    f"line {no} uses {sym} outside its lines {first}-{last}: {line.strip()}"
            checked += 1
    return checked


def test_scratch_is_physical_and_listed_once_per_name():
    text = render_assembly(small_kernel())
    block = register_block(text)
    sets = [line for line in block if line.startswith(".set")]
    assert sorted(line.split()[1].rstrip(",") for line in sets) == ["sgpr_kernarg_ptr", "sgpr_out_rsrc",
                                                                     "sgpr_wg_id_x", "vgpr_addr", "vgpr_tid",
                                                                     "vgpr_total"]
    assert "lane_tmp" not in "\n".join(sets)
    assert len({line.index("//") for line in sets}) == 1            # aligned comment column
    (summary,) = [line for line in block if "lane_tmp" in line]
    used_v = sorted({int(r) for r in re.findall(r"v_add_u32 v(\d+), \d, v\[vgpr_tid\]", text)})
    assert len(used_v) == 3 and f"v[{used_v[0]}:{used_v[-1]}] (3 allocations)" in summary
    assert re.search(r"s\d+ \(1 allocation\)", summary)
    assert check_lifetimes(text, "regblock") >= 6


def _physical(inst: Instruction) -> Instruction:
    ops = tuple(Reg(o.cls, o.index, o.count) if isinstance(o, Reg) else o for o in inst.ops)
    return Instruction(inst.desc, ops, inst.mods, inst.comment)


def _text_section(co: bytes) -> bytes:
    import io

    from elftools.elf.elffile import ELFFile
    return ELFFile(io.BytesIO(co)).get_section_by_name(".text").data()


@pytest.fixture(scope="module")
def gemm():
    spec = load_spec(bundled_specs_dir() / "gemm_bf16.yaml")
    return spec.build("gfx950")


def test_gemm_register_block_is_short_and_right(gemm):
    """The GEMM has ~1000 scratch allocations (its address set-up): they are not .set lines, the
    symbols' lifetimes hold, and every physical register the code names outside the hardware's
    initial ones is a listed scratch register."""
    text = render_assembly(gemm)
    block = register_block(text)
    sets = [line for line in block if line.startswith(".set")]
    scratch = [a for a in gemm.allocations if a.scratch]
    assert len(scratch) > 500 and len(sets) == len(gemm.allocations) - len(scratch) < 80
    assert len({line.index("//") for line in sets}) == 1
    assert check_lifetimes(text, gemm.name) > 1000
    listed = {("v" if r.startswith("v") else "s", n) for line in block if line.startswith("//   ")
              for r in re.findall(r"[vs]\[\d+:\d+\]|[vs]\d+", line) for n in _expand(r)}
    named = set()
    for line in code_lines(text, gemm.name).values():
        code = line.split("//")[0]
        named |= {(r[0], n) for r in re.findall(r"(?<![\w+\[])[vs]\[\d+:\d+\]|(?<![\w+\[])[vs]\d+\b", code)
                  for n in _expand(r)}
    assert named and named <= listed, sorted(named - listed)[:5]


def _expand(r: str) -> list[int]:
    m = re.fullmatch(r"[vs]\[(\d+):(\d+)\]", r)
    return list(range(int(m.group(1)), int(m.group(2)) + 1)) if m else [int(r[1:])]


def test_gemm_assembles_to_the_same_code_as_all_physical(gemm):
    """LLVM: the .s as emitted (symbols and physical scratch) and the same instructions all rendered
    physically give byte-identical .text."""
    text = render_assembly(gemm)
    physical = gemm.__class__(**{**gemm.__dict__, "items": [_physical(i) if isinstance(i, Instruction) else i
                                                             for i in gemm.items]})
    a = _text_section(assemble(text, "gfx950", name="named"))
    b = _text_section(assemble(render_assembly(physical), "gfx950", name="physical"))
    assert len(a) > 10000 and a == b
