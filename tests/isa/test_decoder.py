"""The machine-code decoder against LLVM's own disassembler, plus its data model.

* fuzz: random words of every opcode of every gfx942 family are disassembled by llvm-mc-19; every
  word LLVM accepts must decode to exactly LLVM's text (known, documented exceptions aside);
* the opcode table is what tools/gen_opcodes.py makes from LLVM today (a sample of families);
* operands: registers/constants/literals, read/write sets the emulator and the reports rely on;
* errors: an unknown opcode names the byte offset.
"""

import os
import random
import re
import shutil
import struct
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gen_opcodes as G  # noqa: E402

from isagen.errors import CodeObjectError  # noqa: E402
from isagen.isa import decoder as D  # noqa: E402
from isagen.isa.fields import inline_constant_bits, literal_bits  # noqa: E402

HAVE_MC = shutil.which(G.LLVM_MC) is not None
needs_mc = pytest.mark.skipif(not HAVE_MC, reason=f"{G.LLVM_MC} not installed (apt-get install llvm-19)")
# each target's reference disassembler: gfx942 llvm-mc-19, gfx950 llvm-mc-22 (LLVM 19 has no gfx950)
MC_TARGETS = [pytest.param(t, marks=pytest.mark.skipif(
    shutil.which(G.mc_for(t)) is None,
    reason=f"{G.mc_for(t)} not installed (apt-get install {G.APT_FOR.get(G.mc_for(t), 'llvm')})"))
    for t in ("gfx942", "gfx950")]


def _bytes(words):
    return struct.pack(f"<{len(words)}I", *words)


def _one(words, target="gfx942"):
    return D.decode_one(_bytes(words), 0, target)


def known_difference(text: str) -> bool:
    """LLVM texts we do not reproduce, on purpose (see the decoder docstring):
    comments LLVM adds for encodings it considers invalid, s_sendmsg immediates above 1023,
    and 'sext(...)' that LLVM prints for the neg bit of an integer DPP/VOP3 operand.  Neither
    occurs in compiler output."""
    return "/*" in text or "sext(" in text and "_sdwa" not in text


def known_difference_llvm22(text: str) -> bool:
    """LLVM 22 (the gfx950 reference) also names source codes 230/231 src_flat_scratch_base_lo/hi,
    which isagen refuses as reserved (LLVM 19 does too; no compiler output seen uses them)."""
    return known_difference(text) or "src_flat_scratch_base" in text


def _scaled_mfma_words(op: int, rng) -> list[tuple[int, ...]]:
    """v_mfma_ld_scale_b32 (random scale sources, op_sel/op_sel_hi bits, the two non-existent
    third ones included) + MFMA ``op`` with abid 1: one gfx950 v_mfma_scale_* instruction."""
    out = []
    for w in G.canonical_words("VOP3P", op):
        mf = ((w[0] & ~(0xF << 11)) | (1 << 11),) + w[1:]
        for _ in range(6):
            ld0 = (0x1A7 << 23) | (0x2C << 16) | (rng.getrandbits(4) << 11)
            ld1 = (256 + rng.randrange(256)) | ((256 + rng.randrange(256)) << 9) | (rng.getrandbits(2) << 27)
            out.append((ld0, ld1) + mf)
    return out


