"""Every instruction of both targets' tables against LLVM's assemblers.

For each table entry, instances are generated from its operand kinds (tests/isa_samples.py): every
register class, width and special register the kind admits, inline constants, a literal, ``off``
addressing, every modifier value, DPP controls and source modifiers.  Then, in one assembler run per
target (llvm-mc-19 for gfx942, zig's clang 22 for gfx950):

* isagen accepts an instance exactly when LLVM does (a short, documented list of deliberate
  differences excepted: isagen refuses a few values LLVM accepts but the hardware ignores or that are
  almost certainly mistakes);
* the text isagen renders is LLVM's canonical spelling (LLVM's _e32/_e64 suffix aside: isagen lets
  the assembler choose the form, and predicts which one, see the size check);
* ``Instruction.size`` is the number of bytes LLVM emits (so the literal and VOP3-promotion rules are
  LLVM's);
* the opcode LLVM encodes is the one the LLVM-generated opcode table (isagen/isa/data) records for
  the instruction's mnemonic (gfx942; gfx950 when its table exists);
* for gfx942, the bytes disassembled by ``llvm-mc --disassemble`` give back the same text.

Plus the negative cases: every operand-check error path raises ISAError naming the instruction and
the operand, instructions of the other target are refused, and LLVM rejects the same text.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings

import pytest
from isa_llvm import (
    LLVM_MC,
    assemble_lines,
    family_opcode,
    load_opcodes,
    normalise_llvm,
    normalise_ours,
    require,
    table_name,
)
from isa_samples import candidates, raw_render

from isagen.errors import ISAError
from isagen.isa.operands import OFF, A, S, Special, V, f16_bits, neg
from isagen.isa.table import isa_table

TARGETS = ("gfx942", "gfx950")

# Deliberate differences: isagen refuses these although LLVM assembles them.
#   (instruction prefix or "*", candidate label prefix): reason
STRICTER = {
    # (instruction prefix, candidate label prefix): (targets where LLVM accepts it, reason)
    ("s_nop", "count=over max"): (TARGETS,
                                  "s_nop uses SIMM16[3:0]; LLVM accepts 16+ and the hardware ignores the rest"),
    ("s_setprio", "prio=over max"): (TARGETS, "the priority is 2 bits; LLVM accepts larger values"),
    ("s_sleep", "count=over max"): (TARGETS, "s_sleep uses SIMM16[6:0]"),
    ("v_readfirstlane_b32", "sdst=m0"): (("gfx942",), "LLVM 22 refuses m0 here (LLVM 19 accepts): refused on both"),
    ("v_readlane_b32", "sdst=m0"): (("gfx942",), "as v_readfirstlane_b32"),
    ("buffer_", "offset=4096"): (TARGETS, "the MUBUF offset field is 12 bits; LLVM 19 encodes offset:4096 as 0"),
    ("v_bitop3_b32", "bitop3=256"): (("gfx950",), "bitop3 is 8 bits; LLVM 22 drops the rest silently"),
    ("v_addc_co_u32", "cin=exec"): (("gfx950",), "LLVM's carry-in class excludes exec (LLVM 19 prints it invalid)"),
    ("v_subb_co_u32", "cin=exec"): (("gfx950",), "as v_addc_co_u32"),
    ("v_subbrev_co_u32", "cin=exec"): (("gfx950",), "as v_addc_co_u32"),
    ("v_cndmask_b32", "mask=exec"): (("gfx950",), "as v_addc_co_u32"),
    ("v_div_scale_f32", "abs src"): (TARGETS, "VOP3B: the abs bits hold sdst; LLVM's parser takes |v| anyway"),
    ("v_div_scale_f32", "neg src"): (TARGETS, "no modifiers on div_scale: the division sequence needs none"),
    ("v_mfma_f32_16x16x128_f8f6f4", "cbsz="): (("gfx950",), "cbsz/blgp 5..7 are not matrix formats (0 fp8 .. 4 fp4)"),
    ("v_mfma_f32_16x16x128_f8f6f4", "blgp="): (("gfx950",), "as cbsz"),
    ("v_mfma_f32_32x32x64_f8f6f4", "cbsz="): (("gfx950",), "as cbsz"),
    ("v_mfma_f32_32x32x64_f8f6f4", "blgp="): (("gfx950",), "as cbsz"),
    ("v_mfma_scale_f32_16x16x128_f8f6f4", "cbsz="): (("gfx950",), "as cbsz"),
    ("v_mfma_scale_f32_16x16x128_f8f6f4", "blgp="): (("gfx950",), "as cbsz"),
    ("v_mfma_scale_f32_32x32x64_f8f6f4", "cbsz="): (("gfx950",), "as cbsz"),
    ("v_mfma_scale_f32_32x32x64_f8f6f4", "blgp="): (("gfx950",), "as cbsz"),
    ("v_mfma_scale_f32", "op_sel"): (("gfx950",), "the third op_sel/op_sel_hi bit does not exist (LLVM drops it)"),
}


def _stricter(name: str, label: str, target: str) -> bool:
    return any(name.startswith(n) and label.startswith(lab) and target in tgts
               for (n, lab), (tgts, _) in STRICTER.items())


def _evaluate(target: str):
    """Build every candidate, assemble all of them in one run; returns a list of records."""
    table = isa_table(target)
    records = []
    for desc in table:
        for label, ops, mods in candidates(desc):
            try:
                inst = desc.make(tuple(ops), dict(mods))
                records.append({"desc": desc, "label": label, "inst": inst, "error": None,
                                "text": inst.render(with_comment=False)})
            except ISAError as e:
                try:
                    text = raw_render(desc, ops, mods)
                except Exception:          # not even renderable (e.g. a type LLVM could never see)
                    continue
                records.append({"desc": desc, "label": label, "inst": None, "error": str(e), "text": text})
    results = assemble_lines([r["text"] for r in records], target)
    for r, (llvm_text, payload) in zip(records, results):
        r["llvm"] = llvm_text
        r["bytes"] = payload if llvm_text is not None else None
        r["llvm_error"] = payload if llvm_text is None else None
    return records


_CACHE: dict = {}


def evaluated(target: str):
    require(target)
    if target not in _CACHE:
        _CACHE[target] = _evaluate(target)
    return _CACHE[target]


def _show(rs, n=25):
    lines = []
    for r in rs[:n]:
        lines.append(f"  {r['desc'].name} [{r['label']}]: {r['text']!r} isagen={r['error'] or 'ok'} "
                     f"llvm={r['llvm_error'] or r['llvm']}")
    if len(rs) > n:
        lines.append(f"  ... and {len(rs) - n} more")
    return "\n".join(lines)


# ============================================================================ acceptance and text

@pytest.mark.parametrize("target", TARGETS)
def test_every_entry_has_an_accepted_base_instance(target):
    records = evaluated(target)
    base = {r["desc"].name: r for r in records if r["label"] == "base"}
    assert set(base) == {d.name for d in isa_table(target)}
    bad = [r for r in base.values() if r["inst"] is None or r["llvm"] is None]
    assert not bad, "base instances refused:\n" + _show(bad)


@pytest.mark.parametrize("target", TARGETS)
def test_isagen_accepts_what_llvm_accepts(target):
    records = evaluated(target)
    too_loose = [r for r in records if r["inst"] is not None and r["llvm"] is None]
    too_strict = [r for r in records if r["inst"] is None and r["llvm"] is not None
                  and not _stricter(r["desc"].name, r["label"], target)]
    assert not too_loose, "isagen builds instructions LLVM rejects:\n" + _show(too_loose)
    assert not too_strict, "isagen refuses instructions LLVM accepts:\n" + _show(too_strict)
    accepted = sum(1 for r in records if r["inst"] is not None)
    assert accepted > 3 * len(isa_table(target))      # many variants per entry, not just the base


@pytest.mark.parametrize("target", TARGETS)
def test_deliberate_differences_still_hold(target):
    """Each STRICTER exception is exercised (so the list cannot rot) and LLVM really accepts it."""
    records = evaluated(target)
    hit = {key for r in records for key in STRICTER
           if r["inst"] is None and r["llvm"] is not None
           and r["desc"].name.startswith(key[0]) and r["label"].startswith(key[1])}
    expected = {key for key, (tgts, _) in STRICTER.items() if target in tgts}
    assert expected <= hit, f"unused exceptions: {sorted(expected - hit)}"


@pytest.mark.parametrize("target", TARGETS)
def test_rendering_is_llvms_canonical_text(target):
    records = [r for r in evaluated(target) if r["inst"] is not None and r["llvm"] is not None]
    bad = [r for r in records if normalise_llvm(r["llvm"]) != normalise_ours(r["text"])]
    assert not bad, "text differs from LLVM's:\n" + "\n".join(
        f"  {r['desc'].name} [{r['label']}]: ours {r['text']!r} llvm {r['llvm']!r}" for r in bad[:25])


@pytest.mark.parametrize("target", TARGETS)
def test_size_and_encoding_form_match_llvm(target):
    records = [r for r in evaluated(target) if r["inst"] is not None and r["llvm"] is not None]
    bad = [r for r in records if r["inst"].size != len(r["bytes"])]
    assert not bad, "\n".join(f"  {r['desc'].name} [{r['label']}]: size {r['inst'].size}, LLVM {len(r['bytes'])} "
                              f"({r['llvm']})" for r in bad[:25])
    # the VOP1/VOP2/VOPC form isagen predicts is the one LLVM picked (LLVM names it when the
    # instruction has both forms)
    for r in records:
        enc, mnemonic = r["inst"].encoding, r["llvm"].split()[0]
        if mnemonic.endswith(("_e32", "_e64")):
            assert mnemonic.endswith("_" + enc), (r["text"], r["llvm"])
        elif enc == "dpp":
            assert mnemonic.endswith("_dpp"), (r["text"], r["llvm"])
        elif enc == "e64":
            assert r["desc"].fmt not in ("VOP1", "VOP2", "VOPC"), (r["text"], r["llvm"])


@pytest.mark.parametrize("target", TARGETS)
def test_opcodes_match_llvm_generated_table(target):
    """The opcode LLVM encoded is the one the LLVM-generated table records for the mnemonic.  An opcode
    the table lacks (a gap in tools/gen_opcodes.py) is checked with LLVM's disassembler instead and
    reported as a warning."""
    opcodes = load_opcodes(target)
    if opcodes is None:
        pytest.skip(f"isagen/isa/data/opcodes.{target}.json not generated yet (tools/gen_opcodes.py)")
    records = [r for r in evaluated(target) if r["inst"] is not None and r["llvm"] is not None]
    bad, missing, checked = [], {}, set()
    for r in records:
        family, opcode = family_opcode(r["bytes"])
        name = table_name(opcodes, family, opcode)
        if name is None:
            missing.setdefault((family, opcode), r)
        elif name != r["desc"].asm:
            bad.append(f"  {r['desc'].name} [{r['label']}]: LLVM encoded {family} opcode {opcode}, "
                       f"which the table calls {name!r}")
        else:
            checked.add(r["desc"].name)
    assert not bad, "\n".join(bad[:25])
    if missing and target != "gfx942":       # no gfx950 disassembler to fall back on
        pytest.fail(f"opcodes missing from opcodes.{target}.json: "
                    + ", ".join(f"{r['desc'].asm} ({f} {o})" for (f, o), r in sorted(missing.items())))
    if missing:
        lines = [" ".join(f"0x{b:02x}" for b in r["bytes"]) for r in missing.values()]
        out = subprocess.run([LLVM_MC, "--disassemble", "-triple", "amdgcn-amd-amdhsa", "-mcpu=gfx942"],
                             input="\n".join(lines) + "\n", capture_output=True, text=True).stdout
        names = [normalise_llvm(t).split()[0] for t in out.splitlines() if t.strip() and not t.strip().startswith(".")]
        assert names == [r["desc"].asm for r in missing.values()]
        checked |= {r["desc"].name for r in missing.values()}
        warnings.warn(f"opcodes missing from opcodes.{target}.json (checked with llvm-mc instead): "
                      + ", ".join(f"{r['desc'].asm} ({f} {o})" for (f, o), r in sorted(missing.items())),
                      stacklevel=2)
    assert checked == {d.name for d in isa_table(target)}


@pytest.mark.parametrize("target", TARGETS)
def test_isagen_encoder_gives_llvms_bytes(target):
    """isagen's own encoder (isagen.isa.encoder, opt-in) gives, for every instance LLVM assembled,
    LLVM's bytes: every entry of the table, every register class, constant, literal and modifier
    the samples have.  Branches are left to tests/objects/test_encoder_text.py (their offsets need a
    placed label)."""
    from isagen.isa.encoder import encode
    records = [r for r in evaluated(target) if r["inst"] is not None and r["llvm"] is not None
               and "branch" not in r["inst"].desc.flags]
    bad = []
    for r in records:
        got = encode(r["inst"])
        if got != r["bytes"]:
            bad.append(f"  {r['desc'].name} [{r['label']}]: {r['text']}: isagen {got.hex()} LLVM {r['bytes'].hex()}")
    assert not bad, f"{len(bad)} of {len(records)} differ:\n" + "\n".join(bad[:25])
    assert {r["desc"].name for r in records} == {d.name for d in isa_table(target)
                                                   if "branch" not in d.flags}


def test_gfx942_disassembly_round_trip():
    """llvm-mc's disassembler turns the bytes back into the text isagen rendered."""
    require("gfx942")
    records = [r for r in evaluated("gfx942") if r["inst"] is not None and r["llvm"] is not None
               and not r["desc"].flags & {"branch"}]
    lines = [" ".join(f"0x{b:02x}" for b in r["bytes"]) for r in records]
    out = subprocess.run([LLVM_MC, "--disassemble", "-triple", "amdgcn-amd-amdhsa", "-mcpu=gfx942"],
                         input="\n".join(lines) + "\n", capture_output=True, text=True)
    texts = [line.strip() for line in out.stdout.splitlines() if line.strip() and not line.strip().startswith(".")]
    assert len(texts) == len(records), out.stderr[-2000:]
    bad = [(r, t) for r, t in zip(records, texts) if normalise_llvm(t) != _i16_constants(r)]
    assert not bad, "\n".join(f"  {r['desc'].name}: ours {r['text']!r} disassembled {t!r}" for r, t in bad[:25])


