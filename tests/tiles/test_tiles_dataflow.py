"""The GEMM's data movement, modelled in numpy and checked against numpy's matmul.

The model executes what the tile primitives describe (``isagen.tiles.simulate``: every LDS-DMA lane's
global offset with the buffer range check and the leading-pad mask, every ``ds_read`` lane's LDS
address, ``ds_read_b64_tr_b16``'s transpose) and feeds the register contents through an MFMA model
written here from the AMD Matrix Instruction Calculator's lane layouts (reference notes §2a), not from
isagen's code.  A wrong swizzle, fragment mapping, k bijection, window or mask makes C differ from
A·Bᵀ (or A·B).  It also checks that the accumulator mapping the epilogue uses (``tiles.mma.acc_coords``)
is the calculator's C/D layout.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from isagen.builders.program import LdsRegion
from isagen.builders.registry import params_from
from isagen.kernels.gemm import PARAMS, make_plan, primitives
from isagen.targets import get_target
from isagen.tiles.mma import acc_coords
from isagen.tiles.simulate import dma_tile, read


def plan_for(target, **kw):
    p = {k: v.default for k, v in PARAMS.items()}
    p.update(kw)
    return make_plan(params_from(p, "t"), target)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bit patterns (round to nearest even), and the exact values they hold."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def operand_matrix(vals: np.ndarray, mi: int, kl: int) -> np.ndarray:
    """Calculator layout: element [row][k] of an MFMA A (or B, with row = column j) operand is in lane
    ``mi*(k // kl) + row``, position ``k % kl`` of the lane's packed bf16 values."""
    kk = (64 // mi) * kl
    out = np.empty((mi, kk))
    for row in range(mi):
        for k in range(kk):
            out[row, k] = vals[mi * (k // kl) + row, k % kl]
    return out


def d_layout(mi: int):
    """Calculator C/D layout: (lane, reg) of D[i][j]."""
    if mi == 16:
        return lambda i, j: (16 * (i // 4) + j, i % 4)
    return lambda i, j: ((32 * (i // 4)) % 64 + j, 4 * (i // 8) + i % 4)


def simulate(plan, A, B, M, N, K, pid_m, pid_n):
    """C tile of workgroup (pid_m, pid_n) as the kernel's data movement computes it (float64)."""
    stub = SimpleNamespace(target=plan.target)
    sa, sb = plan.layout_a.size, plan.layout_b.size
    lds_a = [LdsRegion("A0", 0, sa), LdsRegion("A1", sa, sa)]
    lds_b = [LdsRegion("B0", 2 * sa, sb), LdsRegion("B1", 2 * sa + sb, sb)]
    gA, gB, a_reads, b_reads = primitives(plan, stub, (lds_a, lds_b), (None, None))
    ra = {r.key: r for r in a_reads}
    rb = {r.key: r for r in b_reads}
    image = np.zeros(plan.lds_bytes, np.uint8)
    mem_a = A.reshape(-1).view(np.uint8)
    mem_b = B.reshape(-1).view(np.uint8)
    bk = plan.block_k
    pad = (bk - K % bk) % bk
    tiles = -(-K // bk)
    m0, n0 = pid_m * plan.block_m, pid_n * plan.block_n
    base_a, rec_a = m0 * K * 2 - pad * 2, (M - m0) * K * 2 + pad * 2
    if plan.layout == "abt":
        base_b, rec_b, step_b = n0 * K * 2 - pad * 2, (N - n0) * K * 2 + pad * 2, bk * 2
    else:
        base_b, rec_b, step_b = n0 * 2 - pad * N * 2, K * N * 2 + pad * N * 2 - n0 * 2, bk * N * 2
    env = {"ld_k_bytes": K * 2, "ld_n_bytes": N * 2, "n_left": N - n0}
    mi, kl, fr = plan.frag_rows, plan.fragment.k_per_mfma, plan.fragment
    C = np.zeros((plan.block_m, plan.block_n))
    for t in range(tiles):
        st = t % 2
        first = pad if t == 0 else None
        dma_tile(gA, mem_a, base_a + t * bk * 2, max(rec_a - t * bk * 2, 0), image, st, env, first)
        dma_tile(gB, mem_b, base_b + t * step_b, max(rec_b - t * step_b, 0), image, st, env, first)
        for wm in range(plan.wave_rows):
            for wn in range(plan.wave_cols):
                ew = {**env, "a_row0": wm * plan.wave_tile_m, "b_row0": wn * plan.wave_tile_n}
                for s in range(plan.slices):
                    av = {fm: read(image, ra[(st, fm, s)], ew).view(np.uint16) for fm in range(plan.frags_m)}
                    bv = {}
                    for fn in range(plan.frags_n):
                        if plan.b_read == "kmajor":
                            bv[fn] = read(image, rb[(st, fn, s)], ew).view(np.uint16)
                        elif plan.b_read == "tr16":
                            bv[fn] = np.concatenate([read(image, rb[(st, fn, s, h)], ew).view(np.uint16)
                                                     for h in range(2)], axis=1)
                        else:
                            bv[fn] = np.concatenate([read(image, rb[(st, fn, s, j)], ew).view(np.uint16)
                                                     for j in range(fr.k_per_read)], axis=1)
                    for h in range(fr.mfmas_per_slice):
                        for fm in range(plan.frags_m):
                            for fn in range(plan.frags_n):
                                s1 = operand_matrix(bf16_value(av[fm][:, h * kl:(h + 1) * kl]), mi, kl)   # src1 = A
                                s0 = operand_matrix(bf16_value(bv[fn][:, h * kl:(h + 1) * kl]), mi, kl)   # src0 = B
                                d = s0 @ s1.T              # D[i][j] = sum_k src0[i][k] * src1[k][j]
                                r0, c0 = wm * plan.wave_tile_m + fm * mi, wn * plan.wave_tile_n + fn * mi
                                C[r0:r0 + mi, c0:c0 + mi] += d.T      # D[i=n][j=m] -> C[m][n]
    return C


CASES = [
    # target, schedule, layout, mfma, M, N, K
    ("gfx942", "pingpong8", "abt", 16, 200, 136, 72),
    ("gfx942", "pingpong8", "abt", 32, 256, 256, 64),
    ("gfx942", "pingpong8", "ab", 16, 256, 248, 40),
    ("gfx942", "interleave4", "abt", 16, 256, 256, 96),
    ("gfx942", "interleave4", "ab", 32, 130, 256, 32),
    ("gfx950", "pingpong8", "abt", 16, 256, 256, 136),
    ("gfx950", "pingpong8", "abt", 32, 256, 200, 64),
    ("gfx950", "pingpong8", "ab", 16, 256, 256, 72),
    ("gfx950", "pingpong8", "ab", 32, 100, 256, 64),
    ("gfx950", "interleave4", "abt", 16, 256, 256, 128),
    ("gfx950", "interleave4", "ab", 16, 256, 256, 64),
    ("gfx942", "pingpong8", "abt", 16, 192, 256, 64, {"block_m": 192}),
    ("gfx950", "interleave4", "abt", 16, 128, 128, 64, {"block_m": 128, "block_n": 128}),
]


@pytest.mark.parametrize("target,schedule,layout,mfma,M,N,K,extra", [c + ({},) * (8 - len(c)) for c in CASES])
def test_dataflow_matches_matmul(target, schedule, layout, mfma, M, N, K, extra):
    plan = plan_for(target, schedule=schedule, layout=layout, mfma=mfma, **extra)
    rng = np.random.default_rng(7)
    a = bf16_bits(rng.standard_normal((M, K)))
    b = bf16_bits(rng.standard_normal((N, K) if layout == "abt" else (K, N)))
    ref = bf16_value(a) @ (bf16_value(b).T if layout == "abt" else bf16_value(b))
    C = simulate(plan, a, b, M, N, K, 0, 0)
    want = np.zeros_like(C)
    r, c = min(M, plan.block_m), min(N, plan.block_n)
    want[:r, :c] = ref[:r, :c]
    # rows past M: A rows read 0 (C is 0 there and dropped by the store); columns past N: B reads 0
    np.testing.assert_allclose(C, want, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("mi", [16, 32])
def test_accumulator_mapping_is_the_calculators(mi):
    """acc_coords (what the epilogue stores where) against the calculator's D layout, with B as src0."""
    target = get_target("gfx950")
    info = target.find_mfma("bf16", mi, mi)[0]
    m, n = acc_coords(info)
    where = d_layout(mi)
    for i in range(mi):          # D row i = n (B is src0)
        for j in range(mi):      # D column j = m
            lane, reg = where(i, j)
            assert (m[reg, lane], n[reg, lane]) == (j, i)