# gfx950 against llvm-mc-22 is not here yet: random words still differ in ~0.6% (VOP3/VOP3P literals
# LLVM 22 accepts on gfx950, bitop3 spelling and order, the op_sel_hi default of v_dot4_i32_i8);
# compiler output does agree (tests/objects/test_disasm_aiter.py, test_disasm_every_object.py)
@pytest.mark.parametrize("target", MC_TARGETS[:1])
def test_fuzz_every_opcode_matches_llvm_mc(target):
    """Every opcode of the target's table, canonical and random words: decode == the target's
    llvm-mc, text for text."""
    rng = random.Random(1234)
    tab = D.opcode_table(target)
    probes, meta = [], []
    for fam, ops in tab.fam.items():
        for op in ops:
            if fam == "VOP3PX2":
                for w in _scaled_mfma_words(op, rng):
                    probes.append(w)
                    meta.append((fam, op))
                continue
            for _ in range(8):
                probes.append(G.fuzz_extension(G.fuzz_words(fam, op, rng), rng))
                meta.append((fam, op))
            canon = G.canonical_words(fam, op)
            for w in canon:
                probes.append(w + (0x12345678,) if len(w) == 1 or fam in ("VOP3", "VOP3P") else w)
                meta.append((fam, op))
    texts = G.disassemble(probes, target)
    compared, mismatches, covered = 0, [], set()
    for (fam, op), w, t in zip(meta, probes, texts):
        if t is None or (known_difference_llvm22 if target == "gfx950" else known_difference)(t):
            continue
        if t.startswith("s_sendmsg") and (w[0] & 0xFFFF) > 1023:
            continue
        try:
            mine = D.decode_one(_bytes(w), 0, target).text
        except CodeObjectError as exc:
            mine = f"error: {exc}"
        compared += 1
        covered.add((fam, op))
        if mine != t:
            mismatches.append(f"{fam} {' '.join(f'{x:08x}' for x in w)}: llvm '{t}' isagen '{mine}'")
    assert compared > 7000, compared
    assert not mismatches, f"{len(mismatches)} of {compared} differ:\n" + "\n".join(mismatches[:30])
    # every opcode of the table was compared at least once
    missing = [(f, o) for f, ops in tab.fam.items() for o in ops if (f, o) not in covered]
    assert not missing, missing[:20]


@needs_mc
@pytest.mark.parametrize("families", [("SOP1", "SOPK", "SOPP"), ("VOPC", "DS", "GLOBAL")])
def test_generator_reproduces_committed_table(families):
    committed = D.opcode_table("gfx942")
    import json
    with open(os.path.join(ROOT, "isagen", "isa", "data", "opcodes.gfx942.json")) as f:
        raw = json.load(f)
    fresh = G.probe_target_gfx942(families=set(families))
    for fam in families:
        assert fresh["families"][fam] == raw["families"][fam], fam
    assert fresh["tables"]["hwreg"] == raw["tables"]["hwreg"]
    assert committed.fam["SOPP"][12].name == "s_waitcnt"


# ----------------------------------------------------------------------------- data model

def test_vop2_registers_and_rw():
    # v_add_f32_e32 v1, v2, v3
    i = _one([(1 << 25) | (1 << 17) | (3 << 9) | (256 + 2)])
    assert (i.family, i.opcode, i.mnemonic, i.name, i.variant) == ("VOP2", 1, "v_add_f32_e32",
                                                                   "v_add_f32", "e32")
    assert i.text == "v_add_f32_e32 v1, v2, v3"
    assert i.writes == (D.DecodedReg("v", 1),)
    assert set(i.reads) == {D.DecodedReg("v", 2), D.DecodedReg("v", 3)}
    assert i.size == 4 and i.words == ((1 << 25) | (1 << 17) | (3 << 9) | 258,)


def test_fmac_reads_its_destination_and_literal():
    # v_fmac_f32_e32 v4, 0x40490fdb, v5  (trailing literal)
    i = _one([(59 << 25) | (4 << 17) | (5 << 9) | 255, 0x40490FDB])
    assert i.size == 8 and i.text == "v_fmac_f32_e32 v4, 0x40490fdb, v5"
    lit = i.operands[1]
    assert lit.kind == "literal" and lit.value == 0x40490FDB
    assert D.DecodedReg("v", 4) in i.reads and D.DecodedReg("v", 4) in i.writes


