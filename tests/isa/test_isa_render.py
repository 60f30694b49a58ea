"""Instruction objects: rendering (named registers, comments, modifier order) checked against LLVM,
and the dataflow facts the checkers rely on (defs/uses/unit/counter/flags)."""

from __future__ import annotations

import pytest
from isa_llvm import assemble_lines, normalise_llvm, require

from isagen.errors import ISAError
from isagen.isa.instruction import Instruction
from isagen.isa.operands import EXEC, M0, OFF, SCC, VCC, A, Label, Reg, S, Special, V, neg, swizzle
from isagen.isa.table import isa_table

T = {t: isa_table(t) for t in ("gfx942", "gfx950")}
T942 = T["gfx942"]

# ============================================================================ named registers

# allocations as a register pool hands them out: (class, first register, count, .set symbol)
ALLOCS = [("v", 8, 8, "vgpr_x"), ("v", 40, 16, "vgpr_tile"), ("a", 0, 32, "agpr_acc"), ("s", 8, 4, "sgpr_rsrc"),
          ("s", 20, 2, "sgpr_ptr"), ("s", 24, 1, "sgpr_k"), ("v", 1, 1, "vgpr_addr")]


def _named():
    return {sym: Reg(cls, first, count, sym, first) for cls, first, count, sym in ALLOCS}


def _program(r):
    """A mix of families, every operand written through a named allocation."""
    x, tile, acc, rsrc, ptr, k, addr = (r[s] for s in ("vgpr_x", "vgpr_tile", "agpr_acc", "sgpr_rsrc", "sgpr_ptr",
                                                      "sgpr_k", "vgpr_addr"))
    return [
        ("gfx942", T942["v_add_f32"](x[0], x[1], x[2])),
        ("gfx942", T942["v_mov_b32"](x[7], k)),
        ("gfx942", T942["ds_read_b128"](x[4:8], addr, offset=256)),
        ("gfx942", T942["ds_write_b64"](addr, x[2:4])),
        ("gfx942", T942["buffer_load_dwordx4"](tile[0:4], addr, rsrc, k, offen=True, offset=16)),
        ("gfx942", T942["buffer_load_dword_lds"](addr, rsrc, 0, offen=True)),
        ("gfx942", T942["global_load_dwordx2"](x[0:2], addr, ptr)),
        ("gfx942", T942["s_load_dwordx4"](rsrc, ptr, 0x10)),
        ("gfx942", T942["v_mfma_f32_32x32x8_bf16"](acc[0:16], x[0:2], x[2:4], acc[0:16])),
        ("gfx942", T942["v_mfma_f32_16x16x16_bf16"](acc[16:20], tile[4:6], tile[6:8], acc[16:20], blgp=1)),
        ("gfx942", T942["v_accvgpr_read_b32"](tile[15], acc[31])),
        ("gfx942", T942["v_pk_mul_f32"](tile[8:10], tile[10:12], ptr, op_sel_hi=[1, 0])),
        ("gfx942", T942["v_cmp_gt_f32"](VCC, 0, x[5])),
        ("gfx942", T942["v_cndmask_b32"](x[6], 0, x[5], VCC)),
        ("gfx942", T942["v_add_co_u32"](x[0], ptr, k, x[1])),
        ("gfx942", T942["v_mov_b32"](x[3], x[4], row_shr=1, bound_ctrl=True)),
        ("gfx942", T942["s_add_u32"](k, k, 4)),
        ("gfx950", T["gfx950"]["v_mfma_f32_16x16x32_bf16"](acc[0:4], tile[0:4], tile[4:8], acc[0:4])),
        ("gfx950", T["gfx950"]["ds_read_b64_tr_b16"](x[0:2], addr, offset=64)),
        ("gfx950", T["gfx950"]["buffer_load_dwordx4_lds"](addr, rsrc, k, offen=True)),
        ("gfx950", T["gfx950"]["v_cvt_pk_bf16_f32"](x[0], x[1], x[2])),
    ]


def _physical(inst: Instruction) -> Instruction:
    ops = tuple(Reg(o.cls, o.index, o.count) if isinstance(o, Reg) else o for o in inst.ops)
    return Instruction(inst.desc, ops, inst.mods, inst.comment)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_named_registers_assemble_to_the_physical_bytes(target):
    """``v[vgpr_x+4:vgpr_x+7]`` with ``.set vgpr_x, 8`` gives the same machine code as ``v[12:15]``."""
    require(target)
    insts = [i for t, i in _program(_named()) if t == "gfx942" or t == target]
    sets = [f".set {sym}, {first}" for _, first, _, sym in ALLOCS]
    named_text = [i.render() for i in insts]
    assert any("vgpr_x+4:vgpr_x+7" in t for t in named_text) and any("v[vgpr_x]" in t for t in named_text)
    named = assemble_lines(named_text, target, prefix=sets)
    physical = assemble_lines([_physical(i).render() for i in insts], target)
    for inst, (ntext, nbytes), (ptext, pbytes) in zip(insts, named, physical):
        assert ntext is not None and ptext is not None, (inst.render(), nbytes, pbytes)
        assert nbytes == pbytes, inst.render()
        # LLVM prints the physical registers: the same text as isagen's physical rendering
        assert normalise_llvm(ntext) == _physical(inst).render()
        assert inst.defs() == _physical(inst).defs() and inst.uses() == _physical(inst).uses()


