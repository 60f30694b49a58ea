"""Generated code objects are right: every kernel-descriptor and metadata field, read back with LLVM's
own tools, matches what the test kernels allocate, by AMDGPUUsage's rules.

References, none of them isagen's code:
- ``llvm-readelf-19 --notes`` (the metadata note, as LLVM reads it) and ``llvm-readelf-19 -h`` (e_flags);
- the 64-byte kernel descriptor at the ``<name>.kd`` symbol, located with pyelftools and decoded here by
  the bit layout in AMDGPUUsage ("Kernel Descriptor", COMPUTE_PGM_RSRC1/2/3);
- the SGPR accounting clang itself writes for an OpenCL kernel (clang-19 for gfx942, zig's clang 22
  for gfx950).

The expected numbers come from what each test kernel allocates (its registers, LDS, arguments), not
from ``Program``'s derived properties.
"""

from __future__ import annotations

import io
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass

import pytest
import yaml
from elftools.elf.elffile import ELFFile

from isagen.builders.program import KernelBuilder
from isagen.checks.occupancy import EXTRA_SGPRS
from isagen.checks.pipeline import register_problems
from isagen.errors import TargetError
from isagen.isa.operands import VCC
from isagen.objects import emit, toolchain

READELF = shutil.which("llvm-readelf-19")
CLANG19 = shutil.which("clang-19")
pytestmark = pytest.mark.skipif(READELF is None, reason="llvm-readelf-19 (apt llvm-19) is needed to read code objects")

TARGETS = ("gfx942", "gfx950")
# AMDGPUUsage, "AMDGPU ELF Header": EF_AMDGPU_MACH values and the v4+ feature encodings
MACH = {"gfx942": 0x04C, "gfx950": 0x04F}
XNACK_OFF, SRAMECC_ON = 0x200, 0xC00