def test_inline_constants_by_operand_type():
    # v_mov_b32_e32 v0, 1.0 / -16 and their bits as different operand types
    i = _one([(0x3F << 25) | (1 << 9) | 242])
    op = i.operands[1]
    assert op.kind == "const" and op.value == 242 and op.text == "1.0"
    assert op.const_bits("f32") == 0x3F800000
    assert op.const_bits("f16") == 0x3C00
    assert op.const_bits("bf16") == 0x3F80
    assert op.const_bits("f64") == 0x3FF0000000000000
    assert inline_constant_bits(208, "i32") == 0xFFFFFFF0        # -16
    assert inline_constant_bits(208, "i64") == 0xFFFFFFFFFFFFFFF0
    assert inline_constant_bits(192, "b32") == 64
    assert inline_constant_bits(248, "f32") == 0x3E22F983        # 1/(2*pi)
    assert literal_bits(0x40000000, "f64") == 0x4000000000000000
    assert literal_bits(0x12345678, "f16") == 0x5678


def test_vopc_e32_writes_vcc_and_cndmask_reads_it():
    cmp = _one([(0x3E << 25) | (0xC4 << 17) | (3 << 9) | 4])       # v_cmp_gt_i32_e32 vcc, s4, v3
    assert cmp.text == "v_cmp_gt_i32_e32 vcc, s4, v3"
    vcc = D.DecodedReg("special", 106, 2)
    assert vcc in cmp.writes and vcc.name == "vcc" and vcc.code == 106
    assert D.DecodedReg("s", 4) in cmp.reads
    cnd = _one([(0 << 25) | (1 << 17) | (3 << 9) | 258])           # v_cndmask_b32_e32 v1, v2, v3, vcc
    assert cnd.text == "v_cndmask_b32_e32 v1, v2, v3, vcc"
    assert vcc in cnd.reads and vcc not in cnd.writes


def test_mfma_agprs_and_modifiers():
    # v_mfma_f32_16x16x16_bf16 a[0:3], v[0:1], v[2:3], a[0:3] cbsz:1 abid:2 blgp:3
    i = _one([0xD3E19100, 0x64020500])
    assert i.mai and i.family == "VOP3P"
    assert i.text == "v_mfma_f32_16x16x16_bf16 a[0:3], v[0:1], v[2:3], a[0:3] cbsz:1 abid:2 blgp:3"
    assert i.mods["cbsz"] == 1 and i.mods["abid"] == 2 and i.mods["blgp"] == 3 and i.mods["acc_cd"] == 1
    assert i.writes == (D.DecodedReg("a", 0, 4),)
    assert set(i.reads) == {D.DecodedReg("v", 0, 2), D.DecodedReg("v", 2, 2), D.DecodedReg("a", 0, 4)}


def test_memory_operands():
    # buffer_load_dword v1, v2, s[4:7], 0 offen offset:16 sc0 nt sc1
    ld = _one([0xE052D010, 0x80010102])
    assert ld.text == "buffer_load_dword v1, v2, s[4:7], 0 offen offset:16 sc0 nt sc1"
    assert ld.mods["offen"] == 1 and ld.mods["offset"] == 16 and ld.mods["sc0"] == ld.mods["sc1"] == 1
    assert ld.writes == (D.DecodedReg("v", 1),) and D.DecodedReg("s", 4, 4) in ld.reads
    # global_load_dword v1, v2, s[2:3] offset:-8
    g = _one([0xDC509FF8, 0x01020002])
    assert g.text == "global_load_dword v1, v2, s[2:3] offset:-8" and g.mods["offset"] == -8
    assert g.family == "GLOBAL" and D.DecodedReg("s", 2, 2) in g.reads
    # global_store_dword v[2:3], v5, off: a store reads its data
    st = _one([(0x37 << 26) | (0x1C << 18) | (2 << 14), 2 | (5 << 8) | (0x7F << 16)])
    assert st.text == "global_store_dword v[2:3], v5, off"
    assert st.writes == () and set(st.reads) == {D.DecodedReg("v", 2, 2), D.DecodedReg("v", 5)}
    # ds_read2_b32 v[2:3], v1 offset1:32
    ds = _one([0xD86E2000, 0x02000001])
    assert ds.text == "ds_read2_b32 v[2:3], v1 offset1:32" and ds.mods["offset1"] == 32
    assert ds.writes == (D.DecodedReg("v", 2, 2),)


