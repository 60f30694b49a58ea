"""Kernels compiled by Triton 3.9 for gfx942 / gfx950 (an independent producer of AMD code objects), run
in the emulator and compared with numpy/torch: a masked vector add, a row softmax, a layernorm and a bf16
matmul with tl.dot on shapes that are not multiples of the blocks.  The sanitizer is on and must report
nothing for these compiler-generated kernels."""

import os

import numpy as np
import pytest

triton = pytest.importorskip("triton")
import torch  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from isagen.runtime.emu import Device  # noqa: E402

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n_cols
    x = tl.load(in_ptr + row * in_stride + offs, mask=m, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * out_stride + offs, e / tl.sum(e, axis=0), mask=m)


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=m, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(m, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs, mask=m)
    tl.store(y_ptr + row * stride + offs, d * rstd * w + b, mask=m)


@triton.jit
def matmul_kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        av = tl.load(a + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        bv = tl.load(b + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(av, bv)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.bfloat16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def attention_kernel(Q, K, V, O, sm_scale, N_CTX, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1) * N_CTX * D
    offs_m = start_m * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + base + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < N_CTX, other=0.0)
    m_i = tl.zeros([BM], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    for start_n in range(0, N_CTX, BN):
        cols = start_n + offs_n
        k = tl.load(K + base + cols[None, :] * D + offs_d[:, None], mask=cols[None, :] < N_CTX, other=0.0)
        qk = tl.dot(q, k) * (sm_scale * 1.44269504)
        qk = tl.where(cols[None, :] < N_CTX, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + base + cols[:, None] * D + offs_d[None, :], mask=cols[:, None] < N_CTX, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_ij
    tl.store(O + base + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(tl.float16),
             mask=offs_m[:, None] < N_CTX)


@triton.jit
def fp8_matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a + rm[:, None] * K + (k + rk)[None, :]),
                      tl.load(b + (k + rk)[:, None] * N + rn[None, :]))
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


_FP8 = {"gfx942": ("fp8e4b8", torch.float8_e4m3fnuz), "gfx950": ("fp8e4nv", torch.float8_e4m3fn)}


_SIGS = {
    "add": (add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
            {"BLOCK": 1024}, 4),
    "softmax": (softmax_kernel, {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_stride": "i32", "out_stride": "i32",
                                 "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 256}, 4),
    "layernorm": (layernorm_kernel, {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32",
                                     "stride": "i32", "n_cols": "i32", "eps": "fp32", "BLOCK": "constexpr"},
                  {"BLOCK": 512}, 4),
    "matmul": (matmul_kernel, {**{k: "*bf16" for k in "abc"}, **{k: "i32" for k in
                                                                 "M N K sam sak sbk sbn scm scn".split()},
                               "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
               {"BM": 64, "BN": 64, "BK": 32}, 4),
    "attention": (attention_kernel, {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "O": "*fp16", "sm_scale": "fp32",
                                     "N_CTX": "i32", "D": "constexpr", "BM": "constexpr", "BN": "constexpr"},
                  {"D": 64, "BM": 64, "BN": 32}, 4),
}

ARCHS = ["gfx942", "gfx950"]


def _needs_decoder(arch):
    from isagen.isa import decoder
    try:
        decoder.opcode_table(arch)
    except Exception as exc:     # the gfx950 opcode table is generated by another work item
        pytest.skip(f"the decoder has no {arch} opcode table yet: {exc}")


@pytest.fixture(scope="module")
def compiled():
    """(kernel, arch) -> (code object bytes, dynamic LDS bytes), compiled once per session."""
    cache = {}

    def get(which, arch):
        key = (which, arch)
        if key not in cache:
            if which == "fp8_matmul":
                ty = _FP8[arch][0]
                _SIGS[which] = (fp8_matmul_kernel, {"a": "*" + ty, "b": "*" + ty, "c": "*fp32", "M": "i32", "N": "i32",
                                                    "K": "i32", "BM": "constexpr", "BN": "constexpr",
                                                    "BK": "constexpr"}, {"BM": 64, "BN": 64, "BK": 64}, 4)
            fn, sig, consts, warps = _SIGS[which]
            k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                               target=GPUTarget("hip", arch, 64), options={"num_warps": warps})
            cache[key] = (k.asm["hsaco"], int(k.metadata.shared))
        return cache[key]
    return get


def _load(compiled, which, arch):
    """(device, loaded module, dynamic LDS bytes) of Triton's ``which`` kernel built for ``arch``."""
    _needs_decoder(arch)
    co, shared = compiled(which, arch)
    dev = Device(arch)
    return dev, dev.load_module(co), shared


@pytest.mark.parametrize("arch", ARCHS)
def test_masked_vector_add(compiled, arch):
    dev, mod, shared = _load(compiled, "add", arch)
    n = 3000                                          # not a multiple of the 1024-element block
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    dx, dy = dev.to_device(x), dev.to_device(y)
    out = dev.to_device(np.full(n + 64, 7.0, np.float32))   # sentinel tail must survive
    reports = mod.launch("add_kernel", grid=((n + 1023) // 1024, 1, 1), block=(256, 1, 1),
                         args=[dx, dy, out, np.int32(n), 0, 0], shared_bytes=shared, on_error="collect")
    assert reports == []
    got = dev.from_device(out, n + 64, np.float32)
    np.testing.assert_array_equal(got[:n], x + y)              # IEEE fp32 add: bit-exact
    assert (got[n:] == 7.0).all()
    s = mod.last_stats
    # bytes the kernel must move: two n-element fp32 reads and one write (masked lanes move nothing)
    assert (s["global_bytes_read"], s["global_bytes_written"]) == (8 * n, 4 * n)
    assert s["wave_instructions"] == sum(s["categories"].values()) > 0
    assert s["workgroups"] == 3 and s["waves"] == 12


@pytest.mark.parametrize("arch", ARCHS)
def test_row_softmax(compiled, arch):
    dev, mod, shared = _load(compiled, "softmax", arch)
    rows, cols = 5, 200
    x = np.random.default_rng(2).standard_normal((rows, cols)).astype(np.float32) * 4
    dx, dy = dev.to_device(x), dev.to_device(np.zeros((rows, cols), np.float32))
    assert mod.launch("softmax_kernel", grid=(rows, 1, 1), block=(256, 1, 1),
                      args=[dy, dx, np.int32(cols), np.int32(cols), np.int32(cols), 0, 0],
                      shared_bytes=shared, on_error="collect") == []
    got = dev.from_device(dy, (rows, cols), np.float32)
    ref = torch.softmax(torch.from_numpy(x).double(), dim=1).numpy()
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-9)


@pytest.mark.parametrize("arch", ARCHS)
def test_layernorm(compiled, arch):
    dev, mod, shared = _load(compiled, "layernorm", arch)
    rows, cols = 4, 300
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, cols)).astype(np.float32) * 3 + 1
    w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    bufs = [dev.to_device(v) for v in (x, w, b, np.zeros((rows, cols), np.float32))]
    assert mod.launch("layernorm_kernel", grid=(rows, 1, 1), block=(256, 1, 1),
                      args=bufs + [np.int32(cols), np.int32(cols), np.float32(1e-5), 0, 0],
                      shared_bytes=shared, on_error="collect") == []
    got = dev.from_device(bufs[3], (rows, cols), np.float32)
    ref = torch.nn.functional.layer_norm(torch.from_numpy(x).double(), (cols,), torch.from_numpy(w).double(),
                                         torch.from_numpy(b).double(), eps=1e-5).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_matmul_ragged(compiled, arch):
    dev, mod, shared = _load(compiled, "matmul", arch)
    M, N, K = 100, 72, 50                              # none a multiple of the 64x64x32 blocks
    g = torch.Generator().manual_seed(4)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16)
    b = torch.randn(K, N, generator=g).to(torch.bfloat16)
    da, db = dev.to_device(a), dev.to_device(b)
    dc = dev.to_device(np.zeros((M, N), np.uint16))
    strides = (K, 1, N, 1, N, 1)
    assert mod.launch("matmul_kernel", grid=((M + 63) // 64, (N + 63) // 64, 1), block=(256, 1, 1),
                      args=[da, db, dc] + [np.int32(v) for v in (M, N, K) + strides] + [0, 0],
                      shared_bytes=shared, on_error="collect") == []
    got = torch.from_numpy(dev.from_device(dc, (M, N), np.uint16).view(np.int16)).view(torch.bfloat16).float()
    ref = a.double() @ b.double()
    # fp32 accumulation then one rounding to bf16: within one bf16 ulp (2^-8 relative) plus fp32 noise
    tol = ref.abs() * 2.0 ** -8 + 1e-3
    assert ((got.double() - ref).abs() <= tol).all()
    assert mod.last_stats["categories"].get("mfma", 0) > 0


@pytest.mark.parametrize("arch", ARCHS)
def test_flash_attention_forward(compiled, arch):
    # two dots, exp2, running max/sum, LDS layout conversions of replicated data; ragged sequence length
    dev, mod, shared = _load(compiled, "attention", arch)
    H, N, D = 2, 100, 64
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(H, N, D, generator=g).half() for _ in range(3))
    bufs = [dev.to_device(t) for t in (q, k, v)] + [dev.to_device(np.zeros((H, N, D), np.float16))]
    assert mod.launch("attention_kernel", grid=((N + 63) // 64, H, 1), block=(256, 1, 1),
                      args=bufs + [np.float32(0.125), np.int32(N), 0, 0], shared_bytes=shared,
                      on_error="collect") == []
    got = torch.from_numpy(dev.from_device(bufs[3], (H, N, D), np.float16)).double()
    ref = torch.softmax((q.double() @ k.double().transpose(1, 2)) * 0.125, -1) @ v.double()
    # fp16 P and output roundings: ~1e-3 relative
    assert (got - ref).abs().max() < 2e-3


@pytest.mark.parametrize("arch", ARCHS)
def test_fp8_matmul(compiled, arch):
    # gfx942: e4m3 FNUZ operands; gfx950: OCP e4m3fn, B read with ds_read_b64_tr_b8 (a wrong transpose
    # rule gives errors of the order of the result itself).  Products of fp8 values are exact; only
    # the fp32 accumulation rounds.
    dev, mod, shared = _load(compiled, "fp8_matmul", arch)
    M = N = K = 128
    g = torch.Generator().manual_seed(6)
    tt = _FP8[arch][1]
    a = (torch.randn(M, K, generator=g) * 2).to(tt)
    b = (torch.randn(K, N, generator=g) * 2).to(tt)
    da, db = dev.to_device(a.view(torch.uint8).numpy()), dev.to_device(b.view(torch.uint8).numpy())
    dc = dev.to_device(np.zeros((M, N), np.float32))
    assert mod.launch("fp8_matmul_kernel", grid=(2, 2, 1), block=(256, 1, 1),
                      args=[da, db, dc, np.int32(M), np.int32(N), np.int32(K), 0, 0], shared_bytes=shared,
                      on_error="collect") == []
    got = torch.from_numpy(dev.from_device(dc, (M, N), np.float32)).double()
    ref = a.double() @ b.double()
    assert (got - ref).abs().max() <= 1e-3 * ref.abs().max()
