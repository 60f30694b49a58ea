"""Operand values: register slices, special registers, source modifiers, constants and ds_swizzle
offsets -- the constant and swizzle rules checked against LLVM's assembler and printer."""

from __future__ import annotations

import math
import random
import re
import struct

import pytest
from isa_llvm import assemble_lines, normalise_llvm, require

from isagen.errors import ISAError
from isagen.isa.operands import (
    EXEC,
    M0,
    OFF,
    SCC,
    VCC,
    A,
    Label,
    Reg,
    S,
    Special,
    V,
    abs_,
    canonical_swizzle,
    is_inline_constant,
    neg,
    operand_keys,
    render_constant,
    swizzle,
    swizzle_text,
)
from isagen.isa.table import isa_table

T942 = isa_table("gfx942")


# ============================================================================ registers

def test_slicing_is_relative_and_python_style():
    acc = Reg("a", 0, 16)
    assert str(acc) == "a[0:15]" and len(acc) == 16
    assert str(acc[4:8]) == "a[4:7]"
    assert str(acc[3]) == "a3"
    assert str(acc[-1]) == "a15"
    assert str(acc[12:]) == "a[12:15]" and str(acc[:2]) == "a[0:1]"
    inner = acc[8:16][2:4]                   # a slice of a slice stays relative to its parent
    assert (inner.cls, inner.index, inner.count) == ("a", 10, 2)
    assert acc[4:8].last == 7


@pytest.mark.parametrize("bad,message", [
    (lambda r: r[0:8:2], "take no step"),
    (lambda r: r[5:5], "empty register slice"),
    (lambda r: r[16], r"register index 16 outside a\[0:15\]"),
    (lambda r: r[-17], "outside"),
    (lambda r: r["x"], "indexed by int or slice"),
    (lambda r: r.split(5), r"does not split into pieces of 5"),
])
def test_slicing_errors(bad, message):
    with pytest.raises(ISAError, match=message):
        bad(Reg("a", 0, 16))


def test_register_construction_errors():
    with pytest.raises(ISAError, match="unknown register class 'q'"):
        Reg("q", 0)
    with pytest.raises(ISAError, match="bad register range"):
        Reg("v", -1)
    with pytest.raises(ISAError, match="bad register range"):
        Reg("v", 0, 0)


def test_split_and_keys():
    acc = Reg("a", 16, 16)
    tiles = acc.split(4)
    assert [str(t) for t in tiles] == ["a[16:19]", "a[20:23]", "a[24:27]", "a[28:31]"]
    assert Reg("s", 4, 2).keys() == [("s", 4), ("s", 5)]
    assert V[7].keys() == [("v", 7)]
    assert operand_keys(3) == [] and operand_keys(Label(".L")) == [] and operand_keys(OFF) == []


def test_factories_use_python_slice_ends():
    assert V[4:8] == Reg("v", 4, 4) and str(V[4:8]) == "v[4:7]"
    assert A[0] == Reg("a", 0) and S[0:2] == Reg("s", 0, 2)


def test_named_registers_render_with_their_symbol():
    x = Reg("v", 8, 8, "vgpr_x", 8)
    assert str(x) == "v[vgpr_x:vgpr_x+7]"
    assert str(x[4:8]) == "v[vgpr_x+4:vgpr_x+7]"
    assert str(x[0]) == "v[vgpr_x]" and str(x[1]) == "v[vgpr_x+1]"
    assert x[4:8].physical() == "v[12:15]"
    assert x[4:8].keys() == [("v", 12), ("v", 13), ("v", 14), ("v", 15)]
    assert repr(x[1]) == "Reg(v9, vgpr_x)"


def test_special_registers():
    assert VCC.keys() == [("vcc_lo", 0), ("vcc_hi", 0)]
    assert EXEC.keys() == [("exec_lo", 0), ("exec_hi", 0)]
    assert M0.keys() == [("m0", 0)] and SCC.keys() == [("scc", 0)]
    assert Special("vcc_hi").keys() == [("vcc_hi", 0)]
    assert VCC.count == 2 and M0.count == 1 and SCC.count == 1
    assert str(EXEC) == "exec"
    with pytest.raises(ISAError, match="unknown special register 'flat_scratch'"):
        Special("flat_scratch")
    assert str(OFF) == "off" and OFF.keys() == [] and repr(OFF) == "OFF"