def _i16_constants(record) -> str:
    """LLVM's disassembler prints an fp inline constant given to a 16-bit integer operand as the hex of
    its f16 bits (0.5 -> 0x3800); its assembler reads that text back as a literal, so isagen keeps the
    fp spelling, and the round trip compares modulo this one documented printer quirk."""
    text = normalise_ours(record["text"])
    if record["desc"].ftype != "i16" or record["desc"].fmt == "VOP3P":
        return text
    for value in (0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0):
        text = re.sub(rf"(?<![\w.]){re.escape(repr(value))}(?![\w.])", hex(f16_bits(value)), text)
    return text.replace("0.15915494", "0x3118")


def test_gfx942_mfma_passes_are_llvms():
    """Each MFMA's ``passes`` is the XDL-pipe occupancy in LLVM's gfx942 scheduling model (what
    GCNHazardRecognizer counts wait states with): llvm-mca's reciprocal throughput of the instruction.
    (No llvm-mca here knows gfx950; targets.py cites SISchedule.td's SIDPGFX950FullSpeedModel for it.)"""
    require("gfx942")
    mca = shutil.which("llvm-mca-19")
    if mca is None:
        pytest.skip("llvm-mca-19 not installed (apt-get install llvm-19)")
    mfmas = [d for d in isa_table("gfx942") if d.mfma is not None]
    base = {r["desc"].name: r["text"] for r in evaluated("gfx942") if r["label"] == "base"}
    out = subprocess.run([mca, "-mtriple=amdgcn", "-mcpu=gfx942", "-instruction-info", "-iterations=1"],
                         input="\n".join(base[d.name] for d in mfmas) + "\n", capture_output=True, text=True).stdout
    rows = re.findall(r"^\s*\d+\s+\d+\s+([\d.]+)\s.*?(v_mfma\w+)", out, re.MULTILINE)
    assert [name for _, name in rows] == [d.name for d in mfmas] and len(mfmas) > 10
    for desc, (throughput, _) in zip(mfmas, rows):
        assert float(throughput) == desc.mfma.passes, f"{desc.name}: passes {desc.mfma.passes}, LLVM {throughput}"


