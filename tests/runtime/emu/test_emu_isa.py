"""Instruction semantics of the emulator against references written from the ISA's definitions
(numpy / exact rational arithmetic / plain Python per lane), one small assembled gfx942 kernel per
group: VALU float (exactly rounded FMA, transcendentals within 1 ulp), conversions, integer and bit
ops, carries, compares and EXEC, DPP lane patterns, SDWA selects, packed math, cross-lane ops and
SALU."""

from fractions import Fraction

import numpy as np
import pytest
from emu_support import build

from isagen.runtime.emu import Device

U32 = np.uint32


def run(body: str, inputs: list, n_out: int, *, sregs_out: int = 0, lds: int = 0, agprs: int = 0):
    """Run ``body`` for one wave: v1..vK = inputs[k-1] (uint32 [64] each), v0 = lane id; returns the
    uint32 [64] values of v[40 .. 40+n_out) after the body."""
    loads = "\n".join(f"  global_load_dword v{1 + k}, v100, s[4:5] offset:{256 * k}" for k in range(len(inputs)))
    stores = "\n".join((f"  v_add_u32 v101, {4096 * (j // 16)}, v100\n" if j % 16 == 0 else "")
                       + f"  global_store_dword v101, v{40 + j}, s[6:7] offset:{256 * (j % 16)}" for j in range(n_out))
    src = f"""
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  v_lshlrev_b32 v100, 2, v0
  s_waitcnt lgkmcnt(0)
{loads}
  s_waitcnt vmcnt(0)
{body}
  s_nop 7
  s_nop 7
{stores}
"""
    co = build("t", src, args=(("ptr", "inp"), ("ptr", "out")), vgprs=104, sgprs=64, lds=lds, agprs=agprs)
    dev = Device("gfx942")
    data = np.stack([np.asarray(x).view(U32) if np.asarray(x).dtype.itemsize == 4 else np.asarray(x, U32)
                     for x in inputs]) if inputs else np.zeros((1, 64), U32)
    din = dev.to_device(np.ascontiguousarray(data))
    dout = dev.to_device(np.zeros((max(n_out, 1), 64), U32))
    reports = dev.load_module(co).launch("t", grid=(1,), block=(64,), args=[din, dout], on_error="collect")
    assert reports == [], [str(r) for r in reports]
    return dev.from_device(dout, (max(n_out, 1), 64), U32)


def f32(x):
    return np.asarray(x, np.float32)


def bits(x):
    return np.asarray(x, np.float32).view(U32)


def ulp_diff(a, b):
    """Distance in float32 ulps (monotone integer mapping of the bit patterns)."""
    def key(x):
        i = np.asarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(key(a) - key(b))


def exact_fma_f32(a, b, c):
    out = []
    for x, y, z in zip(a.tolist(), b.tolist(), c.tolist()):
        q = Fraction(x) * Fraction(y) + Fraction(z)
        f = np.float32(float(q))
        cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
        out.append(min(cands, key=lambda v: (abs(Fraction(float(v)) - q), int(np.float32(v).view(U32)) & 1)))
    return np.array(out, np.float32)


RNG = np.random.default_rng(11)


# ---------------------------------------------------------------------------- float arithmetic
def test_fma_is_exactly_rounded():
    # operands chosen so that a*b+c cancels: double rounding through float64 would be wrong for some
    a = f32(RNG.standard_normal(64) * 3)
    b = f32(RNG.standard_normal(64))
    c = -(a.astype(np.float64) * b).astype(np.float32) + f32(RNG.standard_normal(64) * 1e-6)
    a[:4] = [1 + 2 ** -23, 1.5, 3.0, 0.1]
    b[:4] = [1 + 2 ** -23, 1 + 2 ** -22, 1 / 3, 0.3]
    c[:4] = [-1.0, -1.5, -1.0, -0.03]
    out = run("""
  v_fma_f32 v40, v1, v2, v3
  v_mov_b32 v41, v3
  v_fmac_f32 v41, v1, v2
  v_fma_f32 v42, -v1, v2, -v3
""", [a, b, c], 3)
    ref = exact_fma_f32(a, b, c)
    np.testing.assert_array_equal(out[0], bits(ref))
    np.testing.assert_array_equal(out[1], bits(ref))
    np.testing.assert_array_equal(out[2], bits(-ref))


