"""More AITER assembly families on the emulator, launched as AITER's C++ launchers do, against torch.

* bf16 GEMM ``bf16gemm_fp32bf16_tn_64x64_pf3_splitk`` (gfx942; its 336-byte kernarg segment has no
  semaphore slot) and ``bf16gemm_bf16_tn_256x256`` (gfx950);
* fp8 block-scale GEMM with pre-shuffled B, ``fp8gemm_bf16_blockscale_BpreShuffle_32x128`` (gfx942 FNUZ and
  gfx950 OCP fp8; ``csrc/py_itfs_cu/asm_a8w8_blockscale_bpreshuffle.cu``);
* int8 per-token GEMM with pre-shuffled B, ``I8gemm_bf16_perTokenI8_BpreShuffle_16x128`` (gfx942 and gfx950;
  ``csrc/py_itfs_cu/asm_gemm_a8w8.cu``) and ``..._112x256`` (gfx942: DPP ``row_newbcast`` and VGPR index
  mode, ``s_set_gpr_idx_on``, in its epilogue).

References are torch's float64/float32 math on the same quantized inputs (block scales applied per 128
elements of K as AITER's ``op_tests/test_gemm_a8w8_blockscale.py`` ``run_torch`` does); B is shuffled by
``shuffle_weight_16x16``, AITER's ``shuffle_weight(layout=(16, 16))``.  Sanitizer on: the only findings
allowed are the wait-state reports docs/emulator.md discusses for AITER's kernels (M0 before LDS DMA,
VALU-written SGPR read by VALU) and, in the fp8 kernels, a VALU read of an MFMA result fewer wait states
after it than LLVM's table asks (docs/model.md, "AITER kernels on the emulator").
"""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from isagen.runtime import aiter  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data" / "aiter"
KNOWN = ("reads m0 as the LDS-DMA base 0 wait states after an SALU wrote it",
         "wait state(s) after `v_cmp_u_f32_e64",
         "wait state(s) after `v_mfma_f32_16x16x32_fp8_fp8")


def _only_known(reports):
    assert [str(r) for r in reports if r.category != "hazard" or not any(k in r.message for k in KNOWN)] == []


def test_bf16_pf3_kernel_matches_torch():
    g = torch.Generator().manual_seed(3)
    M, N, K = 100, 128, 512
    A = torch.randn(M, K, generator=g).bfloat16()
    B = torch.randn(N, K, generator=g).bfloat16()
    co = DATA / "gfx942" / "bf16gemm__bf16gemm_fp32bf16_tn_64x64_pf3_splitk.co"
    out, reports, mod = aiter.gemm_a16w16(A, B, str(co), splitk=1, on_error="collect")
    ref = A.float() @ B.float().T
    assert ((out - ref).norm() / ref.norm()).item() < 1e-6
    assert mod.last_stats["grid"] == (2, 2, 1)
    _only_known(reports)


def test_bf16_256x256_gfx950_matches_torch():
    g = torch.Generator().manual_seed(4)
    M = N = K = 256
    A = torch.randn(M, K, generator=g).bfloat16()
    B = torch.randn(N, K, generator=g).bfloat16()
    # its epilogue pairs output quads of two MFMA tiles with v_permlane16_swap_b32 (odd rows of vdst <->
    # even rows of src0): a swap of the wrong rows permutes C's columns in groups of 4
    out, reports, _ = aiter.gemm_a16w16(A, B, str(DATA / "gfx950" / "bf16gemm__bf16gemm_bf16_tn_256x256.co"),
                                        splitk=1, out_dtype="bfloat16", on_error="collect")
    ref = A.double() @ B.double().T
    assert ((out.double() - ref).norm() / ref.norm()).item() < 4e-3        # bf16 output rounding
    _only_known(reports)