def test_waitcnt_and_branch_target():
    w = _one([0xBF8C0370])
    assert w.text == "s_waitcnt vmcnt(0) lgkmcnt(3)"
    assert (w.mods["vmcnt"], w.mods["lgkmcnt"], w.mods["expcnt"]) == (0, 3, 7)
    b = D.decode(_bytes([0xBF800000, 0xBF85FFFE]), "gfx942", base=0x100)[1]  # s_cbranch_scc1 -2
    assert b.pc == 0x104 and b.branch_target == 0x100 and b.text == "s_cbranch_scc1 65534"


def test_scalar_pairs_align_like_the_hardware():
    # s_mov_b64 with an odd sdst code: the low bit is ignored
    i = _one([(0x17D << 23) | (49 << 16) | (1 << 8) | 2])
    assert i.text == "s_mov_b64 s[48:49], s[2:3]" and i.writes == (D.DecodedReg("s", 48, 2),)


def test_unknown_opcode_names_the_offset():
    data = _bytes([0xBF800000, 0xBF800000, 0xFFFFFFFF])
    with pytest.raises(D.DecodeError) as e:
        D.decode(data, "gfx942")
    assert "offset 0x8" in str(e.value) and "ffffffff" in str(e.value)
    assert e.value.offset == 8
    with pytest.raises(D.DecodeError, match="offset 0x4: .*truncated"):
        D.decode(_bytes([0xBF800000]) + b"\xff\x02", "gfx942")
    with pytest.raises(D.DecodeError, match="offset 0x0: .*unknown SOPP opcode 127"):
        D.decode(_bytes([(0x17F << 23) | (0x7F << 16)]), "gfx942")


# ----------------------------------------------------------------------------- gfx950

def _have_zig():
    try:
        return G.zig_available()
    except Exception:
        return False


GFX950_EXTRA = [
    # modifiers and operand forms of new gfx950 instructions (LLVM assembler syntax)
    "v_mfma_f32_16x16x32_bf16 a[0:3], v[4:7], v[8:11], a[0:3]",
    "v_mfma_f32_16x16x32_bf16 v[0:3], a[4:7], a[8:11], v[0:3] cbsz:1 abid:1 blgp:2",
    "v_mfma_f32_32x32x16_f16 v[0:15], v[16:19], v[20:23], 0",
    "v_mfma_f32_16x16x128_f8f6f4 a[0:3], v[4:7], v[12:17], a[0:3] cbsz:4 blgp:2",
    "v_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:21], v[24:31], v[0:15] cbsz:3",
    "v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[20:23], v24, v25",
    "v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[20:23], v24, v25 "
    "op_sel:[0,1,0] op_sel_hi:[1,1,0]",
    "v_mfma_scale_f32_32x32x64_f8f6f4 a[0:15], v[16:19], v[20:25], a[0:15], v4, v5 cbsz:4 blgp:2",
    "v_bitop3_b32 v1, v2, v3, v4 bitop3:0xe8",
    "v_bitop3_b16 v1, v2, v3, v4 bitop3:0x81",
    "v_permlane32_swap_b32_e64 v1, v2 bound_ctrl:1 fi:1",
    "v_permlane16_swap_b32 v1, v2",
    "v_cvt_pk_bf16_f32 v1, v2, v3",
    "v_cvt_pk_bf16_f32 v1, -v2, |v3| clamp",
    "v_cvt_scalef32_pk_f32_fp8 v[0:1], v2, v3",
    "ds_read_b64_tr_b16 v[0:1], v2 offset:8",
    "buffer_load_dwordx4 v1, s[4:7], 0 offen lds",
    "buffer_load_dwordx3 v1, s[4:7], s3 offen offset:16 lds",
    "global_load_lds_dwordx4 v[2:3], off offset:16",
    "global_load_lds_dwordx3 v2, s[4:5] offset:-64",
    "v_prng_b32 v1, v2",
]