def test_basic_float_ops_and_modifiers():
    a = f32(RNG.standard_normal(64) * 10)
    b = f32(RNG.standard_normal(64) * 10)
    a[0], b[0] = np.nan, 1.0
    a[1], b[1] = -0.0, 0.0
    out = run("""
  v_add_f32 v40, v1, v2
  v_sub_f32 v41, v1, v2
  v_mul_f32 v42, v1, v2
  v_max_f32 v43, v1, v2
  v_min_f32 v44, v1, v2
  v_add_f32_e64 v45, -v1, |v2|
  v_mul_f32_e64 v46, v1, v2 mul:2
  v_add_f32_e64 v47, v1, v2 clamp
  v_subrev_f32 v48, v1, v2
""", [a, b], 9)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out[0], bits(a + b))
        np.testing.assert_array_equal(out[1], bits(a - b))
        np.testing.assert_array_equal(out[2], bits(a * b))
        np.testing.assert_array_equal(out[3][2:], bits(np.fmax(a, b))[2:])
        np.testing.assert_array_equal(out[4][2:], bits(np.fmin(a, b))[2:])
        assert out[3][0] == bits(1.0) and out[4][0] == bits(1.0)          # IEEE maxNum/minNum ignore a NaN
        assert out[3][1] == bits(0.0) and out[4][1] == bits(-0.0)         # +0 > -0
        np.testing.assert_array_equal(out[5], bits(-a + np.abs(b)))
        np.testing.assert_array_equal(out[6], bits((a * b) * np.float32(2)))
        np.testing.assert_array_equal(out[7][1:], bits(np.clip(a + b, 0, 1))[1:])
        assert out[7][0] == 0                                              # clamp of NaN is 0 (dx10_clamp)
        np.testing.assert_array_equal(out[8], bits(b - a))


def test_transcendentals_within_one_ulp():
    x = f32(RNG.uniform(-20, 20, 64))
    p = f32(np.abs(x) + f32(1e-3))
    out = run("""
  v_exp_f32 v40, v1
  v_log_f32 v41, v2
  v_rcp_f32 v42, v1
  v_rsq_f32 v43, v2
  v_sqrt_f32 v44, v2
  v_sin_f32 v45, v3
  v_cos_f32 v46, v3
""", [x, p, f32(RNG.uniform(-1, 1, 64))], 7)
    s = f32(RNG.uniform(-1, 1, 64))
    with np.errstate(all="ignore"):
        refs = [np.exp2(x.astype(np.float64)), np.log2(p.astype(np.float64)), 1 / x.astype(np.float64),
                1 / np.sqrt(p.astype(np.float64)), np.sqrt(p.astype(np.float64))]
    for o, r in zip(out[:5], refs):
        assert ulp_diff(o.view(np.float32), r.astype(np.float32)).max() <= 1
    assert out[5].view(np.float32).dtype == np.float32 and np.isfinite(out[5].view(np.float32)).all()
    del s


def test_division_sequence_as_llvm_emits_it():
    # the IEEE-correct fdiv expansion LLVM emits (div_scale / rcp / fma refinement / div_fmas / div_fixup)
    n = f32(RNG.standard_normal(64) * 1e3)
    d = f32(RNG.standard_normal(64) * 1e-2)
    n[:3], d[:3] = [1.0, 0.0, 5.0], [3.0, 0.0, 0.0]
    out = run("""
  v_div_scale_f32 v4, s[10:11], v2, v2, v1
  v_div_scale_f32 v5, vcc, v1, v2, v1
  v_rcp_f32 v6, v4
  s_nop 0
  v_fma_f32 v7, -v4, v6, 1.0
  v_fma_f32 v6, v7, v6, v6
  v_mul_f32 v7, v5, v6
  v_fma_f32 v8, -v4, v7, v5
  v_fma_f32 v7, v8, v6, v7
  v_fma_f32 v4, -v4, v7, v5
  s_nop 3
  v_div_fmas_f32 v4, v4, v6, v7
  v_div_fixup_f32 v40, v4, v2, v1
""", [n, d], 1)
    with np.errstate(all="ignore"):
        ref = n / d
    np.testing.assert_array_equal(out[0][3:], bits(ref)[3:])
    assert out[0][0] == bits(np.float32(1) / np.float32(3))
    assert np.isnan(out[0][1:2].view(np.float32)).all() and out[0][2] == bits(np.inf)