@pytest.mark.parametrize("arch,split", [("gfx942", 1), ("gfx950", 2)])
def test_fp8_blockscale_matches_torch(arch, split):
    fp8 = torch.float8_e4m3fnuz if arch == "gfx942" else torch.float8_e4m3fn
    M, N, K = 40, 256, 512
    g = torch.Generator().manual_seed(5)
    A = torch.randn(M, K, generator=g).to(fp8)
    B = torch.randn(N, K, generator=g).to(fp8)
    xs = torch.rand(M, K // 128, generator=g) + 0.5
    ws = torch.rand(N // 128, K // 128, generator=g) + 0.5
    co = DATA / arch / "fp8gemm_blockscale__fp8gemm_bf16_blockscale_BpreShuffle_32x128.co"
    out, reports, mod = aiter.gemm_a8w8_blockscale_bpreshuffle(A, aiter.shuffle_weight_16x16(B), xs, ws, str(co),
                                                               splitk=split, on_error="collect")
    x = (A.double().view(M, K // 128, 128) * xs.double().unsqueeze(-1)).view(M, K)
    w = (B.double().view(N // 128, 128, K // 128, 128) * ws.double()[:, None, :, None]).view(N, K)
    ref = x @ w.T
    assert out.dtype == torch.bfloat16
    assert ((out.double() - ref).norm() / ref.norm()).item() < 8e-3          # bf16 output rounding
    assert mod.last_stats["grid"] == (N // 128 * split, 2, 1)
    _only_known(reports)


@pytest.mark.parametrize("arch,split", [("gfx942", 1), ("gfx942", 2), ("gfx950", 1)])
def test_int8_per_token_matches_torch(arch, split):
    M, N, K = 40, 256, 512
    g = torch.Generator().manual_seed(6)
    A = torch.randint(-100, 100, (M, K), generator=g, dtype=torch.int8)
    B = torch.randint(-100, 100, (N, K), generator=g, dtype=torch.int8)
    xs, ws = torch.rand(M, 1, generator=g) * 0.01, torch.rand(N, 1, generator=g) * 0.01
    bias = torch.rand(1, N, generator=g) * 10
    co = DATA / arch / "i8gemm__I8gemm_bf16_perTokenI8_BpreShuffle_16x128.co"
    out, reports, mod = aiter.gemm_a8w8_asm(A, aiter.shuffle_weight_16x16(B), xs, ws, bias, str(co), splitk=split,
                                            on_error="collect")
    ref = (A.double() @ B.double().T) * xs.double() * ws.double().T + bias.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 8e-3
    assert mod.last_stats["grid"] == (2 * split, 3, 1)
    _only_known(reports)


def test_shuffle_weight_is_a_permutation():
    w = torch.arange(32 * 64, dtype=torch.int32).view(32, 64).to(torch.int8)
    s = aiter.shuffle_weight_16x16(w.view(torch.uint8)).view(torch.int8)
    assert sorted(s.flatten().tolist()) == sorted(w.flatten().tolist())
    # the first 16 bytes of the shuffled rows are row 0's first 16 K elements, then row 1's (16 rows per pack)
    assert s.flatten()[:16].tolist() == w[0, :16].tolist() and s.flatten()[16:32].tolist() == w[1, :16].tolist()


def test_int8_112x256_index_mode_epilogue_matches_torch():
    # its epilogue converts and scales the accumulators under VGPR index mode (s_set_gpr_idx_on with M0
    # stepping through them) and broadcasts with DPP row_newbcast: both must run as the ISA says for
    # the result to match.  The sanitizer also finds that the epilogue's LDS transpose rewrites the words
    # other waves read after the previous barrier with no barrier between (a write-after-read race the
    # kernel leaves to timing): reported, and checked here so that a change in it is noticed.
    M, N, K = 112, 512, 256
    g = torch.Generator().manual_seed(7)
    A = torch.randint(-100, 100, (M, K), generator=g, dtype=torch.int8)
    B = torch.randint(-100, 100, (N, K), generator=g, dtype=torch.int8)
    xs, ws = torch.rand(M, 1, generator=g) * 0.01, torch.rand(N, 1, generator=g) * 0.01
    bias = torch.rand(1, N, generator=g) * 10
    co = DATA / "gfx942" / "i8gemm__I8gemm_bf16_perTokenI8_BpreShuffle_112x256.co"
    out, reports, mod = aiter.gemm_a8w8_asm(A, aiter.shuffle_weight_16x16(B), xs, ws, bias, str(co),
                                            on_error="collect")
    ref = (A.double() @ B.double().T) * xs.double() * ws.double().T + bias.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 8e-3
    assert mod.last_stats["grid"] == (2, 1, 1)
    races = [r for r in reports if r.category == "lds-race"]
    assert races and all(r.instruction.startswith("ds_write_b128 v136") for r in races)
    _only_known([r for r in reports if r.category != "lds-race"])
