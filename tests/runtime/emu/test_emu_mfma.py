"""runtime/emu/mfma.py against independent references.

* CDNA3 (gfx942): every MFMA's A, B and C/D lane layout, element by element, and the results
  computed from the register/lane positions that AMD's Matrix Instruction Calculator gives
  (tests/data/mfma_layouts_cdna3.json, made by tools/mfma_layouts_from_calculator.py from calculator
  1.3.2), including the CBSZ/ABID block broadcasts and all BLGP lane patterns.
* CDNA4 (gfx950) instructions the calculator does not know: the documented formulas (CK's xdlops
  table / Triton's kWidth for the double-rate f16/bf16/i8 forms; the code of AMD's CDNA4 matrix-core
  blog for the f8f6f4 forms), numpy matmuls through those formulas, and the cross-check that one
  double-rate MFMA equals two (or four) single-rate ones on the register halves the layout says.
* fp8 inputs decode with torch's e4m3fnuz/e5m2fnuz on gfx942 and e4m3fn/e5m2 on gfx950.
* The instruction names assemble with LLVM for exactly the architectures the emulator claims.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from isagen.errors import IsagenError, ToolchainError
from isagen.runtime.emu import mfma as M
from isagen.runtime.emu import numerics as nx
from isagen.targets import TARGETS

CALC = json.loads((Path(__file__).resolve().parents[2] / "data" / "mfma_layouts_cdna3.json").read_text())
CALC_INSTS = CALC["instructions"]
RNG = np.random.default_rng(7)

# calculator type names -> emulator element kinds
CALC_KIND = {"bf16": "bf16", "fp16": "f16", "fp32": "f32", "xf32": "xf32", "int8": "i8",
             "amd_fp8": "fp8", "amd_bf8": "bf8", "fp64": "f64"}
BITS = {"bf16": 16, "f16": 16, "f32": 32, "xf32": 32, "i8": 8, "fp8": 8, "bf8": 8, "f64": 64}
TORCH_FP8 = {"e4m3fnuz": torch.float8_e4m3fnuz, "e5m2fnuz": torch.float8_e5m2fnuz,
             "e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def test_calculator_data_provenance():
    assert CALC["calculator_version"] == "1.3.2" and CALC["calculator_commit"] == "2ef9189"
    assert CALC["arch"] == "CDNA3" and len(CALC_INSTS) == 32


# ----------------------------------------------------------------------------- random registers

def random_elements(kind: str, n: int, target: str) -> np.ndarray:
    """Raw bits (uint8/16/32/64) of n random finite elements of ``kind``."""
    if kind in ("bf16", "f16"):
        x = RNG.standard_normal(n).astype(np.float32)
        return nx.f32_to_bf16(x) if kind == "bf16" else nx.f32_to_f16(x)
    if kind in ("fp8", "bf8"):
        table = nx.fp8_table(nx.fp8_format(target, kind))
        ok = np.flatnonzero(np.isfinite(table) & (np.abs(table) <= 64))
        return RNG.choice(ok, n).astype(np.uint8)
    if kind == "i8":
        return RNG.integers(0, 256, n).astype(np.uint8)
    if kind == "f32":
        return RNG.standard_normal(n).astype(np.float32).view(np.uint32)
    if kind == "xf32":       # exactly representable in xf32 (10 mantissa bits): no rounding question
        return RNG.standard_normal(n).astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    if kind == "f64":
        return RNG.standard_normal(n).view(np.uint64)
    raise AssertionError(kind)


def random_regs(kind: str, regs: int, waves: int, target: str) -> np.ndarray:
    """uint32[regs, W, 64] filled with random elements of ``kind``, packed little-endian."""
    per = {8: 4, 16: 2, 32: 1, 64: 1}[BITS[kind]]
    words = regs // 2 if BITS[kind] == 64 else regs
    raw = random_elements(kind, words * waves * 64 * per, target)
    if BITS[kind] == 64:
        pairs = raw.reshape(words, waves, 64).view(np.uint32).reshape(words, waves, 64, 2)
        return np.ascontiguousarray(pairs.transpose(0, 3, 1, 2).reshape(regs, waves, 64))
    return np.ascontiguousarray(raw).view(np.uint32).reshape(regs, waves, 64)


def decode(raw: np.ndarray, kind: str, target: str) -> np.ndarray:
    """Raw element bits -> float64/int64 through numerics.py (itself checked against torch)."""
    if kind == "bf16":
        return nx.bf16_to_f32(raw).astype(np.float64)
    if kind == "f16":
        return nx.f16_to_f32(raw).astype(np.float64)
    if kind in ("fp8", "bf8"):
        return nx.fp8_to_f32(raw, nx.fp8_format(target, kind)).astype(np.float64)
    if kind in ("f32", "xf32"):
        return raw.astype(np.uint32).view(np.float32).astype(np.float64)
    if kind == "i8":
        return raw.astype(np.uint8).view(np.int8).astype(np.int64)
    raise AssertionError(kind)


def read_elements(regs: np.ndarray, table: np.ndarray, kind: str, target: str) -> np.ndarray:
    """Values [W, n] of the elements at calculator positions ``table`` = [n, (reg, bit_lo, lane)]."""
    reg, lo, lane = table[:, 0], table[:, 1], table[:, 2]
    if kind == "f64":
        bits = regs[reg, :, lane].astype(np.uint64) | (regs[reg + 1, :, lane].astype(np.uint64) << np.uint64(32))
        return bits.T.copy().view(np.float64)
    width = BITS[kind]
    words = regs[reg, :, lane]                                     # [n, W]
    raw = (words >> lo[:, None].astype(np.uint32)) & np.uint32((1 << width) - 1) if width < 32 else words
    return decode(raw, kind, target).T


def read_out(d: np.ndarray, table: np.ndarray, out: str) -> np.ndarray:
    """Values [W, n] of C/D at calculator positions [n, (reg, lane)]."""
    reg, lane = table[:, 0], table[:, 1]
    if out == "fp64":
        bits = d[reg, :, lane].astype(np.uint64) | (d[reg + 1, :, lane].astype(np.uint64) << np.uint64(32))
        return bits.T.copy().view(np.float64)
    w = d[reg, :, lane].T
    return w.view(np.int32).astype(np.int64) if out == "int32" else w.view(np.float32).astype(np.float64)


def expected_from_calculator(e, a, b, c, a_table, b_table, target="gfx942", neg=(False, False, False)):
    """D[w, (block, i, j)] = sum_k A[...] * B[...] + C, with A/B/C read where the calculator says."""
    ka, kb = CALC_KIND[e["in_type"]], CALC_KIND[e["in_type_src1"]]
    Bk, Mm, Nn, K = e["blocks"], e["m"], e["n"], e["k"]
    av = read_elements(a, a_table, ka, target).reshape(-1, Bk, Mm, K)
    bv = read_elements(b, b_table, kb, target).reshape(-1, Bk, K, Nn)
    cv = read_out(c, np.asarray(e["d"]).reshape(-1, 2), e["out_type"]).reshape(-1, Bk, Mm, Nn)
    av, bv, cv = (-av if neg[0] else av), (-bv if neg[1] else bv), (-cv if neg[2] else cv)
    return np.einsum("wbik,wbkj->wbij", av, bv) + cv


def check_close(got, want, out):
    if out == "int32":
        assert np.array_equal(got.astype(np.int64) % 2**32, want.astype(np.int64) % 2**32)
    elif out == "fp64":
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    else:   # float64 sums rounded once to f32 on both sides: equal to f32 rounding
        np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=1e-30)


# ----------------------------------------------------------------------------- CDNA3 layouts

@pytest.mark.parametrize("name", sorted(CALC_INSTS))
def test_layout_matches_calculator(name):
    """Every element's (register, bits, lane) of A, B and C/D equals the calculator's."""
    e = CALC_INSTS[name]
    s = M.spec(name, "gfx942")
    assert (s.m, s.n, s.k, s.blocks) == (e["m"], e["n"], e["k"], e["blocks"])
    assert (CALC_KIND[e["in_type"]], CALC_KIND[e["in_type_src1"]]) == (s.a_type, s.b_type)
    width = s.in_bits
    ours_a = [(r, sub * width if width < 32 else 0, lane)
              for blk in range(s.blocks) for i in range(s.m) for k in range(s.k)
              for r, sub, lane in [M.a_slot(s, blk, i, k)]]
    ours_b = [(r, sub * width if width < 32 else 0, lane)
              for blk in range(s.blocks) for k in range(s.k) for j in range(s.n)
              for r, sub, lane in [M.b_slot(s, blk, k, j)]]
    ours_d = [M.cd_slot(s, blk, i, j) for blk in range(s.blocks) for i in range(s.m) for j in range(s.n)]
    assert ours_a == [tuple(x) for x in np.asarray(e["a"]).reshape(-1, 3)]
    assert ours_b == [tuple(x) for x in np.asarray(e["b"]).reshape(-1, 3)]
    assert ours_d == [tuple(x) for x in np.asarray(e["d"]).reshape(-1, 2)]
    # register counts as the calculator's tables imply them
    regs_of = lambda table, n, pair: int(np.asarray(table).reshape(-1, n)[:, 0].max()) + (2 if pair else 1)
    assert s.a_regs == regs_of(e["a"], 3, width == 64) and s.b_regs == regs_of(e["b"], 3, width == 64)
    assert s.c_regs == regs_of(e["d"], 2, s.out_bits == 64)


def calc_cases():
    for name in sorted(CALC_INSTS):
        e = CALC_INSTS[name]
        yield name, 0, 0, 0
        for key in e.get("a_mods", {}):
            cbsz, abid = map(int, key.split(","))
            yield name, cbsz, abid, 0
        for key in e.get("b_mods", {}):
            yield name, 0, 0, int(key)
        if e["in_type"] == "fp64":
            yield name, 0, 0, 5            # f64: BLGP = negate A (bit 0) and C (bit 2)


@pytest.mark.parametrize("name,cbsz,abid,blgp", list(calc_cases()))
def test_results_match_calculator_positions(name, cbsz, abid, blgp):
    """D computed by mfma() equals the sum over the register/lane positions the calculator names
    (with the modifier's A/B sources), for 3 waves at once."""
    e = CALC_INSTS[name]
    s = M.spec(name, "gfx942")
    W = 3
    a = random_regs(s.a_type, s.a_regs, W, "gfx942")
    b = random_regs(s.b_type, s.b_regs, W, "gfx942")
    out_kind = {"fp32": "f32", "int32": "i8", "fp64": "f64"}[e["out_type"]]
    if out_kind == "i8":
        c = RNG.integers(-2**31, 2**31, (s.c_regs, W, 64)).astype(np.int32).view(np.uint32)
    else:
        c = random_regs(out_kind, s.c_regs, W, "gfx942")
    a_table = np.asarray(e["a_mods"][f"{cbsz},{abid}"] if cbsz else e["a"]).reshape(-1, 3)
    b_table = np.asarray(e["b_mods"][str(blgp)] if blgp and "b_mods" in e else e["b"]).reshape(-1, 3)
    neg = tuple(bool(blgp >> i & 1) for i in range(3)) if e["in_type"] == "fp64" else (False,) * 3
    want = expected_from_calculator(e, a, b, c, a_table, b_table, neg=neg).reshape(W, -1)
    d = M.mfma(name, "gfx942", a, b, c, cbsz=cbsz, abid=abid, blgp=blgp)
    assert d.dtype == np.uint32 and d.shape == (s.c_regs, W, 64)
    got = read_out(d, np.asarray(e["d"]).reshape(-1, 2), e["out_type"])
    check_close(got, want, e["out_type"])


def test_targets_table_agrees_with_emulator():
    """Every MFMA in isagen/targets.py runs in the emulator with the same shape and register counts."""
    for t in TARGETS.values():
        for info in t.mfmas:
            s = M.spec(info.mnemonic, t.name)
            assert (s.m, s.n, s.k) == (info.m, info.n, info.k), info.mnemonic
            assert (s.a_regs, s.b_regs, s.c_regs) == (info.a_regs, info.b_regs, info.c_regs), info.mnemonic


# ----------------------------------------------------------------------------- names vs LLVM

def mfma_line(name: str) -> str:
    s = M.SPECS[name]
    reg = lambda first, n: f"{first[0]}{first[1:]}" if n == 1 else f"{first[0]}[{first[1:]}:{int(first[1:]) + n - 1}]"
    scales = ", v30, v31" if s.scaled else ""
    return (f"{name} {reg('a0', s.c_regs)}, {reg('v0', s.a_regs)}, {reg('v16', s.b_regs)}, "
            f"{reg('a0', s.c_regs)}{scales}\n")


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_names_assemble_exactly_where_claimed(target):
    from isagen.objects.toolchain import assemble_object
    assemble_object("".join(mfma_line(n) for n in M.supported(target)), target)
    for name in sorted(set(M.SPECS) - set(M.supported(target))):
        with pytest.raises(ToolchainError, match="not supported on this GPU|invalid instruction"):
            assemble_object(mfma_line(name), target)


# ----------------------------------------------------------------------------- CDNA4 (gfx950)

def documented_a_slot(name: str, i: int, k: int):
    """(reg, sub, lane) of A[i][k] from the sources cited in mfma.py (B is the same with j)."""
    s = M.SPECS[name]
    if s.layout == "f8f6f4":
        # AMD CDNA4 matrix-core blog, 32x32x64 fp8: a_reg[h*16 + x] = A[row][(lane/32)*16 + h*32 + x];
        # 16x16x128 the same with 4 lane groups of 16 (a_reg[h*16 + x] = A[row][(lane/16)*16 + h*64 + x])
        groups = 64 // s.m
        h, rest = divmod(k, 16 * groups)
        g, x = divmod(rest, 16)
        byte = h * 16 + x
        return byte // 4, byte % 4, g * s.m + i
    per = 32 // s.in_bits
    kl = s.k * s.m // 64          # CK k_per_blk / Triton kWidth: 8 (f16/bf16), 16 (i8)
    return (k % kl) // per, (k % kl) % per, s.m * (k // kl) + i


GFX950_NEW = ["v_mfma_f32_16x16x32_bf16", "v_mfma_f32_32x32x16_bf16", "v_mfma_f32_16x16x32_f16",
              "v_mfma_f32_32x32x16_f16", "v_mfma_i32_16x16x64_i8", "v_mfma_i32_32x32x32_i8",
              "v_mfma_f32_16x16x128_f8f6f4", "v_mfma_f32_32x32x64_f8f6f4",
              "v_mfma_scale_f32_16x16x128_f8f6f4", "v_mfma_scale_f32_32x32x64_f8f6f4"]


@pytest.mark.parametrize("name", GFX950_NEW)
def test_gfx950_layout_follows_documented_formulas(name):
    s = M.spec(name, "gfx950")
    assert M.spec(name).archs == {"gfx950"}
    for i in range(s.m):
        for k in range(s.k):
            assert M.a_slot(s, 0, i, k) == documented_a_slot(name, i, k), (i, k)
            assert M.b_slot(s, 0, k, i) == documented_a_slot(name, i, k), (k, i)
    # C/D as the calculator's CDNA3 instruction of the same output tile
    same_tile = CALC_INSTS["v_mfma_f32_16x16x16_bf16" if s.m == 16 else "v_mfma_f32_32x32x8_bf16"]["d"]
    ours = [M.cd_slot(s, 0, i, j) for i in range(s.m) for j in range(s.n)]
    assert ours == [tuple(x) for x in np.asarray(same_tile).reshape(-1, 2)]


def pack_inputs(name, A, B, kinds):
    """Registers for matrices A[M, K], B[K, N] (raw element bits) through the documented formulas."""
    s = M.SPECS[name]
    per = 32 // s.in_bits
    dt = {8: np.uint8, 16: np.uint16}[s.in_bits]
    a = np.zeros((s.a_regs, 64, per), dt)
    b = np.zeros((s.b_regs, 64, per), dt)
    for i in range(s.m):
        for k in range(s.k):
            r, sub, lane = documented_a_slot(name, i, k)
            a[r, lane, sub] = A[i, k]
    for j in range(s.n):
        for k in range(s.k):
            r, sub, lane = documented_a_slot(name, j, k)
            b[r, lane, sub] = B[k, j]
    return a.view(np.uint32).reshape(s.a_regs, 1, 64), b.view(np.uint32).reshape(s.b_regs, 1, 64)


def unpack_d(d, m):
    """D[M, N] f32 from registers with the calculator's CDNA3 C/D formula (16x16 and 32x32)."""
    out = np.empty((m, m))
    for i in range(m):
        for j in range(m):
            reg, lane = ((i % 4), 16 * (i // 4) + j) if m == 16 else (4 * (i // 8) + i % 4, 32 * ((i // 4) % 2) + j)
            out[i, j] = d[reg, 0, lane].view(np.float32) if d.dtype == np.uint32 else d[reg, 0, lane]
    return out


@pytest.mark.parametrize("name,a_kind,b_kind,cbsz,blgp", [
    ("v_mfma_f32_16x16x32_bf16", "bf16", "bf16", 0, 0),
    ("v_mfma_f32_32x32x16_f16", "f16", "f16", 0, 0),
    ("v_mfma_f32_16x16x128_f8f6f4", "fp8", "fp8", 0, 0),
    ("v_mfma_f32_32x32x64_f8f6f4", "bf8", "fp8", 1, 0),
    ("v_mfma_f32_16x16x128_f8f6f4", "fp8", "bf8", 0, 1),
])
def test_gfx950_matches_numpy_matmul(name, a_kind, b_kind, cbsz, blgp):
    """Matrices packed by the documented formulas give D = A @ B + C (torch decodes the inputs)."""
    s = M.spec(name, "gfx950")
    A = random_elements(a_kind, s.m * s.k, "gfx950").reshape(s.m, s.k)
    B = random_elements(b_kind, s.k * s.n, "gfx950").reshape(s.k, s.n)
    C = RNG.standard_normal((s.m, s.n)).astype(np.float32)

    def torch_values(raw, kind):
        if kind in ("fp8", "bf8"):
            fmt = nx.fp8_format("gfx950", kind)
            return torch.from_numpy(raw).view(TORCH_FP8[fmt]).double().numpy()
        dtype = torch.bfloat16 if kind == "bf16" else torch.float16
        return torch.from_numpy(raw.view(np.int16)).view(dtype).double().numpy()

    a, b = pack_inputs(name, A, B, (a_kind, b_kind))
    c = np.zeros((s.c_regs, 1, 64), np.uint32)
    for i in range(s.m):
        for j in range(s.n):
            reg, lane = M.cd_slot(s, 0, i, j)
            c[reg, 0, lane] = C[i, j].view(np.uint32)
    d = M.mfma(name, "gfx950", a, b, c, cbsz=cbsz, blgp=blgp)
    want = torch_values(A, a_kind) @ torch_values(B, b_kind) + C
    np.testing.assert_allclose(unpack_d(d, s.m), want, rtol=2.5e-7, atol=1e-6)


@pytest.mark.parametrize("big,small,splits,cbsz,blgp", [
    ("v_mfma_f32_16x16x32_bf16", "v_mfma_f32_16x16x16_bf16", 2, 0, 0),
    ("v_mfma_f32_32x32x16_bf16", "v_mfma_f32_32x32x8_bf16", 2, 0, 0),
    ("v_mfma_f32_16x16x32_f16", "v_mfma_f32_16x16x16_f16", 2, 0, 0),
    ("v_mfma_f32_32x32x16_f16", "v_mfma_f32_32x32x8_f16", 2, 0, 0),
    ("v_mfma_i32_16x16x64_i8", "v_mfma_i32_16x16x32_i8", 2, 0, 0),
    ("v_mfma_i32_32x32x32_i8", "v_mfma_i32_32x32x16_i8", 2, 0, 0),
    ("v_mfma_f32_16x16x128_f8f6f4", "v_mfma_f32_16x16x32_fp8_fp8", 4, 0, 0),
    ("v_mfma_f32_32x32x64_f8f6f4", "v_mfma_f32_32x32x16_bf8_fp8", 4, 1, 0),
    ("v_mfma_f32_16x16x128_f8f6f4", "v_mfma_f32_16x16x32_fp8_bf8", 4, 0, 1),
    ("v_mfma_f32_32x32x64_f8f6f4", "v_mfma_f32_32x32x16_bf8_bf8", 4, 1, 1),
])
def test_double_rate_equals_single_rate_on_register_splits(big, small, splits, cbsz, blgp):
    """A K-doubling (or quadrupling) MFMA equals the single-rate MFMA applied to consecutive register
    groups of A and B, accumulating: the K halves are split across registers as the layout says, and
    cbsz/blgp of f8f6f4 select e4m3/e5m2 like the fp8/bf8 names do."""
    sb, ss = M.spec(big, "gfx950"), M.spec(small, "gfx950")
    W = 4
    a = random_regs(ss.a_type, sb.a_regs, W, "gfx950")
    b = random_regs(ss.b_type, sb.b_regs, W, "gfx950")
    c = (RNG.integers(-1000, 1000, (sb.c_regs, W, 64)).astype(np.int32).view(np.uint32) if sb.out_type == "i32"
         else random_regs("f32", sb.c_regs, W, "gfx950"))
    d_big = M.mfma(big, "gfx950", a, b, c, cbsz=cbsz, blgp=blgp)
    d = c
    step = ss.a_regs
    for h in range(splits):
        d = M.mfma(small, "gfx950", a[h * step:(h + 1) * step], b[h * step:(h + 1) * step], d)
    if sb.out_type == "i32":
        assert np.array_equal(d_big, d)
    else:
        # the chained form rounds to f32 after each part: allow a few f32 ulps of the largest value
        ref = d.view(np.float32)
        np.testing.assert_allclose(d_big.view(np.float32), ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("name", ["v_mfma_scale_f32_16x16x128_f8f6f4", "v_mfma_scale_f32_32x32x64_f8f6f4"])
def test_block_scaled_mfma(name):
    """D = sum_k (A[i,k] 2^(sa[i,k/32]-127)) (B[k,j] 2^(sb[k/32,j]-127)) + C, the scales E8M0 bytes
    (picked by op_sel) of one VGPR per operand: A's block kb of row i in lane kb*M + i [verify].
    With every scale 127 the result equals the unscaled instruction's bit for bit."""
    s = M.spec(name, "gfx950")
    plain = name.replace("_scale", "")
    W = 3
    a = random_regs("fp8", s.a_regs, W, "gfx950")
    b = random_regs("bf8", s.b_regs, W, "gfx950")
    c = random_regs("f32", s.c_regs, W, "gfx950")
    ones = np.full((W, 64), 0x7F7F7F7F, np.uint32)
    d0 = M.mfma(name, "gfx950", a, b, c, blgp=1, scale_a=ones, scale_b=ones, opsel_a=2, opsel_b=1)
    assert np.array_equal(d0, M.mfma(plain, "gfx950", a, b, c, blgp=1))

    sa_bytes = RNG.integers(120, 135, (W, 64, 4)).astype(np.uint8)
    sb_bytes = RNG.integers(120, 135, (W, 64, 4)).astype(np.uint8)
    opa, opb = 3, 1
    d = M.mfma(name, "gfx950", a, b, c, blgp=1, scale_a=sa_bytes.view(np.uint32)[..., 0],
               scale_b=sb_bytes.view(np.uint32)[..., 0], opsel_a=opa, opsel_b=opb)
    # reference: the unscaled instruction on inputs pre-multiplied... is not expressible in fp8, so
    # compute from the layout with numpy instead
    for w in range(W):
        A = np.empty((s.m, s.k))
        B = np.empty((s.k, s.n))
        for i in range(s.m):
            for k in range(s.k):
                r, sub, lane = documented_a_slot(name, i, k)
                A[i, k] = (nx.fp8_to_f32(nx.byte_of(a[r, w, lane], sub), "e4m3fn")
                           * 2.0 ** (int(sa_bytes[w, (k // 32) * s.m + i, opa]) - 127))
                r, sub, lane = documented_a_slot(name, i, k)
                B[k, i] = (nx.fp8_to_f32(nx.byte_of(b[r, w, lane], sub), "e5m2")
                           * 2.0 ** (int(sb_bytes[w, (k // 32) * s.n + i, opb]) - 127))
        C = unpack_d(c[:, w:w + 1], s.m)
        np.testing.assert_allclose(unpack_d(d[:, w:w + 1], s.m), A @ B + C, rtol=2.5e-7, atol=1e-6)
    with pytest.raises(M.MfmaError, match="scale operand is missing"):
        M.mfma(name, "gfx950", a, b, c)
    with pytest.raises(M.MfmaError, match="takes no scale operands"):
        M.mfma(plain, "gfx950", a, b, c, scale_a=ones, scale_b=ones)


# ----------------------------------------------------------------------------- fp8 formats per arch

@pytest.mark.parametrize("target,fa,fb", [("gfx942", torch.float8_e4m3fnuz, torch.float8_e5m2fnuz),
                                          ("gfx950", torch.float8_e4m3fn, torch.float8_e5m2)])
def test_fp8_inputs_decode_per_architecture(target, fa, fb):
    """The same register bits are FNUZ on gfx942 and OCP on gfx950 (torch decodes the reference)."""
    name = "v_mfma_f32_16x16x32_fp8_bf8"
    e = CALC_INSTS[name]
    W = 2
    codes_a = RNG.integers(0, 256, (2, W, 64, 4)).astype(np.uint8)
    codes_b = RNG.integers(0, 256, (2, W, 64, 4)).astype(np.uint8)
    for codes, dt in ((codes_a, fa), (codes_b, fb)):       # no NaN/inf: keep the sums finite
        vals = torch.from_numpy(codes).view(dt).float().numpy()
        codes[~np.isfinite(vals) | (np.abs(vals) > 1000)] = 0x3C
    a, b = codes_a.view(np.uint32)[..., 0], codes_b.view(np.uint32)[..., 0]
    c = np.zeros((4, W, 64), np.uint32)
    d = M.mfma(name, target, a, b, c)
    ta, tb = np.asarray(e["a"]).reshape(-1, 3), np.asarray(e["b"]).reshape(-1, 3)
    av = torch.from_numpy(codes_a[ta[:, 0], :, ta[:, 2], ta[:, 1] // 8].T.copy()).view(fa).double().numpy()
    bv = torch.from_numpy(codes_b[tb[:, 0], :, tb[:, 2], tb[:, 1] // 8].T.copy()).view(fb).double().numpy()
    want = np.einsum("wik,wkj->wij", av.reshape(W, 16, 32), bv.reshape(W, 32, 16)).reshape(W, -1)
    got = read_out(d, np.asarray(e["d"]).reshape(-1, 2), "fp32")
    np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=1e-30)


# ----------------------------------------------------------------------------- numerics, API

def test_products_exact_and_sum_rounded_once():
    """Products are exact and the K-sum + C is rounded to f32 once: 2^24 + 1 - 2^24 + 1 = 2, where
    f32 accumulation in k order would give 1."""
    name = "v_mfma_f32_16x16x16_bf16"
    s = M.spec(name)
    A = np.zeros((16, 16), np.float32)
    Bm = np.zeros((16, 16), np.float32)
    A[0, :4] = [2.0**12, 1.0, -(2.0**12), 1.0]
    Bm[:4, 0] = [2.0**12, 1.0, 2.0**12, 1.0]
    a = np.zeros((2, 1, 64), np.uint32)
    b = np.zeros((2, 1, 64), np.uint32)
    for i in range(16):
        for k in range(16):
            r, sub, lane = M.a_slot(s, 0, i, k)
            a[r, 0, lane] |= np.uint32(nx.f32_to_bf16(A[i, k])) << np.uint32(16 * sub)
            r, sub, lane = M.b_slot(s, 0, k, i)
            b[r, 0, lane] |= np.uint32(nx.f32_to_bf16(Bm[k, i])) << np.uint32(16 * sub)
    d = M.mfma(name, "gfx942", a, b, np.uint32(0))            # SrcC an inline constant 0
    r, lane = M.cd_slot(s, 0, 0, 0)
    assert d[r, 0, lane].view(np.float32) == 2.0
    assert np.count_nonzero(d) == 1


def test_waves_vectorised_and_strided_register_file():
    """W waves in one call equal W single-wave calls; operands may be strided views of V[regs, W, 64]."""
    name = "v_mfma_f32_32x32x8_bf16"
    W = 7
    V = np.zeros((64, W, 64), np.uint32)
    V[0:2] = random_regs("bf16", 2, W, "gfx942")
    V[8:10] = random_regs("bf16", 2, W, "gfx942")
    V[16:32] = random_regs("f32", 16, W, "gfx942")
    d = M.mfma(name, "gfx942", V[0:2], V[8:10], V[16:32])
    for w in range(W):
        one = M.mfma(name, "gfx942", V[0:2, w:w + 1], V[8:10, w:w + 1], V[16:32, w:w + 1])
        assert np.array_equal(one[:, 0], d[:, w])
    v_copy = V.copy()
    M.mfma(name, "gfx942", V[0:2], V[8:10], V[16:32])
    assert np.array_equal(V, v_copy)                          # inputs untouched
    # out= writes D in place, also over C (accumulating into the same registers)
    res = M.mfma(name, "gfx942", V[0:2], V[8:10], V[16:32], out=V[16:32])
    assert res.base is V or res is V[16:32].base or np.shares_memory(res, V)
    assert np.array_equal(V[16:32], d) and np.array_equal(V[:16], v_copy[:16])
    for nm, regs in (("v_mfma_f32_4x4x4_16b_f16", (2, 2, 4)), ("v_mfma_f64_16x16x4_f64", (2, 2, 8)),
                     ("v_mfma_i32_16x16x32_i8", (2, 2, 4))):
        s2 = M.spec(nm)
        kinds = (s2.a_type, s2.b_type, {"f32": "f32", "f64": "f64", "i32": "f32"}[s2.out_type])
        ops3 = [random_regs(k, r, W, "gfx942") for k, r in zip(kinds, regs)]
        want = M.mfma(nm, "gfx942", *ops3)
        buf = np.zeros_like(ops3[2])
        assert M.mfma(nm, "gfx942", *ops3, out=buf) is buf and np.array_equal(buf, want)


@pytest.mark.parametrize("name,target", [("v_mfma_f32_32x32x8_bf16", "gfx942"), ("v_mfma_f32_4x4x4_16b_f16", "gfx942"),
                                         ("v_mfma_scale_f32_16x16x128_f8f6f4", "gfx950")])
def test_large_batches_equal_small_ones(name, target):
    """Batches over 256 waves run in chunks: the result equals separate calls on pieces."""
    s = M.spec(name, target)
    W = 300
    a = random_regs(s.a_type if s.layout == "gfx9" else "fp8", s.a_regs, W, target)
    b = random_regs(s.b_type if s.layout == "gfx9" else "fp8", s.b_regs, W, target)
    c = random_regs("f32", s.c_regs, W, target)
    kw = {}
    if s.scaled:
        kw = dict(scale_a=RNG.integers(120, 135, (W, 64)).astype(np.uint32), scale_b=np.uint32(127))
    d = M.mfma(name, target, a, b, c, **kw)
    for w0, w1 in ((0, 7), (7, 290), (290, 300)):
        part = {k: (v[w0:w1] if np.ndim(v) else v) for k, v in kw.items()}
        assert np.array_equal(d[:, w0:w1], M.mfma(name, target, a[:, w0:w1], b[:, w0:w1], c[:, w0:w1], **part))


@pytest.mark.parametrize("call,match", [
    (lambda: M.mfma("v_mfma_f32_16x16x16_bf16", "gfx942", *ops(2, 2, 4), cbsz=1), r"v_mfma_f32_16x16x16_bf16: cbsz=1"),
    (lambda: M.mfma("v_mfma_f32_32x32x8_f16", "gfx942", *ops(2, 2, 16), blgp=2), r"v_mfma_f32_32x32x8_f16: blgp=2"),
    (lambda: M.mfma("v_mfma_f32_16x16x16_bf16", "gfx942", *ops(2, 2, 4), abid=1), r"abid=1"),
    (lambda: M.mfma("v_mfma_f32_4x4x4_16b_f16", "gfx942", *ops(2, 2, 4), cbsz=5), r"cbsz=5 out of range 0..4"),
    (lambda: M.mfma("v_mfma_f32_4x4x4_16b_f16", "gfx942", *ops(2, 2, 4), cbsz=1, abid=2), r"abid=2 out of range"),
    (lambda: M.mfma("v_mfma_f32_16x16x128_f8f6f4", "gfx950", *ops(8, 8, 4), cbsz=5), r"cbsz=5 is not a matrix format"),
    (lambda: M.mfma("v_mfma_f32_16x16x128_f8f6f4", "gfx950", *ops(8, 8, 4), cbsz=4), r"A must be uint32\[4, W, 64\]"),
    (lambda: M.mfma("v_mfma_f32_16x16x128_f8f6f4", "gfx950", *ops(8, 8, 4), blgp=2), r"B must be uint32\[6, 1, 64\]"),
    (lambda: M.mfma("v_mfma_f32_16x16x8_xf32", "gfx950", *ops(2, 2, 4)), r"does not exist on gfx950"),
    (lambda: M.mfma("v_mfma_f32_16x16x32_bf16", "gfx942", *ops(4, 4, 4)), r"does not exist on gfx942"),
    (lambda: M.mfma("v_mfma_f32_8x8x8_bf16", "gfx942", *ops(2, 2, 4)), r"no MFMA 'v_mfma_f32_8x8x8_bf16'"),
    (lambda: M.mfma("v_mfma_f32_16x16x16_bf16", "gfx942", *ops(4, 2, 4)), r"A must be uint32\[2, W, 64\]"),
])
def test_bad_modifiers_and_names_raise_one_line_errors(call, match):
    with pytest.raises(M.MfmaError, match=match) as err:
        call()
    assert isinstance(err.value, IsagenError) and "\n" not in str(err.value)


def ops(ra, rb, rc, W=1):
    return (np.zeros((ra, W, 64), np.uint32), np.zeros((rb, W, 64), np.uint32), np.zeros((rc, W, 64), np.uint32))