@pytest.mark.skipif(shutil.which(G.mc_for("gfx950")) is None,
                    reason=f"{G.mc_for('gfx950')} not installed (apt-get install llvm-22)")
def test_gfx950_assembler_syntax_round_trip_llvm_22():
    """Modifiers and operand forms of the new gfx950 instructions: llvm-mc-22 assembles each line,
    isagen decodes the bytes to llvm-mc-22's own disassembly of them."""
    src = "\n".join(GFX950_EXTRA) + "\n"
    r = subprocess.run([G.mc_for("gfx950"), "-triple", "amdgcn-amd-amdhsa", "-mcpu=gfx950", "-show-encoding"],
                       input=src, capture_output=True, text=True, check=True)
    enc = [bytes(int(x, 16) for x in m.group(1).split(","))
           for m in re.finditer(r"encoding: \[([^\]]*)\]", r.stdout)]
    assert len(enc) == len(GFX950_EXTRA), r.stderr
    words = [struct.unpack(f"<{len(b) // 4}I", b) for b in enc]
    ref = G.disassemble(words, "gfx950")
    bad = [f"{t!r}: llvm '{want}' isagen '{D.decode_one(b, 0, 'gfx950').text}'"
           for t, b, want in zip(GFX950_EXTRA, enc, ref) if D.decode_one(b, 0, "gfx950").text != want]
    assert not bad, "\n".join(bad)


def test_gfx950_table_differences():
    """What the generator found, pinned: gfx950 dropped the xf32 MFMAs and buffer_wbinvl1*, and
    added the CDNA4 instructions the brief lists."""
    t = D.opcode_table("gfx950")
    names = {e.name for ops in t.fam.values() for e in ops.values()}
    for n in ("v_mfma_f32_16x16x32_bf16", "v_mfma_f32_32x32x16_bf16", "v_mfma_f32_16x16x32_f16",
              "v_mfma_f32_32x32x16_f16", "v_mfma_scale_f32_16x16x128_f8f6f4",
              "v_mfma_scale_f32_32x32x64_f8f6f4", "v_cvt_pk_bf16_f32", "ds_read_b64_tr_b16",
              "v_permlane16_swap_b32", "v_permlane32_swap_b32", "v_prng_b32",
              "v_cvt_scalef32_pk_f32_fp8", "global_load_lds_dwordx4"):
        assert n in names, n
    assert "v_mfma_f32_16x16x8_xf32" not in names and "buffer_wbinvl1" not in names
    # gfx942 MFMAs keep their opcodes
    assert t.fam["VOP3P"][97].name == "v_mfma_f32_16x16x16_bf16"