# ============================================================================ target-only instructions

def _only_on(target: str, other: str) -> list[str]:
    return sorted(set(isa_table(target).defs) - set(isa_table(other).defs))


def test_target_only_instructions():
    assert {"ds_read_b64_tr_b16", "v_cvt_pk_bf16_f32", "buffer_load_dwordx4_lds", "v_mfma_f32_16x16x32_bf16",
            "v_permlane32_swap_b32"} <= set(_only_on("gfx950", "gfx942"))
    assert {"v_mfma_f32_16x16x8_xf32", "v_mfma_f32_32x32x4_xf32"} <= set(_only_on("gfx942", "gfx950"))


@pytest.mark.parametrize("target,other", [("gfx950", "gfx942"), ("gfx942", "gfx950")])
def test_other_targets_assembler_rejects_target_only_instructions(target, other):
    """gfx950-only entries do not assemble for gfx942 (and the xf32 MFMAs not for gfx950), and isagen
    refuses to build them for the other target with a message naming both."""
    require(other)
    only = _only_on(target, other)
    base = {r["desc"].name: r["text"] for r in evaluated(target) if r["label"] == "base"}
    results = assemble_lines([base[n] for n in only], other)
    accepted = [n for n, (text, _) in zip(only, results) if text is not None]
    assert not accepted, f"{other} assembles {target}-only instructions: {accepted}"
    for name in only:
        with pytest.raises(ISAError, match=rf"'{name}' does not exist on {other} \(it is a {target} instruction\)"):
            isa_table(other)[name]