# ---------------------------------------------------------------------------- conversions
def test_conversions():
    x = f32(RNG.standard_normal(64) * 1e5)
    x[:6] = [np.nan, np.inf, -np.inf, 3e9, -3e9, 70000.5]
    h = f32(RNG.standard_normal(64) * 100).astype(np.float16)
    hb = np.asarray(h.view(np.uint16), U32)
    out = run("""
  v_cvt_i32_f32 v40, v1
  v_cvt_u32_f32 v41, v1
  v_cvt_f16_f32 v42, v1
  v_cvt_f32_f16 v43, v2
  v_cvt_f32_i32 v44, v3
  v_cvt_rpi_i32_f32 v45, v1
  v_cvt_flr_i32_f32 v46, v1
  v_cvt_pkrtz_f16_f32 v47, v1, v1
  v_cvt_f32_ubyte2 v48, v3
""", [x, hb, RNG.integers(-2 ** 31, 2 ** 31, 64, dtype=np.int64).astype(np.int32).view(U32)], 9)
    xd = x.astype(np.float64)

    def sat(v, lo, hi):
        v = np.where(np.isnan(v), 0, v)
        return np.clip(np.trunc(v), lo, hi)
    np.testing.assert_array_equal(out[0].view(np.int32), sat(xd, -2 ** 31, 2 ** 31 - 1).astype(np.int32))
    np.testing.assert_array_equal(out[1], sat(xd, 0, 2 ** 32 - 1).astype(np.uint64).astype(U32))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out[2][6:], x[6:].astype(np.float16).view(np.uint16).astype(U32))
    assert out[2][0] & 0x7E00 == 0x7E00 and out[2][1] == 0x7C00 and out[2][2] == 0xFC00
    np.testing.assert_array_equal(out[3], bits(h.astype(np.float32)))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out[5][6:].view(np.int32), np.floor(xd[6:] + 0.5).astype(np.int32))
        np.testing.assert_array_equal(out[6][6:].view(np.int32), np.floor(xd[6:]).astype(np.int32))


# ---------------------------------------------------------------------------- integer and bits
def test_integer_and_bit_ops():
    a = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(U32)
    b = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(U32)
    c = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(U32)
    out = run("""
  v_mul_lo_u32 v40, v1, v2
  v_mul_hi_u32 v41, v1, v2
  v_mul_hi_i32 v42, v1, v2
  v_bfe_u32 v43, v1, 5, 11
  v_bfe_i32 v44, v1, 3, 9
  v_alignbit_b32 v45, v1, v2, 13
  v_perm_b32 v46, v1, v2, v3
  v_lshl_add_u32 v47, v1, 3, v2
  v_add3_u32 v48, v1, v2, v3
  v_and_or_b32 v49, v1, v2, v3
  v_xad_u32 v50, v1, v2, v3
  v_bfi_b32 v51, v1, v2, v3
  v_ffbh_u32 v52, v3
  v_bcnt_u32_b32 v53, v1, 7
  v_ashrrev_i32 v54, 7, v1
  v_mul_u32_u24 v55, v1, v2
""", [a, b, c], 16)
    A, B, C = (x.astype(object) for x in (a, b, c))
    m32 = (1 << 32) - 1

    def s32(v):
        v = int(v)
        return v - (1 << 32) if v >> 31 else v

    def perm(x, y, sel):
        data = (int(x) << 32) | int(y)
        r = 0
        for i in range(4):
            s = (int(sel) >> (8 * i)) & 0xFF
            if s < 8:
                byte = (data >> (8 * s)) & 0xFF
            elif s < 12:
                byte = 0xFF if (data >> (8 * (2 * (s - 8) + 1) + 7)) & 1 else 0
            elif s == 12:
                byte = 0
            else:
                byte = 0xFF
            r |= byte << (8 * i)
        return r

    def bfe_s(x, o, w):
        v = (int(x) >> o) & ((1 << w) - 1)
        return (v - (1 << w) if v >> (w - 1) else v) & m32
    refs = [
        [(x * y) & m32 for x, y in zip(A, B)],
        [(x * y) >> 32 for x, y in zip(A, B)],
        [((s32(x) * s32(y)) >> 32) & m32 for x, y in zip(A, B)],
        [(int(x) >> 5) & 0x7FF for x in A],
        [bfe_s(x, 3, 9) for x in A],
        [(((int(x) << 32) | int(y)) >> 13) & m32 for x, y in zip(A, B)],
        [perm(x, y, z) for x, y, z in zip(A, B, C)],
        [((int(x) << 3) + int(y)) & m32 for x, y in zip(A, B)],
        [(int(x) + int(y) + int(z)) & m32 for x, y, z in zip(A, B, C)],
        [(int(x) & int(y)) | int(z) for x, y, z in zip(A, B, C)],
        [((int(x) ^ int(y)) + int(z)) & m32 for x, y, z in zip(A, B, C)],
        [(int(x) & int(y)) | (~int(x) & int(z) & m32) for x, y, z in zip(A, B, C)],
        [32 - int(z).bit_length() if z else m32 for z in C],
        [bin(int(x)).count("1") + 7 for x in A],
        [(s32(x) >> 7) & m32 for x in A],
        [((int(x) & 0xFFFFFF) * (int(y) & 0xFFFFFF)) & m32 for x, y in zip(A, B)],
    ]
    for k, ref in enumerate(refs):
        assert out[k].tolist() == [int(v) for v in ref], f"output {k}"