# ============================================================================ comments

def test_comments_are_assembler_comments():
    require("gfx942")
    plain = T942["s_waitcnt"](vmcnt=0)
    commented = T942["s_waitcnt"](vmcnt=0, comment="tile A landed in LDS; ds_read next")
    text = commented.render()
    assert text.startswith("s_waitcnt vmcnt(0)") and text.endswith("// tile A landed in LDS; ds_read next")
    assert commented.render(with_comment=False) == plain.render()
    assert plain.with_comment("why").comment == "why" and plain.comment is None
    (t1, b1), (t2, b2) = assemble_lines([plain.render(), text], "gfx942")
    assert b1 == b2 and normalise_llvm(t2) == plain.render()
    assert commented == plain and hash(commented) == hash(plain)       # the comment is not the instruction
    assert repr(plain) == "<s_waitcnt vmcnt(0)>"


# ============================================================================ modifier order

ORDER_CASES = [
    ("buffer_load_dword", (V[0], V[1], S[0:4], 0), {"nt": True, "sc1": True, "offset": 16, "offen": True, "sc0": True}),
    ("buffer_load_dword", (V[0], V[2:4], S[0:4], M0), {"offen": True, "idxen": True}),
    ("buffer_load_dword_lds", (OFF, S[4:8], 0), {"sc1": True, "offset": 4, "sc0": True}),
    ("global_store_dwordx4", (V[2:4], V[4:8], OFF), {"sc1": True, "nt": True, "offset": -64}),
    ("v_mov_b32", (V[0], V[1]), {"bound_ctrl": True, "bank_mask": 5, "row_mask": 10, "quad_perm": [1, 0, 3, 2]}),
    ("v_add_f32", (V[0], V[1], V[2]), {"bank_mask": 3, "row_bcast": 15}),
    ("v_add_f32", (V[0], neg(V[1]), V[2]), {"omod": "div:2", "clamp": True}),
    ("v_pk_fma_f32", (V[0:2], V[2:4], V[4:6], V[6:8]),
     {"clamp": True, "neg_hi": [0, 0, 1], "neg_lo": [1, 0, 0], "op_sel_hi": [0, 1, 1], "op_sel": [1, 0, 0]}),
    ("v_mfma_f32_32x32x8_f16", (A[0:16], V[0:2], V[2:4], A[0:16]), {"blgp": 2, "abid": 1, "cbsz": 1}),
    ("ds_read2_b32", (V[0:2], V[2]), {"offset1": 9, "offset0": 1}),
    ("ds_swizzle_b32", (V[0], V[1]), {"offset": swizzle("BITMASK_PERM", "01pip")}),
    ("s_waitcnt", (), {"lgkmcnt": 0, "expcnt": 1, "vmcnt": 3}),
    ("s_waitcnt", (), {"vmcnt": 63}),                  # all counters at their maximum: LLVM spells all three
    ("s_load_dword", (S[0], S[2:4], 0x40), {"glc": True}),
    ("v_cvt_pk_fp8_f32", (V[0], V[1], V[2]), {"op_sel": [0, 0, 1]}),
]


@pytest.mark.parametrize("name,ops,mods", ORDER_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(ORDER_CASES)])
def test_modifiers_render_in_llvms_order_whatever_order_they_are_given(name, ops, mods):
    require("gfx942")
    forward = T942[name](*ops, **mods)
    backward = T942[name](*ops, **dict(reversed(list(mods.items()))))
    assert forward.render() == backward.render()
    (text, data), = assemble_lines([forward.render()], "gfx942")
    assert text is not None, (forward.render(), data)
    assert normalise_llvm(text) == forward.render()
    assert len(data) == forward.size


def test_default_valued_modifiers_are_left_out():
    assert T942["v_add_f32"](V[0], V[1], V[2], clamp=False, omod=0).render() == "v_add_f32 v0, v1, v2"
    assert T942["v_pk_add_f32"](V[0:2], V[2:4], V[4:6], op_sel=[0, 0], op_sel_hi=[1, 1]).render() == \
        "v_pk_add_f32 v[0:1], v[2:3], v[4:5]"
    assert T942["v_mov_b32"](V[0], V[1], row_shr=1).render() == \
        "v_mov_b32_dpp v0, v1 row_shr:1 row_mask:0xf bank_mask:0xf"