def test_shared_instructions_encode_identically_on_both_targets():
    """gfx950 keeps gfx942's encodings: every instruction in both tables assembles to the same text and
    bytes with llvm-mc-19 (gfx942) and clang 22 (gfx950); so the one table and one decoder layout serve
    both, and only the target-only entries need the gfx950 opcode table."""
    require("gfx942")
    require("gfx950")
    common = sorted(set(isa_table("gfx942").defs) & set(isa_table("gfx950").defs))
    a = {r["desc"].name: r for r in evaluated("gfx942") if r["label"] == "base"}
    b = {r["desc"].name: r for r in evaluated("gfx950") if r["label"] == "base"}
    assert len(common) > 400
    for name in common:
        assert normalise_llvm(a[name]["llvm"]) == normalise_llvm(b[name]["llvm"]), name
        assert a[name]["bytes"] == b[name]["bytes"], name


# ============================================================================ operand checks

T942 = isa_table("gfx942")
T950 = isa_table("gfx950")

NEGATIVE = [
    # (instruction, operands, modifiers, regex the one-line message must match) -- the regex names the
    # instruction and the operand or modifier at fault
    ("v_add_f32", (V[0], A[1], V[2]), {}, r"v_add_f32: operand src0 expects VGPR, SGPR or constant, got AGPR a1"),
    ("ds_read_b128", (V[0:2], V[4]), {}, r"ds_read_b128: operand vdst expects 4 register\(s\), got v\[0:1\]"),
    ("ds_read_b64", (V[1:3], V[4]), {}, r"ds_read_b64: operand vdst: v\[1:2\] must start at a multiple of 2"),
    ("s_load_dwordx4", (S[6:10], S[0:2], 0), {},
     r"s_load_dwordx4: operand sdst: s\[6:9\] must start at a multiple of 4"),
    ("s_load_dwordx2", (S[1:3], S[0:2], 0), {},
     r"s_load_dwordx2: operand sdst: s\[1:2\] must start at a multiple of 2"),
    ("v_fma_f32", (V[0], V[1], V[2], 0x1234), {}, r"v_fma_f32: the VOP3 encoding takes inline constants only"),
    ("v_add_f32", (V[0], V[1], 3.5), {},
     r"v_add_f32: a literal constant needs the 32-bit VOP2 encoding, but operand src1 .* needs VOP3"),
    ("v_add_f32", (V[0], 3.5, V[1]), {"clamp": True},
     r"v_add_f32: a literal constant needs .* modifier clamp needs VOP3"),
    ("s_add_u32", (S[0], 0x1234, 0x5678), {}, r"s_add_u32: at most one literal constant per instruction"),
    ("v_add_f32", (V[0], S[1], S[2]), {}, r"v_add_f32: reads 2 scalar values \(s1, s2\) .*\(constant bus limit\)"),
    ("v_cndmask_b32", (V[0], S[1], V[2], Special("vcc")), {}, r"v_cndmask_b32: reads 2 scalar values \(s1, vcc\)"),
    ("v_add_f32", (V[0], V[1], V[2]), {"bogus": 1}, r"v_add_f32: unknown modifier 'bogus' \(allowed: clamp, omod"),
    ("v_and_b32", (V[0], V[1], V[2]), {"clamp": True}, r"v_and_b32: unknown modifier 'clamp'"),
    ("ds_read_b32", (V[0], V[1]), {"offset": 65536}, r"ds_read_b32: modifier offset=65536 out of range \[0, 65535\]"),
    ("buffer_load_dword", (V[0], V[1], S[0:4], 0), {"offen": True, "offset": 4096},
     r"buffer_load_dword: modifier offset=4096 out of range \[0, 4095\]"),
    ("global_load_dword", (V[0], V[2], S[4:6]), {"offset": 4096},
     r"global_load_dword: modifier offset=4096 out of range \[-4096, 4095\]"),
    ("v_mfma_f32_16x16x16_bf16", (A[0:4], V[0:2], V[2:4], A[0:4]), {"abid": 16}, r"modifier abid=16 out of range"),
    ("v_pk_add_f32", (V[0:2], V[2:4], V[4:6]), {"op_sel": [1, 0, 0]},
     r"v_pk_add_f32: modifier op_sel takes a list of 2 bits"),
    ("s_waitcnt", (), {"vmcnt": 64}, r"s_waitcnt: modifier vmcnt=64 out of range \[0, 63\]"),
    ("s_waitcnt", (), {}, r"s_waitcnt: give at least one counter"),
    ("s_nop", (16,), {}, r"s_nop: operand count: immediate 16 out of range \[0, 15\]"),
    ("v_mov_b32", (V[0], V[1]), {"row_mask": 3}, r"v_mov_b32: modifier row_mask needs a DPP control"),
    ("v_mov_b32", (V[0], V[1]), {"row_shr": 1, "row_ror": 1}, r"v_mov_b32: one DPP control per instruction"),
    ("v_mov_b32", (V[0], S[1]), {"row_shr": 1}, r"v_mov_b32: DPP takes VGPR sources only \(operand src0 is s1\)"),
    ("v_add_f32", (V[0], V[1], V[2]), {"row_shr": 0}, r"v_add_f32: modifier row_shr=0 out of range \[1, 15\]"),
    ("v_add_f32", (V[0], V[1], V[2]), {"row_bcast": 7}, r"v_add_f32: modifier row_bcast takes 15 or 31"),
    ("v_add_u32", (V[0], neg(V[1]), V[2]), {}, r"v_add_u32: operand src0: v_add_u32 takes no neg/abs source modifiers"),
    ("v_mfma_f32_16x16x16_bf16", (V[0:4], V[0:2], V[2:4], A[0:4]), {},
     r"operand src2 \(a\[0:3\]\) and vdst \(v\[0:3\]\) must both be VGPRs or both AGPRs"),
    ("v_mfma_f32_16x16x16_bf16", (A[0:4], S[0:2], V[2:4], A[0:4]), {},
     r"operand src0 expects 2-dword VGPR or AGPR, got SGPR s\[0:1\]"),
    ("v_mfma_f32_16x16x16_bf16", (A[0:4], V[0:2], V[2:4], 0x1234), {},
     r"operand src2: only an inline constant may replace the accumulator"),
    ("global_load_dword", (V[0], V[2], OFF), {},
     r"global_load_dword: operand vaddr must be a 64-bit address \(2 VGPRs\) when saddr is off"),
    ("global_load_dword", (V[0], V[2:4], S[4:6]), {},
     r"operand vaddr must be a 32-bit offset \(1 VGPR\) when saddr is an SGPR pair"),
    ("global_load_dword", (V[0], V[2], S[5:7]), {},
     r"global_load_dword: operand saddr: s\[5:6\] must start at a multiple of 2"),
    ("global_load_dword", (V[0], V[2], V[4:6]), {},
     r"global_load_dword: operand saddr expects SGPR pair or off, got VGPR v\[4:5\]"),
    ("buffer_load_dword", (V[0], V[1], S[0:4], 0), {},
     r"buffer_load_dword: operand vaddr: a VGPR address needs offen and/or idxen"),
    ("buffer_load_dword", (V[0], OFF, S[0:4], 0), {"offen": True},
     r"buffer_load_dword: operand vaddr: 'off' means no VGPR address"),
    ("buffer_load_dword", (V[0], V[2], S[0:4], 0x1234), {"offen": True},
     r"buffer_load_dword: the MUBUF encoding takes inline constants only"),
    ("buffer_store_dwordx4", (A[0:4], V[2], S[0:4], 0), {"offen": True}, None),      # AGPR data is fine
    ("ds_write2_b32", (V[1], V[2], A[3]), {}, r"ds_write2_b32: data operands must all be VGPRs or all AGPRs"),
    ("s_mov_b32", (S[102], 0), {}, r"s_mov_b32: operand sdst: s102 is beyond the 102 addressable SGPRs"),
    ("v_mov_b32", (V[0], Special("scc")), {}, r"v_mov_b32: operand src0: scc is not an operand register"),
    ("s_mov_b64", (Special("m0"), 0), {}, r"s_mov_b64: operand sdst expects 2 dword\(s\), got m0"),
    ("v_readfirstlane_b32", (Special("m0"), V[1]), {}, r"v_readfirstlane_b32: operand sdst: m0 is not allowed here"),
    ("v_writelane_b32", (V[0], S[1], S[2]), {}, r"v_writelane_b32: reads 2 scalar values"),
    ("v_writelane_b32", (V[0], S[1], Special("m0")), {}, None),                       # m0 lane select is free
    ("s_movk_i32", (S[0], 0x8000), {}, r"s_movk_i32: operand simm16: immediate 32768 out of range \[-32768, 32767\]"),
    ("v_cvt_pk_fp8_f32", (V[0], V[1], V[2]), {"op_sel": [0, 0, 2]}, r"modifier op_sel takes a list of 3 bits"),
    ("v_add_f32", (V[0], V[1], V[2]), {"omod": 4}, r"v_add_f32: modifier omod takes 0..3"),
    ("v_add_f32", (V[0], V[1], V[2]), {"clamp": 1}, r"v_add_f32: modifier clamp is a flag"),
    ("v_mfma_f32_16x16x128_f8f6f4", (A[0:4], V[0:8], V[8:16], A[0:4]), {"cbsz": 4},
     r"operand src0 expects 4 register\(s\), got v\[0:7\]"),
    ("s_load_dword", (S[0], S[0:2], 1 << 20), {},
     r"s_load_dword: operand offset: SMEM offset 1048576 must be an integer"),
    ("s_buffer_load_dword", (S[0], S[4:8], -16), {}, r"s_buffer_load_dword: operand offset: SMEM offset -16"),
    ("v_add_f32", (V[0], V[1]), {}, r"v_add_f32 takes 3 operands \(vdst=v, src0:vsrc, src1:vsrc\), got 2"),
]