def test_source_modifiers_compose():
    assert str(neg(V[1])) == "-v1"
    assert str(abs_(V[1])) == "|v1|"
    assert str(neg(abs_(V[1]))) == "-|v1|" and str(abs_(neg(V[1]))) == "-|v1|"
    assert str(neg(neg(V[1]))) == "v1"
    assert neg(V[2:4]).keys() == [("v", 2), ("v", 3)] and neg(V[2:4]).count == 2


# ============================================================================ constants

INTS = list(range(-20, 70)) + [0x7FFFFFFF, -(1 << 31), 0xFFFFFFFF, 0x3F800000]
FLOATS = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0, 1 / (2 * math.pi), 0.15915494, -1 / (2 * math.pi),
          3.0, 0.25, 8.0, 1e-3, 16.0, 64.0, -16.0, 65504.0, 1.5, float("inf"), 0.1591549]


def _f32(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def test_inline_constants_match_llvm_encoding_lengths():
    """An inline constant encodes without a literal dword, any other value with one -- and the literal
    LLVM writes is the value's 32 bits.  v_mov_b32 (VOP1, 4 bytes + literal) and s_mov_b32 (SOP1)."""
    require("gfx942")
    values = INTS + FLOATS
    insts = []
    for value in values:
        insts += [T942["v_mov_b32"](V[0], value), T942["s_mov_b32"](S[0], value)]
    results = assemble_lines([i.render() for i in insts], "gfx942")
    for i, value in enumerate(values):
        for inst, (text, data) in zip(insts[2 * i:2 * i + 2], results[2 * i:2 * i + 2]):
            assert text is not None, (value, data)
            assert normalise_llvm(text) == inst.render() and inst.size == len(data), (value, text)
            inline = is_inline_constant(value)
            assert len(data) == (4 if inline else 8), (value, text, data.hex())
            if not inline:
                bits = value & 0xFFFFFFFF if isinstance(value, int) else _f32(value)
                assert int.from_bytes(data[4:8], "little") == bits, (value, text)


def test_negative_zero_is_a_literal():
    assert not is_inline_constant(-0.0) and is_inline_constant(0.0)
    assert render_constant(-0.0) == "0x80000000" and render_constant(0.0) == "0"


def test_one_over_two_pi_is_inline_only_as_its_fp32_value():
    assert is_inline_constant(1 / (2 * math.pi))
    assert is_inline_constant(0.15915494)                 # rounds to the same fp32 bits
    assert not is_inline_constant(0.1591549)              # a different fp32 value
    assert render_constant(1 / (2 * math.pi)) == "0.15915494"
    assert render_constant(1 / (2 * math.pi), "f64") == "0.15915494309189532"


def test_sixty_four_bit_operands_and_f16_literals_against_llvm():
    """64-bit operands take the same inline constants (1/(2π) spelled in double precision); a 16-bit
    float literal is written as its f16 bits."""
    require("gfx942")
    cases = [
        (T942["v_mov_b64"](V[0:2], 1 / (2 * math.pi)), 4),
        (T942["s_mov_b64"](S[0:2], -4.0), 4),
        (T942["s_mov_b64"](S[0:2], 0x12345), 8),
        (T942["v_lshlrev_b64"](V[0:2], 3, 0.5), 8),
        (T942["v_add_f16"](V[0], 1.5, V[1]), 8),
        (T942["v_add_f16"](V[0], 0.5, V[1]), 4),
    ]
    results = assemble_lines([c.render() for c, _ in cases], "gfx942")
    for (inst, size), (text, data) in zip(cases, results):
        assert text is not None, (inst.render(), data)
        assert len(data) == size == inst.size, inst.render()
    assert results[4][1][4:6] == struct.pack("<e", 1.5)


def test_constant_range_errors():
    with pytest.raises(ISAError, match="does not fit in 32 bits"):
        render_constant(1 << 32)
    with pytest.raises(ISAError, match="booleans are not instruction constants"):
        render_constant(True)
    with pytest.raises(ISAError, match="v_mov_b32: operand src0: constant 4294967296 does not fit in 32 bits"):
        T942["v_mov_b32"](V[0], 1 << 32)
    with pytest.raises(ISAError, match="v_add_u16: operand src0: literal 0x12345 does not fit the 16-bit operand"):
        T942["v_add_u16"](V[0], 0x12345, V[1])


# ============================================================================ ds_swizzle offsets

PATTERNS = [
    ("QUAD_PERM", 0, 1, 2, 3), ("QUAD_PERM", 3, 2, 1, 0), ("QUAD_PERM", 1, 1, 3, 3),
    ("SWAP", 1), ("SWAP", 2), ("SWAP", 4), ("SWAP", 8), ("SWAP", 16),
    ("REVERSE", 2), ("REVERSE", 4), ("REVERSE", 8), ("REVERSE", 16), ("REVERSE", 32),
    ("BROADCAST", 2, 1), ("BROADCAST", 4, 3), ("BROADCAST", 8, 0), ("BROADCAST", 16, 9), ("BROADCAST", 32, 31),
    ("BITMASK_PERM", "01pip"), ("BITMASK_PERM", "ppppp"), ("BITMASK_PERM", "iiiii"), ("BITMASK_PERM", "10p0i"),
]


def test_swizzle_offsets_match_llvms_macro():
    """swizzle(...) computes the same 16 bits LLVM's assembler encodes for offset:swizzle(...)."""
    require("gfx942")
    lines = []
    for mode, *args in PATTERNS:
        spelled = ",".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
        lines.append(f"ds_swizzle_b32 v0, v1 offset:swizzle({mode},{spelled})")
    for (mode, *args), (text, data) in zip(PATTERNS, assemble_lines(lines, "gfx942")):
        assert text is not None, (mode, args, data)
        assert int.from_bytes(data[:2], "little") == swizzle(mode, *args), (mode, args)


def test_swizzle_text_is_llvms_printer():
    """For every offset, isagen's text is what LLVM prints (and a canonical offset round-trips)."""
    require("gfx942")
    rng = random.Random(7)
    offsets = sorted(set(range(1, 0x400)) | {rng.randrange(1, 0x10000) for _ in range(600)}
                     | {0x8000 | i for i in range(256)})
    lines = [f"ds_swizzle_b32 v0, v1 offset:{o}" for o in offsets]
    results = assemble_lines(lines, "gfx942")
    for offset, (text, _) in zip(offsets, results):
        assert re.search(r"offset:(\S+)", text).group(1) == swizzle_text(offset), hex(offset)
    # the rendered instruction uses the canonical offset, so LLVM re-encodes the same bits
    insts = [T942["ds_swizzle_b32"](V[0], V[1], offset=o) for o in offsets]
    for inst, (text, data) in zip(insts, assemble_lines([i.render() for i in insts], "gfx942")):
        assert int.from_bytes(data[:2], "little") == inst.mods.get("offset", 0), inst.render()
        assert text.split(None, 1)[1] == inst.render().split(None, 1)[1]


def test_canonical_swizzle_keeps_the_lane_pattern():
    """Normalising a BITMASK offset never changes which lane each lane reads."""
    def source_lanes(offset):
        a, o, x = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
        return [((lane & a) | o) ^ x for lane in range(32)]
    for offset in range(0, 0x8000, 7):
        assert source_lanes(canonical_swizzle(offset)) == source_lanes(offset), hex(offset)
        assert canonical_swizzle(canonical_swizzle(offset)) == canonical_swizzle(offset)


@pytest.mark.parametrize("args,message", [
    (("SWAP", 3), "SWAP takes a group size of 1, 2, 4, 8 or 16"),
    (("REVERSE", 1), "REVERSE takes a group size"),
    (("BROADCAST", 8, 8), "BROADCAST takes a group size"),
    (("QUAD_PERM", 0, 1, 2), "QUAD_PERM takes 4 lane numbers"),
    (("BITMASK_PERM", "01pi"), "BITMASK_PERM takes a 5-character string"),
    (("ROTATE", 1), "unknown mode"),
])
def test_swizzle_errors(args, message):
    with pytest.raises(ISAError, match=message):
        swizzle(*args)