def test_encoding_form_and_size():
    add = T942["v_add_f32"]
    assert (add(V[0], V[1], V[2]).encoding, add(V[0], V[1], V[2]).size) == ("e32", 4)
    assert (add(V[0], 3.5, V[2]).encoding, add(V[0], 3.5, V[2]).size) == ("e32", 8)
    assert (add(V[0], V[1], S[2]).encoding, add(V[0], V[1], S[2]).size) == ("e64", 8)
    assert add(V[0], V[1], V[2], row_shr=1).encoding == "dpp"
    assert T942["v_cmp_eq_u32"](S[0:2], V[1], V[2]).encoding == "e64"
    assert T942["v_cmp_eq_u32"](VCC, V[1], V[2]).encoding == "e32"
    assert T942["s_mov_b32"](S[0], 0x1234).size == 8 and T942["s_mov_b32"](S[0], 64).size == 4
    assert T942["ds_read_b32"](V[0], V[1]).encoding == "native"


# ============================================================================ dataflow facts

def _keys(*specials):
    out = []
    for s in specials:
        out += Special(s).keys()
    return out


def test_vopc_writes_its_sdst_vcc_or_sgpr_pair():
    e32 = T942["v_cmp_lt_f32"](VCC, V[0], V[1])
    assert set(e32.defs()) == set(_keys("vcc")) and ("exec_lo", 0) in e32.uses()
    e64 = T942["v_cmp_lt_f32"](S[4:6], V[0], V[1])
    assert e64.defs() == [("s", 4), ("s", 5)]
    cmpx = T942["v_cmpx_gt_u32"](VCC, V[0], V[1])
    assert set(cmpx.defs()) == set(_keys("vcc", "exec"))


def test_vcc_and_lane_readers():
    cnd = T942["v_cndmask_b32"](V[0], V[1], V[2], VCC)
    assert set(_keys("vcc")) <= set(cnd.uses())
    assert set(_keys("vcc")) <= set(T942["s_cbranch_vccz"](Label(".L")).uses())
    assert set(_keys("exec")) <= set(T942["s_cbranch_execnz"](Label(".L")).uses())
    assert ("scc", 0) in T942["s_cbranch_scc1"](Label(".L")).uses()
    rl = T942["v_readlane_b32"](S[0], V[3], S[7])
    assert ("s", 7) in rl.uses() and ("v", 3) in rl.uses() and rl.defs() == [("s", 0)]
    wl = T942["v_writelane_b32"](V[3], S[0], 5)
    assert ("v", 3) in wl.uses() and wl.defs() == [("v", 3)]   # the other lanes keep their value
    addc = T942["v_addc_co_u32"](V[0], VCC, V[1], V[2], VCC)
    assert set(_keys("vcc")) <= set(addc.defs()) and set(_keys("vcc")) <= set(addc.uses())


def test_exec_and_m0():
    sv = T942["s_and_saveexec_b64"](S[0:2], VCC)
    assert set(sv.defs()) == {("s", 0), ("s", 1), *_keys("exec", "scc")}
    assert set(_keys("exec", "vcc")) <= set(sv.uses())
    lds = T942["buffer_load_dword_lds"](V[1], S[0:4], 0, offen=True)
    assert ("m0", 0) in lds.uses() and lds.defs() == []
    assert lds.desc.flags >= {"load", "lds_dma", "lds_write"} and lds.counter == "vmcnt"
    glds = T942["global_load_lds_dword"](V[0:2], OFF)
    assert ("m0", 0) in glds.uses() and glds.counter == "vmcnt"
    assert ("m0", 0) not in T942["ds_read_b32"](V[0], V[1]).uses()      # gfx9 DS needs no M0


def test_read_write_operands():
    assert ("v", 0) in T942["v_fmac_f32"](V[0], V[1], V[2]).uses()
    assert ("v", 0) not in T942["v_fma_f32"](V[0], V[1], V[2], V[3]).uses()
    dpp = T942["v_mov_b32"](V[0], V[1], row_shr=1)
    assert ("v", 0) in dpp.uses()                                       # disabled lanes keep v0
    assert ("v", 0) not in T942["v_mov_b32"](V[0], V[1]).uses()
    swap = T["gfx950"]["v_permlane32_swap_b32"](V[0], V[1])
    assert set(swap.defs()) == set(swap.uses()) - set(_keys("exec")) == {("v", 0), ("v", 1)}
    assert ("v", 0) in T942["ds_read_u16_d16_hi"](V[0], V[1]).uses()