@pytest.mark.parametrize("name,ops,mods,message", NEGATIVE, ids=[f"{n[0]}-{i}" for i, n in enumerate(NEGATIVE)])
def test_operand_errors_name_instruction_and_operand(name, ops, mods, message):
    table = T950 if name.startswith("v_mfma_f32_16x16x128") else T942
    if message is None:
        table[name](*ops, **mods)           # accepted
        return
    with pytest.raises(ISAError, match=message) as err:
        table[name](*ops, **mods)
    text = str(err.value)
    assert "\n" not in text and text.startswith(name)


# texts LLVM must reject too (so isagen's checks are not looser than the hardware's)
LLVM_REJECTS = [
    ("gfx942", "ds_read_b128 v[0:1], v4"),
    ("gfx942", "ds_read_b64 v[1:2], v4"),
    ("gfx942", "v_fma_f32 v0, v1, v2, 0x1234"),
    ("gfx942", "v_add_f32 v0, s1, s2"),
    ("gfx942", "v_cndmask_b32 v0, s1, v2, vcc"),
    ("gfx942", "s_add_u32 s0, 0x1234, 0x5678"),
    ("gfx942", "ds_read_b32 v0, v1 offset:65536"),
    ("gfx942", "global_load_dword v0, v2, s[4:5] offset:4096"),
    ("gfx942", "v_mfma_f32_16x16x16_bf16 v[0:3], v[0:1], v[2:3], a[0:3]"),
    ("gfx942", "v_mov_b32_dpp v0, s1 row_shr:1"),
    ("gfx942", "v_mov_b32 v0, v1 row_mask:0x3"),
    ("gfx942", "s_mov_b32 s102, 0"),
    ("gfx942", "ds_read_b64_tr_b16 v[0:1], v2"),
    ("gfx942", "buffer_load_dwordx4 v2, s[0:3], 0 offen lds"),
    ("gfx950", "v_mfma_f32_16x16x8_xf32 a[0:3], v[0:1], v[2:3], a[0:3]"),
    ("gfx950", "v_mfma_f32_16x16x128_f8f6f4 a[0:3], v[0:7], v[8:15], a[0:3] cbsz:4"),
    ("gfx950", "s_buffer_load_dword s0, s[4:7], -0x10"),
]


@pytest.mark.parametrize("target", TARGETS)
def test_llvm_rejects_what_isagen_rejects(target):
    texts = [t for tgt, t in LLVM_REJECTS if tgt == target]
    require(target)
    results = assemble_lines(texts, target)
    accepted = [t for t, (llvm, _) in zip(texts, results) if llvm is not None]
    assert not accepted, f"LLVM accepts: {accepted}"


def test_llvm_19_silently_truncates_a_mubuf_offset_isagen_refuses():
    """Why the MUBUF offset range check matters: llvm-mc-19 encodes offset:4096 as 0 without an error."""
    require("gfx942")
    (text, data), = assemble_lines(["buffer_load_dword v0, off, s[0:3], 0 offset:4096"], "gfx942")
    assert text is not None and int.from_bytes(data[:4], "little") & 0xFFF == 0
    with pytest.raises(ISAError, match="offset=4096 out of range"):
        T942["buffer_load_dword"](V[0], OFF, S[0:4], 0, offset=4096)