def test_carry_chain_and_64bit():
    a = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(U32)
    b = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(U32)
    out = run("""
  v_add_co_u32 v40, vcc, v1, v2
  s_nop 1
  v_addc_co_u32 v41, vcc, v2, v1, vcc
  v_sub_co_u32 v42, s[10:11], v1, v2
  s_nop 1
  v_cndmask_b32_e64 v43, 0, 1, s[10:11]
  v_mov_b32 v4, v1
  v_mov_b32 v5, v2
  v_mad_u64_u32 v[44:45], s[12:13], v1, v2, v[4:5]
  v_lshlrev_b64 v[46:47], 5, v[4:5]
  v_lshl_add_u64 v[48:49], v[4:5], 2, v[4:5]
""", [a, b], 10)
    A, B = a.astype(object), b.astype(object)
    m = (1 << 32) - 1
    lo = [(x + y) & m for x, y in zip(A, B)]
    cy = [(x + y) >> 32 for x, y in zip(A, B)]
    hi = [(y + x + c) & m for x, y, c in zip(A, B, cy)]
    assert out[0].tolist() == lo and out[1].tolist() == hi
    assert out[2].tolist() == [(x - y) & m for x, y in zip(A, B)]
    assert out[3].tolist() == [int(x < y) for x, y in zip(A, B)]
    pair = [int(x) | (int(y) << 32) for x, y in zip(A, B)]
    mad = [(int(x) * int(y) + p) & ((1 << 64) - 1) for x, y, p in zip(A, B, pair)]
    assert out[4].tolist() == [v & m for v in mad] and out[5].tolist() == [v >> 32 for v in mad]
    sh = [(p << 5) & ((1 << 64) - 1) for p in pair]
    assert out[6].tolist() == [v & m for v in sh] and out[7].tolist() == [v >> 32 for v in sh]
    la = [((p << 2) + p) & ((1 << 64) - 1) for p in pair]
    assert out[8].tolist() == [v & m for v in la] and out[9].tolist() == [v >> 32 for v in la]


# ---------------------------------------------------------------------------- compares, EXEC, lanes
def test_compare_exec_and_lane_ops():
    a = f32(RNG.standard_normal(64))
    a[5] = np.nan
    out = run("""
  v_cmp_gt_f32 vcc, 0, v1
  s_nop 1
  v_cndmask_b32 v40, 1.0, 2.0, vcc
  v_cmp_u_f32 s[10:11], v1, v1
  s_nop 1
  v_cndmask_b32_e64 v41, 0, 1, s[10:11]
  v_mov_b32 v42, -1
  s_and_saveexec_b64 s[12:13], vcc
  v_mov_b32 v42, v0
  s_or_b64 exec, exec, s[12:13]
  v_readlane_b32 s14, v0, 37
  s_nop 1
  v_mov_b32 v43, s14
  v_mov_b32 v44, 0
  v_writelane_b32 v44, s14, 3
  v_mbcnt_lo_u32_b32 v45, vcc_lo, 0
  v_mbcnt_hi_u32_b32 v45, vcc_hi, v45
  s_mov_b64 exec, 0xf0
  v_readfirstlane_b32 s15, v0
  s_mov_b64 exec, -1
  s_nop 0
  v_mov_b32 v46, s15
""", [a], 7)
    neg = a < 0
    np.testing.assert_array_equal(out[0], bits(np.where(neg, 2.0, 1.0)))
    np.testing.assert_array_equal(out[1], np.isnan(a).astype(U32))
    np.testing.assert_array_equal(out[2], np.where(neg, np.arange(64), 0xFFFFFFFF).astype(U32))
    assert (out[3] == 37).all()
    assert out[4][3] == 37 and (np.delete(out[4], 3) == 0).all()
    np.testing.assert_array_equal(out[5], np.array([neg[:i].sum() for i in range(64)], U32))
    assert (out[6] == 4).all()