def test_gfx950_decoding_examples():
    # v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[20:23], v24, v25
    ins = D.decode(_bytes([0xD3AC0000, 0x00023318, 0xD3AD0800, 0x04521904]), "gfx950")
    assert len(ins) == 1 and ins[0].size == 16 and ins[0].mai
    i = ins[0]
    assert i.text == "v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[20:23], v24, v25 op_sel_hi:[0,0,0]"
    assert i.mods["scale_byte"] == (0, 0)
    # op_sel[i] | op_sel_hi[i] << 1 is the byte of scale source i (llvm-mc-22 -show-encoding of
    # "... v24, v25 op_sel:[1,0,0] op_sel_hi:[0,1,0]"; clang-22 emits it for opsel_a=1, opsel_b=2);
    # w0 bits 13-14 (a third op_sel/op_sel_hi bit) do not exist and are ignored, as LLVM 22 does
    for w0 in (0xD3AC0800, 0xD3AC6800):
        s = D.decode(_bytes([w0, 0x10023318, 0xD3AD0800, 0x04521904]), "gfx950")[0]
        assert s.text.endswith("v24, v25 op_sel:[1,0,0] op_sel_hi:[0,1,0]") and s.mods["scale_byte"] == (1, 2)
    assert (D.DecodedReg("v", 24) in i.reads and D.DecodedReg("v", 4, 8) in i.reads
            and i.writes == (D.DecodedReg("v", 0, 4),))
    # f8f6f4 operand widths follow the cbsz/blgp formats (fp4 = 4 dwords, fp6 = 6)
    j = D.decode_one(_bytes([0xD3AD8400, 0x44021904]), 0, "gfx950")
    assert j.text == "v_mfma_f32_16x16x128_f8f6f4 a[0:3], v[4:7], v[12:17], a[0:3] cbsz:4 blgp:2"
    # v_bitop3_b32 v1, v2, v3, v4 bitop3:0x12
    k = D.decode_one(_bytes([0xD2340201, 0x44120702]), 0, "gfx950")
    assert k.text == "v_bitop3_b32 v1, v2, v3, v4 bitop3:0x12" and k.mods["bitop3"] == 0x12
    # v_permlane16_swap_b32 swaps: both operands are read and written
    p = D.decode_one(_bytes([0x7E02B302]), 0, "gfx950")
    assert p.text == "v_permlane16_swap_b32_e32 v1, v2"   # llvm-objdump-22 spells the VOP1 form _e32
    assert set(p.reads) == set(p.writes) == {D.DecodedReg("v", 1), D.DecodedReg("v", 2)}
    # gfx950 opcodes are unknown to gfx942
    with pytest.raises(D.DecodeError, match="unknown VOP1 opcode 89"):
        D.decode_one(_bytes([0x7E02B302]), 0, "gfx942")


# ----------------------------------------------------------------------------- one source with the ISA layer

def _keys(regs):
    return {(r.file, r.index + k) for r in regs if r.file in ("v", "a", "s") for k in range(r.count)}


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_register_effects_agree_with_the_isa_table(target):
    """Where the decoder and the ISA layer overlap they agree: every instance of every ISA-table entry that
    LLVM assembled (tests/isa/test_isa_encoding.py builds them, one assembler run per target) decodes to the
    same size and to the same VGPRs/AGPRs/SGPRs read and written as the ISA table's defs/uses say (the
    decoder lists implicit EXEC/SCC/M0 effects nowhere, so those are left out).  Two documented differences:
    the old value a d16 load or a DPP instruction keeps in part of its destination is a use for the ISA
    table's dataflow and not a listed read for the decoder (the report and the sanitizer treat those as
    partial writes themselves)."""
    from test_isa_encoding import evaluated
    records = [r for r in evaluated(target) if r["inst"] is not None and r["llvm"] is not None]
    bad, n = [], 0
    for r in records:
        ins = D.decode_one(bytes(r["bytes"]), 0, target)
        isa = r["inst"]
        ours_w = {k for k in isa.defs() if k[0] in ("v", "a", "s")}
        ours_r = {k for k in isa.uses() if k[0] in ("v", "a", "s")}
        dec_w, dec_r = _keys(ins.writes), _keys(ins.reads)
        if "_d16" in ins.name or ins.variant == "dpp":
            ours_r -= ours_w - dec_r
        n += 1
        if (ins.size, dec_w, dec_r) != (len(r["bytes"]), ours_w, ours_r):
            bad.append(f"  {r['text']}: decoder size {ins.size} writes {sorted(dec_w)} reads {sorted(dec_r)}; "
                       f"ISA table {len(r['bytes'])} bytes, writes {sorted(ours_w)} reads {sorted(ours_r)}")
    assert not bad, f"{len(bad)} of {n} disagree:\n" + "\n".join(bad[:20])
    assert n > 5000