def test_units_counters_and_flags():
    assert T942["v_exp_f32"](V[0], V[1]).unit == "trans"
    assert T942["v_add_f32"](V[0], V[1], V[2]).unit == "valu"
    mfma = T942["v_mfma_f32_16x16x16_bf16"](A[0:4], V[0:2], V[2:4], A[0:4])
    assert mfma.unit == "mfma" and mfma.desc.mfma.passes == 4 and mfma.desc.flags == {"mfma"}
    assert mfma.defs() == [("a", i) for i in range(4)] and ("a", 0) in mfma.uses()
    assert T942["ds_read_b128"](V[0:4], V[4]).counter == "lgkmcnt"
    assert T942["s_load_dword"](S[0], S[2:4], 0).counter == "lgkmcnt"
    assert T942["s_memtime"](S[0:2]).counter == "lgkmcnt"
    assert T942["global_store_dword"](V[0:2], V[2], OFF).counter == "vmcnt"
    assert T942["buffer_store_dword"](V[0], OFF, S[0:4], 0).desc.flags == {"store"}
    assert T942["s_barrier"]().desc.flags == {"barrier"} and T942["s_barrier"]().unit == "sopp"
    assert "branch" in T942["s_setpc_b64"](S[0:2]).desc.flags
    assert T942["ds_swizzle_b32"](V[0], V[1]).desc.flags == frozenset()   # crossbar only, no LDS memory
    assert T942["ds_bpermute_b32"](V[0], V[1], V[2]).desc.flags == frozenset()


# SALU instructions that write / read SCC, transcribed from LLVM's SOPInstructions.td ("Defs = [SCC]",
# "Uses = [SCC]"); SOPC compares all define SCC.
LLVM_SCC_DEFS = {
    "s_not_b32", "s_not_b64", "s_bcnt1_i32_b32", "s_bcnt1_i32_b64", "s_abs_i32", "s_and_saveexec_b64",
    "s_or_saveexec_b64", "s_xor_saveexec_b64", "s_andn2_saveexec_b64", "s_orn2_saveexec_b64",
    "s_add_u32", "s_add_i32", "s_sub_u32", "s_sub_i32", "s_addc_u32", "s_subb_u32", "s_min_i32", "s_min_u32",
    "s_max_i32", "s_max_u32", "s_absdiff_i32", "s_lshl1_add_u32", "s_lshl2_add_u32", "s_lshl3_add_u32",
    "s_lshl4_add_u32", "s_lshl_b32", "s_lshl_b64", "s_lshr_b32", "s_lshr_b64", "s_ashr_i32", "s_ashr_i64",
    "s_bfe_u32", "s_bfe_i32", "s_bfe_u64", "s_bfe_i64", "s_addk_i32",
    *(f"s_{op}_{w}" for op in ("and", "or", "xor", "xnor", "nand", "nor", "andn2", "orn2") for w in ("b32", "b64")),
    *(f"s_cmpk_{c}_{t}" for c in ("eq", "lg", "gt", "ge", "lt", "le") for t in ("i32", "u32")),
}
LLVM_SCC_USES = {"s_addc_u32", "s_subb_u32", "s_cselect_b32", "s_cselect_b64", "s_cmov_b32", "s_cmov_b64",
                 "s_cmovk_i32"}


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_scc_effects_match_llvm(target):
    for desc in T[target]:
        if desc.unit != "salu":
            continue
        writes = "scc" in desc.implicit_defs
        expected = desc.name in LLVM_SCC_DEFS or desc.fmt == "SOPC"
        assert writes == expected, f"{desc.name}: writes SCC {writes}, LLVM says {expected}"
        assert ("scc" in desc.implicit_uses) == (desc.name in LLVM_SCC_USES), desc.name


def test_instruction_built_for_one_target_is_not_the_others():
    with pytest.raises(ISAError,
                       match="'ds_read_b64_tr_b16' does not exist on gfx942 \\(it is a gfx950 instruction\\)"):
        T942["ds_read_b64_tr_b16"]
    with pytest.raises(ISAError, match="'v_mfma_f32_16x16x8_xf32' does not exist on gfx950"):
        T["gfx950"]["v_mfma_f32_16x16x8_xf32"]
    with pytest.raises(ISAError, match="'v_frobnicate' is not an instruction isagen knows for gfx942"):
        T942["v_frobnicate"]


def test_signature_and_operand_lookup():
    desc = T942["v_addc_co_u32"]
    assert desc.signature() == "vdst=v, sdst=s2, src0:vsrc, src1:vsrc, cin:sgpr2"
    assert T942["v_fmac_f32"].signature() == "vdst+v, src0:vsrc, src1:vsrc"
    inst = desc(V[0], VCC, V[1], V[2], VCC)
    assert inst.operand("cin") == VCC
    with pytest.raises(ISAError, match="v_addc_co_u32 has no operand 'carry'"):
        inst.operand("carry")
    assert SCC.keys() == [("scc", 0)] and EXEC.count == 2