def _dpp_ref(v, ctrl, row_mask=0xF, bank_mask=0xF, bound_zero=True, old=None):
    """Reference DPP v_mov from the ISA description: returns the destination lanes."""
    out = np.array(old if old is not None else np.zeros(64, U32), U32)
    for lane in range(64):
        row, r = divmod(lane, 16)
        if not (row_mask >> row) & 1 or not (bank_mask >> (r // 4)) & 1:
            continue
        kind, n = ctrl
        if kind == "quad_perm":
            src = (lane & ~3) + n[lane & 3]
        elif kind == "row_shr":
            src = lane - n if r >= n else None
        elif kind == "row_shl":
            src = lane + n if r + n < 16 else None
        elif kind == "row_ror":
            src = row * 16 + (r - n) % 16
        elif kind == "row_mirror":
            src = row * 16 + 15 - r
        elif kind == "row_bcast15":
            src = row * 16 - 1 if row > 0 else None
        elif kind == "row_bcast31":
            src = 31 if row > 1 else None
        elif kind == "wave_shr1":
            src = lane - 1 if lane > 0 else None
        elif kind == "row_newbcast":
            src = row * 16 + n
        if src is None:
            if bound_zero:
                out[lane] = 0
            continue
        out[lane] = v[src]
    return out


DPP_CASES = [
    ("quad_perm:[2,3,0,1]", ("quad_perm", [2, 3, 0, 1])),
    ("row_shr:3", ("row_shr", 3)),
    ("row_shl:5", ("row_shl", 5)),
    ("row_ror:7", ("row_ror", 7)),
    ("row_mirror", ("row_mirror", 0)),
    ("row_bcast:15", ("row_bcast15", 0)),
    ("row_bcast:31", ("row_bcast31", 0)),
    ("wave_shr:1", ("wave_shr1", 0)),
]


def test_dpp_lane_patterns():
    v = (np.arange(64, dtype=U32) + 1) * 3
    body = "\n".join(f"  v_mov_b32 v{40 + k}, 7\n  s_nop 1\n  "
                     f"v_mov_b32_dpp v{40 + k}, v1 {txt} row_mask:0xf bank_mask:0xf"
                     f"{' bound_ctrl:1' if k % 2 == 0 else ''}"
                     for k, (txt, _) in enumerate(DPP_CASES))
    body += ("\n  s_nop 1\n  v_mov_b32 v48, 9\n  s_nop 1\n"
             "  v_add_f32_dpp v48, v2, v2 row_shr:1 row_mask:0x5 bank_mask:0x3")
    out = run(body, [v, bits(np.arange(64, dtype=np.float32))], 9)
    for k, (txt, ref) in enumerate(DPP_CASES):
        exp = _dpp_ref(v, ref, bound_zero=(k % 2 == 0), old=np.full(64, 7, U32))
        np.testing.assert_array_equal(out[k], exp, err_msg=txt)
    x = np.arange(64, dtype=np.float32)
    shifted = _dpp_ref(bits(x), ("row_shr", 1), 0x5, 0x3, bound_zero=False, old=np.full(64, 9, U32))
    written = shifted != 9
    exp = np.where(written, bits(shifted.view(np.float32) + x), 9)
    np.testing.assert_array_equal(out[8], exp)


def test_dpp_row_newbcast():
    # gfx90a+'s row broadcast (AITER's int8 GEMMs use it): lane n of each row of 16 to the whole row
    v = (np.arange(64, dtype=U32) + 1) * 5
    out = run("""
  v_mov_b32 v40, 7
  v_mov_b32 v41, 7
  s_nop 1
  v_mov_b32_dpp v40, v1 row_newbcast:0 row_mask:0xf bank_mask:0xf
  v_mov_b32_dpp v41, v1 row_newbcast:13 row_mask:0xa bank_mask:0xf
""", [v], 2)
    np.testing.assert_array_equal(out[0], _dpp_ref(v, ("row_newbcast", 0)))
    np.testing.assert_array_equal(out[1], _dpp_ref(v, ("row_newbcast", 13), row_mask=0xA, old=np.full(64, 7, U32)))


def test_vgpr_index_mode():
    # s_set_gpr_idx_on: M0[7:0] = the index, M0[15:12] = the operands it offsets (SRC0, SRC1, SRC2, DST);
    # AITER's int8 GEMM epilogue steps through its accumulators this way.  The results are what the same
    # instructions with the offset registers written out give.
    a, b, c = (np.arange(64, dtype=U32) * k + 1000 * k for k in (1, 2, 3))
    out = run("""
  s_mov_b32 s20, 1
  s_set_gpr_idx_on s20, gpr_idx(SRC0)
  v_mov_b32 v40, v1
  v_add_u32 v41, v1, v1
  s_set_gpr_idx_off
  s_mov_b32 s21, 0x102
  s_set_gpr_idx_on s21, gpr_idx(SRC0,DST)
  v_mov_b32 v40, v1
  s_set_gpr_idx_off
  s_mov_b32 s22, 2
  s_set_gpr_idx_on s22, gpr_idx(SRC1)
  s_set_gpr_idx_idx s20
  v_sub_u32 v43, v3, v1
  s_set_gpr_idx_mode gpr_idx(SRC0)
  v_mov_b32 v44, v1
  s_set_gpr_idx_off
  s_mov_b32 s23, m0
  v_mov_b32 v45, s23
  v_mov_b32 v46, v1
""", [a, b, c], 7)
    np.testing.assert_array_equal(out[0], b)                       # v40 = v(1+1)
    np.testing.assert_array_equal(out[1], b + a)                   # src1 not offset
    np.testing.assert_array_equal(out[2], c)                       # v(40+2) = v(1+2): DST offset too
    np.testing.assert_array_equal(out[3], c - b)                   # v3 - v(1+1): SRC1 by the new index
    np.testing.assert_array_equal(out[4], b)                       # mode SRC0 keeps index 1
    assert (out[5] == ((1 << 12) | 1)).all()                       # M0 after s_set_gpr_idx_mode SRC0
    np.testing.assert_array_equal(out[6], a)                       # off: no offset


def test_sdwa_selects():
    a = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(U32)
    h1 = f32(RNG.standard_normal(64)).astype(np.float16).view(np.uint16).astype(U32)
    h2 = f32(RNG.standard_normal(64)).astype(np.float16).view(np.uint16).astype(U32)
    packed = h1 | (h2 << 16)
    out = run("""
  v_mov_b32 v40, v1
  v_add_f16_sdwa v40, v2, v2 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:WORD_1 src1_sel:WORD_0
  v_mov_b32_sdwa v41, v1 dst_sel:BYTE_1 dst_unused:UNUSED_PAD src0_sel:BYTE_3
  v_mov_b32_sdwa v42, v1 dst_sel:WORD_0 dst_unused:UNUSED_SEXT src0_sel:WORD_1
""", [a, packed], 3)
    s = (h2.astype(np.uint16).view(np.float16) + h1.astype(np.uint16).view(np.float16)).view(np.uint16).astype(U32)
    np.testing.assert_array_equal(out[0], (a & 0xFFFF) | (s << 16))
    np.testing.assert_array_equal(out[1], ((a >> 24) & 0xFF) << 8)
    hi = (a >> 16) & 0xFFFF
    np.testing.assert_array_equal(out[2], np.where(hi & 0x8000, hi | 0xFFFF0000, hi).astype(U32))


def test_packed_math():
    x = f32(RNG.standard_normal(128)).astype(np.float16).view(np.uint16).astype(U32).reshape(2, 64)
    y = f32(RNG.standard_normal(128)).astype(np.float16).view(np.uint16).astype(U32).reshape(2, 64)
    z = f32(RNG.standard_normal(128)).astype(np.float16).view(np.uint16).astype(U32).reshape(2, 64)
    A, B, C = (v[0] | (v[1] << 16) for v in (x, y, z))
    fa, fb = f32(RNG.standard_normal(64)), f32(RNG.standard_normal(64))
    out = run("""
  v_pk_fma_f16 v40, v1, v2, v3
  v_pk_fma_f16 v41, v1, v2, v3 op_sel:[1,0,0] op_sel_hi:[0,1,1] neg_lo:[0,0,1]
  v_mov_b32 v10, v4
  v_mov_b32 v11, v5
  v_pk_mul_f32 v[42:43], v[10:11], v[10:11] op_sel_hi:[0,1]
  v_pk_add_u16 v44, v1, v2
""", [A, B, C, bits(fa), bits(fb)], 5)

    def h(v):
        return v.astype(np.uint16).view(np.float16).astype(np.float64)

    def fma16(p, q, r):
        return (h(p) * h(q) + h(r)).astype(np.float16).view(np.uint16).astype(U32)
    lo, hi = fma16(x[0], y[0], z[0]), fma16(x[1], y[1], z[1])
    np.testing.assert_array_equal(out[0], lo | (hi << 16))
    lo2 = ((h(x[1]) * h(y[0]) - h(z[0])).astype(np.float16)).view(np.uint16).astype(U32)
    hi2 = ((h(x[0]) * h(y[1]) + h(z[1])).astype(np.float16)).view(np.uint16).astype(U32)
    np.testing.assert_array_equal(out[1], lo2 | (hi2 << 16))
    np.testing.assert_array_equal(out[2], bits(fa * fa))
    np.testing.assert_array_equal(out[3], bits(fa * fb))
    np.testing.assert_array_equal(out[4], ((x[0] + y[0]) & 0xFFFF) | (((x[1] + y[1]) & 0xFFFF) << 16))


def test_cross_lane_lds_ops():
    v = (np.arange(64, dtype=U32) * 7 + 1)
    perm = RNG.permutation(64).astype(U32)
    out = run("""
  v_lshlrev_b32 v10, 2, v2
  ds_bpermute_b32 v40, v10, v1
  ds_permute_b32 v41, v10, v1
  ds_swizzle_b32 v42, v1 offset:swizzle(QUAD_PERM,3,2,1,0)
  ds_swizzle_b32 v43, v1 offset:swizzle(BITMASK_PERM,"01pip")
  s_waitcnt lgkmcnt(0)
""", [v, perm], 4)
    np.testing.assert_array_equal(out[0], v[perm])
    fwd = np.zeros(64, U32)
    fwd[perm] = v
    np.testing.assert_array_equal(out[1], fwd)
    lane = np.arange(64)
    np.testing.assert_array_equal(out[2], v[(lane & ~3) + 3 - (lane & 3)])
    # "01pip": bit4 = 0, bit3 = 1, bit2 preserved, bit1 inverted, bit0 preserved (within 32 lanes)
    src = (lane & 0x20) | (((lane & 0x1F) & 0b00111) | 0b01000) ^ 0b00010
    np.testing.assert_array_equal(out[3], v[src])


def test_lds_read2_write2_and_sub_dword():
    v = np.arange(64, dtype=U32) * 0x01010101 + 0x10203
    out = run("""
  v_lshlrev_b32 v10, 3, v0
  ds_write2_b32 v10, v1, v0 offset1:1
  ds_write_b8 v10, v0 offset:1024
  s_waitcnt lgkmcnt(0)
  ds_read_b64 v[40:41], v10
  ds_read2st64_b32 v[42:43], v10 offset1:0
  ds_read_u8 v44, v10 offset:1
  ds_read_i8 v45, v10 offset:2
  ds_read_u16_d16_hi v46, v10
  s_waitcnt lgkmcnt(0)
""", [v], 7, lds=2048)
    np.testing.assert_array_equal(out[0], v)
    np.testing.assert_array_equal(out[1], np.arange(64, dtype=U32))
    np.testing.assert_array_equal(out[2], v)
    np.testing.assert_array_equal(out[3], v)
    np.testing.assert_array_equal(out[4], (v >> 8) & 0xFF)
    b2 = ((v >> 16) & 0xFF).astype(np.uint8).view(np.int8).astype(np.int32).view(U32)
    np.testing.assert_array_equal(out[5], b2)
    # d16_hi keeps the low half of v46 (its previous value: the input-less v46 is 0) -- written below
    np.testing.assert_array_equal(out[6] >> 16, v & 0xFFFF)


# ---------------------------------------------------------------------------- scalar ALU
SALU_BODY = """
  v_readfirstlane_b32 s20, v1
  v_readfirstlane_b32 s21, v2
  s_add_u32 s30, s20, s21
  s_addc_u32 s31, s20, s21
  s_mul_hi_u32 s32, s20, s21
  s_bfe_u32 s33, s20, 0x70005
  s_bfe_i32 s34, s20, 0x90003
  s_ff1_i32_b32 s35, s21
  s_flbit_i32_b32 s36, s21
  s_brev_b32 s37, s20
  s_lshl_b64 s[38:39], s[20:21], 7
  s_ashr_i32 s40, s20, 9
  s_cmp_lt_i32 s20, s21
  s_cselect_b32 s41, 1, 2
  s_bcnt1_i32_b64 s42, s[20:21]
  s_absdiff_i32 s43, s20, s21
  s_min_i32 s44, s20, s21
  s_pack_lh_b32_b16 s45, s20, s21
  s_lshl2_add_u32 s46, s20, s21
  s_movk_i32 s47, 0x8123
"""


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scalar_alu(seed):
    r = np.random.default_rng(seed)
    x, y = (int(v) for v in r.integers(0, 2 ** 32, 2, dtype=np.uint64))
    n_out = 18
    moves = "\n".join(f"  v_mov_b32 v{40 + k}, s{30 + k}" for k in range(n_out))
    out = run(SALU_BODY + moves, [np.full(64, x, U32), np.full(64, y, U32)], n_out)[:, 0].tolist()
    m = (1 << 32) - 1

    def s32(v):
        return v - (1 << 32) if v >> 31 else v

    def bfe_s(v, o, w):
        f = (v >> o) & ((1 << w) - 1)
        return (f - (1 << w) if f >> (w - 1) else f) & m
    carry = (x + y) >> 32
    pair = x | (y << 32)
    sh = (pair << 7) & ((1 << 64) - 1)
    ref = [
        (x + y) & m, (x + y + carry) & m, (x * y) >> 32, (x >> 5) & 0x7F, bfe_s(x, 3, 9),
        ((y & -y).bit_length() - 1) & m if y else m, (32 - y.bit_length()) if y else m,
        int(f"{x:032b}"[::-1], 2), sh & m, sh >> 32, (s32(x) >> 9) & m, 1 if s32(x) < s32(y) else 2,
        bin(pair).count("1"), abs(s32(x) - s32(y)) & m, min(s32(x), s32(y)) & m,
        (x & 0xFFFF) | (y & 0xFFFF0000), ((x << 2) + y) & m, 0xFFFF8123,
    ]
    assert out == ref


# ---------------------------------------------------------------------------- gfx950 additions
GFX950_BODY = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  v_lshlrev_b32 v1, 4, v0
  v_lshlrev_b32 v2, 2, v0
  s_waitcnt lgkmcnt(0)
  s_mov_b32 m0, 0
  s_nop 0
  global_load_lds_dwordx4 v1, s[4:5]
  s_waitcnt vmcnt(0)
  ds_read_b128 v[4:7], v1
  v_mov_b32 v11, 0xf0f0f0f0
  v_mov_b32 v12, 0xcccccccc
  v_bitop3_b32 v8, v0, v11, v12 bitop3:0x96
  v_bitop3_b32 v13, v0, v11, v12 bitop3:0xe8
  v_mov_b32 v9, v0
  v_add_u32 v10, 1000, v0
  s_nop 1
  v_permlane32_swap_b32 v9, v10
  v_mov_b32 v22, v0
  v_add_u32 v23, 1000, v0
  s_nop 1
  v_permlane16_swap_b32 v22, v23
  v_cvt_pk_bf16_f32 v14, v11, v12
  v_lshlrev_b32 v3, 3, v0
  v_lshlrev_b32 v15, 2, v0
  v_add_u32 v16, 1, v15
  v_add_u32 v17, 2, v15
  v_add_u32 v18, 3, v15
  s_mov_b32 s8, 0x05040100
  v_perm_b32 v16, v16, v15, s8
  v_perm_b32 v17, v18, v17, s8
  s_waitcnt lgkmcnt(0)
  s_barrier
  ds_write_b64 v3, v[16:17] offset:2048
  s_waitcnt lgkmcnt(0)
  ds_read_b64_tr_b16 v[20:21], v3 offset:2048
  s_waitcnt lgkmcnt(0)
  global_store_dword v2, v8, s[6:7]
  global_store_dword v2, v13, s[6:7] offset:256
  global_store_dword v2, v9, s[6:7] offset:512
  global_store_dword v2, v10, s[6:7] offset:768
  global_store_dword v2, v4, s[6:7] offset:1024
  global_store_dword v2, v7, s[6:7] offset:1280
  global_store_dword v2, v14, s[6:7] offset:1536
  global_store_dword v2, v20, s[6:7] offset:1792
  global_store_dword v2, v21, s[6:7] offset:2048
  global_store_dword v2, v22, s[6:7] offset:2304
  global_store_dword v2, v23, s[6:7] offset:2560
"""


def test_gfx950_instructions():
    from isagen.errors import ToolchainError
    from isagen.objects.toolchain import find_toolchain
    try:
        find_toolchain("gfx950")
    except ToolchainError as exc:
        pytest.skip(f"no gfx950 assembler: {exc}")
    co = build("g950", GFX950_BODY, target="gfx950", args=(("ptr", "inp"), ("ptr", "out")), lds=4096, vgprs=24)
    dev = Device("gfx950")
    inp = dev.to_device(np.arange(256, dtype=U32))
    out = dev.to_device(np.zeros((11, 64), U32))
    assert dev.load_module(co).launch("g950", grid=(1,), block=(64,), args=[inp, out], on_error="collect") == []
    o = dev.from_device(out, (11, 64), U32)
    lane = np.arange(64, dtype=U32)
    a, b, c = lane, U32(0xF0F0F0F0), U32(0xCCCCCCCC)
    np.testing.assert_array_equal(o[0], a ^ b ^ c)                              # bitop3 truth table 0x96: xor3
    np.testing.assert_array_equal(o[1], (a & b) | (a & c) | (b & c))             # 0xe8: majority
    # v_permlane32_swap: lanes 32..63 of vdst <-> lanes 0..31 of src0
    np.testing.assert_array_equal(o[2], np.where(lane < 32, lane, 1000 + lane - 32))
    np.testing.assert_array_equal(o[3], np.where(lane < 32, lane + 32, 1000 + lane))
    # v_permlane16_swap (LLVM's llvm.amdgcn.permlane16.swap): the odd rows of 16 lanes of vdst <-> the even
    # rows of src0 (AITER's gfx950 bf16 GEMM epilogue pairs its output quads with it)
    odd = (lane // 16) % 2 == 1
    np.testing.assert_array_equal(o[9], np.where(odd, 1000 + lane - 16, lane))
    np.testing.assert_array_equal(o[10], np.where(odd, 1000 + lane, lane + 16))
    # global_load_lds_dwordx4: 16 bytes per lane at M0 + 16*lane
    np.testing.assert_array_equal(o[4], 4 * lane)
    np.testing.assert_array_equal(o[5], 4 * lane + 3)
    # v_cvt_pk_bf16_f32: round to nearest even of each f32 (0xf0f0f0f0 -> 0xf0f1, 0xcccccccc -> 0xcccd)
    np.testing.assert_array_equal(o[6], np.full(64, 0xCCCDF0F1, U32))
    # ds_read_b64_tr_b16: lane L gets element L%4 of the 64-bit value of lane 16*(L//16) + 4*e + (L%16)//4
    # (each lane wrote the four 16-bit values 4*lane + j)
    src = np.stack([16 * (lane // 16) + 4 * e + (lane % 16) // 4 for e in range(4)], -1)
    vals = 4 * src + (lane % 4)[:, None]
    np.testing.assert_array_equal(o[7], vals[:, 0] | (vals[:, 1] << 16))
    np.testing.assert_array_equal(o[8], vals[:, 2] | (vals[:, 3] << 16))