def ceil_div(a, b):
    return -(-a // b)


# ----------------------------------------------------------------------------- the test kernels
@dataclass
class Expect:
    """What a test kernel allocated, written by hand next to the code that allocates it."""
    vgprs: int                 # arch VGPRs (v0 .. vgprs-1)
    agprs: int
    sgprs: int                 # s0 .. sgprs-1
    lds: int
    args: list                 # (name, offset, size, value_kind)
    kernarg_size: int
    wg_ids: str
    workitem_dims: int
    flat_wg: int

    @property
    def accum(self) -> int:
        """Where the AGPRs start in the unified file: the arch VGPRs rounded up to 4 (at least 4)."""
        return max(4, ceil_div(self.vgprs, 4) * 4)

    @property
    def unified(self) -> int:
        """The unified VGPR+AGPR count the wave allocates (the arch VGPRs alone without AGPRs)."""
        return self.accum + self.agprs if self.agprs else self.vgprs


def k_agpr(target):
    """7 VGPRs, 20 AGPRs: accum_offset 8, unified count 28."""
    k = KernelBuilder("co_agpr", target, workgroup_size=256)
    k.args.pointer("x", "f32", access="read_only")
    k.args.pointer("y", "f32", access="write_only")
    k.args.value("n", "i32")
    k.args.value("alpha", "f32")
    t = k.vgpr(6, "t", align=1)                 # v1..v6
    acc = k.agpr(20, "acc")                     # a0..a19
    k.v_mov_b32(t[5], 0)
    k.v_accvgpr_write_b32(acc[19], t[5])
    k.s_nop(2)
    k.v_accvgpr_read_b32(t[0], acc[19])
    k.free(t, acc, k.tid)
    exp = Expect(vgprs=7, agprs=20, sgprs=3, lds=0, kernarg_size=24, wg_ids="x", workitem_dims=1, flat_wg=256,
                 args=[("x", 0, 8, "global_buffer"), ("y", 8, 8, "global_buffer"), ("n", 16, 4, "by_value"),
                       ("alpha", 20, 4, "by_value")])
    return k, exp


def k_lds(target):
    """LDS 4096 + 1000 bytes, no arguments, uses VCC."""
    k = KernelBuilder("co_lds", target, workgroup_size=64)
    k.lds(4096, "a_tile")
    k.lds(1000, "b_tile")
    k.v_cmp_eq_u32(VCC, 0, k.tid)
    k.free(k.tid)
    exp = Expect(vgprs=1, agprs=0, sgprs=3, lds=5096, kernarg_size=0, wg_ids="x", workitem_dims=1, flat_wg=64,
                 args=[])
    return k, exp


def k_wg3(target):
    """3-D workgroup ids and work-item ids; mixed argument types (C struct layout)."""
    k = KernelBuilder("co_wg3", target, workgroup_size=(8, 8, 4), workgroup_ids="xyz", workitem_id_dims=3)
    k.args.pointer("p", "bf16")
    k.args.value("m", "i32")
    k.args.value("scale", "f64")
    k.args.value("h", "u16")
    k.args.value("f", "f32")
    s = k.sgpr(1, "wg_linear")                  # s5 (s2..s4 are the workgroup ids)
    k.s_add_u32(s, k.workgroup_id["x"], k.workgroup_id["z"])
    k.free(s, k.tid)
    # struct { void *p; int m; /*pad*/ double scale; uint16_t h; /*pad*/ float f; }: 0, 8, 16, 24, 28 -> 32
    exp = Expect(vgprs=1, agprs=0, sgprs=6, lds=0, kernarg_size=32, wg_ids="xyz", workitem_dims=3, flat_wg=256,
                 args=[("p", 0, 8, "global_buffer"), ("m", 8, 4, "by_value"), ("scale", 16, 8, "by_value"),
                       ("h", 24, 2, "by_value"), ("f", 28, 4, "by_value")])
    return k, exp


def k_sgprs(target):
    """Every addressable SGPR (s0..s101) and 130 VGPRs without AGPRs."""
    k = KernelBuilder("co_sgprs", target, workgroup_size=128)
    k.args.value("seed", "u64")
    one = k.sgpr(1, "one")                      # s3
    many = k.sgpr(98, "many", align=4)          # s4..s101
    v = k.vgpr(129, "wide", align=1)            # v1..v129
    k.s_mov_b32(many[97], 7)
    k.v_mov_b32(v[128], many[97])
    k.free(one, many, v, k.tid)
    exp = Expect(vgprs=130, agprs=0, sgprs=102, lds=0, kernarg_size=8, wg_ids="x", workitem_dims=1, flat_wg=128,
                 args=[("seed", 0, 8, "by_value")])
    return k, exp


KERNELS = (k_agpr, k_lds, k_wg3, k_sgprs)


# ----------------------------------------------------------------------------- reading code objects
class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!str", lambda loader, node: loader.construct_scalar(node))


def readelf_metadata(path) -> dict:
    out = subprocess.run([READELF, "--notes", str(path)], capture_output=True, text=True, check=True).stdout
    m = re.search(r"^\s*---\s*$(.*?)^\s*\.\.\.\s*$", out, re.MULTILINE | re.DOTALL)
    assert m, out
    return yaml.load(m.group(1), Loader=_Loader)


def readelf_flags(path) -> tuple[int, str]:
    out = subprocess.run([READELF, "-h", str(path)], capture_output=True, text=True, check=True).stdout
    m = re.search(r"Flags:\s+(0x[0-9a-fA-F]+)(.*)", out)
    return int(m.group(1), 16), m.group(2)


def field(word, lo, hi):
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


def descriptor(data: bytes, kernel: str) -> dict:
    """The kernel descriptor of ``kernel``, decoded per AMDGPUUsage (gfx90a+ layout)."""
    elf = ELFFile(io.BytesIO(data))
    syms = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
    kd, fn = syms[f"{kernel}.kd"], syms[kernel]
    assert kd["st_size"] == 64
    sec = elf.get_section(kd["st_shndx"])
    off = sec["sh_offset"] + kd["st_value"] - sec["sh_addr"]
    raw = data[off:off + 64]
    group, private, kernarg = struct.unpack_from("<III", raw, 0)
    entry, = struct.unpack_from("<q", raw, 16)
    rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
    props, = struct.unpack_from("<H", raw, 56)
    return {
        "group_segment_fixed_size": group, "private_segment_fixed_size": private, "kernarg_size": kernarg,
        "entry_matches_symbol": kd["st_value"] + entry == fn["st_value"],
        "vgpr_blocks": field(rsrc1, 0, 5), "sgpr_blocks": field(rsrc1, 6, 9),
        "denorm_32": field(rsrc1, 16, 17), "denorm_16_64": field(rsrc1, 18, 19),
        "private_segment": field(rsrc2, 0, 0), "user_sgpr_count": field(rsrc2, 1, 5),
        "wg_id": "".join(d for d, bit in zip("xyz", (7, 8, 9)) if field(rsrc2, bit, bit)),
        "workitem_id": field(rsrc2, 11, 12),
        "accum_offset": field(rsrc3, 0, 5), "tg_split": field(rsrc3, 16, 16),
        "kernarg_segment_ptr": field(props, 3, 3), "private_segment_buffer": field(props, 0, 0),
        "wave32": field(props, 10, 10),
    }


@dataclass
class Built:
    target: str
    program: object
    expect: Expect
    data: bytes
    meta: dict          # the kernel's entry of amdhsa.kernels
    doc: dict           # the whole metadata document
    desc: dict
    flags: tuple


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    out = {}
    tmp = tmp_path_factory.mktemp("co")
    for target in TARGETS:
        try:
            toolchain.find_toolchain(target)
        except Exception as e:   # noqa: BLE001 - reported per test below
            out[target] = e
            continue
        for make in KERNELS:
            k, exp = make(target)
            program = k.finish(check=False)
            assert not register_problems(program)
            data = toolchain.assemble(emit.render_assembly(program), target, name=program.name)
            path = tmp / f"{program.name}.{target}.co"
            path.write_bytes(data)
            doc = readelf_metadata(path)
            (meta,) = doc["amdhsa.kernels"]
            out[(target, program.name)] = Built(target, program, exp, data, meta, doc,
                                                descriptor(data, program.name), readelf_flags(path))
    return out


def cases():
    return [pytest.param(t, m.__name__[2:], id=f"{t}-{m.__name__[2:]}") for t in TARGETS for m in KERNELS]


def get(built, target, short) -> Built:
    if isinstance(built.get(target), Exception):
        pytest.fail(f"no toolchain for {target}: {built[target]}")
    return built[(target, f"co_{short}")]


# ----------------------------------------------------------------------------- the checks
@pytest.mark.parametrize("target,short", cases())
def test_elf_flags_are_the_production_target_id(built, target, short):
    b = get(built, target, short)
    flags, text = b.flags
    assert flags & 0xFF == MACH[target]
    assert flags & 0x300 == XNACK_OFF and flags & 0xC00 == SRAMECC_ON
    assert "xnack-" in text and "sramecc+" in text
    assert b.doc["amdhsa.target"] == f"amdgcn-amd-amdhsa--{target}:sramecc+:xnack-"
    assert b.doc["amdhsa.version"] == [1, 2]
    assert b.data[8] == 3, "EI_ABIVERSION 3 = code object v5"


@pytest.mark.parametrize("target,short", cases())
def test_descriptor_fields(built, target, short):
    b = get(built, target, short)
    e, d = b.expect, b.desc
    assert d["group_segment_fixed_size"] == e.lds
    assert d["private_segment_fixed_size"] == 0
    assert d["kernarg_size"] == e.kernarg_size
    assert d["entry_matches_symbol"]
    assert d["vgpr_blocks"] == ceil_div(e.unified, 8) - 1        # granule 8 over the unified VGPR+AGPR file
    assert d["sgpr_blocks"] == ceil_div(e.sgprs + 6, 8) - 1       # + VCC, FLAT_SCRATCH, XNACK_MASK
    assert d["accum_offset"] == e.accum // 4 - 1
    assert d["user_sgpr_count"] == 2 and d["kernarg_segment_ptr"] == 1 and d["private_segment_buffer"] == 0
    assert d["wg_id"] == e.wg_ids
    assert d["workitem_id"] == e.workitem_dims - 1
    assert d["private_segment"] == 0 and d["tg_split"] == 0 and d["wave32"] == 0
    assert (d["denorm_32"], d["denorm_16_64"]) == (3, 3)


@pytest.mark.parametrize("target,short", cases())
def test_metadata_fields(built, target, short):
    b = get(built, target, short)
    e, m = b.expect, b.meta
    assert m[".name"] == b.program.name and m[".symbol"] == f"{b.program.name}.kd"
    assert m[".vgpr_count"] == e.unified
    assert m[".agpr_count"] == e.agprs
    assert m[".sgpr_count"] == e.sgprs + 6
    assert m[".group_segment_fixed_size"] == e.lds
    assert m[".kernarg_segment_size"] == e.kernarg_size
    assert m[".max_flat_workgroup_size"] == e.flat_wg
    assert m[".wavefront_size"] == 64
    args = [(a[".name"], a[".offset"], a[".size"], a[".value_kind"]) for a in m.get(".args", [])]
    assert args == e.args
    # and the same list the program carries (the one the host packs with)
    assert args == [(a.name, a.offset, a.size, "global_buffer" if a.kind == "pointer" else "by_value")
                    for a in b.program.args]


@pytest.mark.parametrize("target,short", cases())
def test_metadata_agrees_with_descriptor(built, target, short):
    """The counts a runtime or profiler reads from the note describe the same wave as the descriptor."""
    b = get(built, target, short)
    m, d = b.meta, b.desc
    assert ceil_div(m[".vgpr_count"], 8) - 1 == d["vgpr_blocks"]
    assert ceil_div(m[".sgpr_count"], 8) - 1 == d["sgpr_blocks"]
    assert m[".group_segment_fixed_size"] == d["group_segment_fixed_size"]
    assert m[".kernarg_segment_size"] == d["kernarg_size"]
    if m[".agpr_count"]:
        assert (d["accum_offset"] + 1) * 4 + m[".agpr_count"] == m[".vgpr_count"]


@pytest.mark.parametrize("target", TARGETS)
def test_kernarg_pack_puts_values_where_the_metadata_says(built, target):
    b = get(built, target, "wg3")
    values = {"p": 0x7F12_3456_7800, "m": -123456, "scale": 2.5e-3, "h": 0xBEEF, "f": -1.75}
    buf = b.program.args.pack(**values)
    assert len(buf) == b.meta[".kernarg_segment_size"]
    codes = {"p": "<Q", "m": "<i", "scale": "<d", "h": "<H", "f": "<f"}
    for a in b.meta[".args"]:
        assert struct.calcsize(codes[a[".name"]]) == a[".size"]
        assert struct.unpack_from(codes[a[".name"]], buf, a[".offset"])[0] == values[a[".name"]]


# ----------------------------------------------------------------------------- SGPR accounting vs clang
OPENCL = """
__kernel void with_vcc(__global float *x, int n, float a) {
  int i = __builtin_amdgcn_workgroup_id_x() * 256 + __builtin_amdgcn_workitem_id_x();
  if (i < n) x[i] = x[i] * a;
}
__kernel void without_vcc(__global float *x) { x[__builtin_amdgcn_workitem_id_x()] = 1.0f; }
"""


def _clang_sgpr_accounting(cmd, tmp_path):
    src = tmp_path / "k.cl"
    src.write_text(OPENCL)
    asm = subprocess.run([*cmd, "-x", "cl", "-cl-std=CL2.0", "-cl-no-stdinc", "-O3", "-nogpulib", "-S",
                          str(src), "-o", "-"], capture_output=True, text=True, check=True).stdout
    nfs = [int(x) for x in re.findall(r"\.amdhsa_next_free_sgpr (\d+)", asm)]
    vcc = [int(x) for x in re.findall(r"\.amdhsa_reserve_vcc (\d+)", asm)]
    meta = yaml.load(asm[asm.index("---", asm.index(".amdgpu_metadata")):asm.index(".end_amdgpu_metadata")]
                     .rsplit("...", 1)[0], Loader=_Loader)
    counts = {k[".name"]: k[".sgpr_count"] for k in meta["amdhsa.kernels"]}
    return dict(zip(("with_vcc", "without_vcc"), zip(nfs, vcc))), counts


@pytest.mark.parametrize("target", TARGETS)
def test_sgpr_count_matches_clangs_accounting(target, tmp_path):
    """clang's own `.sgpr_count` is next_free_sgpr + 6 whether or not the kernel uses VCC; emit agrees."""
    if target == "gfx942":
        if CLANG19 is None:
            pytest.skip("clang-19 (apt clang-19) not installed")
        cmd = [CLANG19, "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx942:sramecc+:xnack-"]
    else:
        zig = toolchain._zig_binary()
        if zig is None:
            pytest.skip("ziglang not installed")
        cmd = [*zig[0], "clang", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx950:sramecc+:xnack-"]
    descr, counts = _clang_sgpr_accounting(cmd, tmp_path)
    assert descr["with_vcc"][1] == 1 and descr["without_vcc"][1] == 0       # the two cases really differ
    for name, (next_free, _) in descr.items():
        assert counts[name] - next_free == EXTRA_SGPRS == 6, name


def test_target_id_for_another_processor_is_refused():
    k, _ = k_lds("gfx942")
    with pytest.raises(TargetError, match="gfx950"):
        emit.render_assembly(k.finish(check=False), target_id="gfx950:sramecc+:xnack-")
