"""The cuda emulator engine (CuPy on an NVIDIA GPU) against the CPU engine, bit for bit, and against torch;
its sanitizer against the CPU engine's reports.

Skipped with the reason where CuPy or a CUDA device is missing (CI).  The code objects come from Triton
and the AMDGPU toolchain where installed, else from ``$ISAGEN_EMU_CUDA_FIXTURES`` (written on a machine
that has them by ``python tools/emu_cuda_fixtures.py DIR``).  The engine-selection tests at the end run
everywhere.
"""

import warnings

import numpy as np
import pytest
import torch

from isagen.runtime.emu import Device
from isagen.runtime.emu import mfma as M
from isagen.runtime.emu import xp as X


def _cuda_reason():
    try:
        X.cupy_module()
    except X.EngineError as e:
        return str(e)
    return None


REASON = _cuda_reason()
needs_cuda = pytest.mark.skipif(REASON is not None, reason=f"no cuda engine here: {REASON}")


def _fixture(fn, *a):
    try:
        return fn(*a)
    except Exception as e:        # no Triton / toolchain and no prebuilt fixtures
        pytest.skip(f"code object unavailable ({type(e).__name__}: {e}); see tools/emu_cuda_fixtures.py")


def _bf16_pair(M_, N_, K, seed, bt=False):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M_, K, generator=g).bfloat16()
    B = torch.randn(*((N_, K) if bt else (K, N_)), generator=g).bfloat16()
    return A, B


def _as_double(bits: np.ndarray, shape):
    return torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16).double().reshape(shape)


@needs_cuda
@pytest.mark.parametrize("engine_cls", ["bf16_32", "f16_16", "fp8_16", "i8_32"])
def test_mfma_random_bits_match_cpu(engine_cls):
    """One MFMA on random register contents (the whole finite range: the sum's order shows) gives the
    same bits on both engines (the cuda engine's k-order kernel against numpy's matmul path)."""
    name = {"bf16_32": "v_mfma_f32_32x32x8_bf16", "f16_16": "v_mfma_f32_16x16x16_f16",
            "fp8_16": "v_mfma_f32_16x16x32_fp8_fp8", "i8_32": "v_mfma_i32_32x32x16_i8"}[engine_cls]
    s = M.spec(name, "gfx942")
    na, nb = M.operand_regs(name, 0, 0)
    rng = np.random.default_rng(7)
    W = 40
    a = rng.integers(0, 2**32, (na, W, 64), dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, (nb, W, 64), dtype=np.uint64).astype(np.uint32)
    c = rng.integers(0, 2**32, (s.c_regs, W, 64), dtype=np.uint64).astype(np.uint32)
    if s.out_type == "f32":       # finite C and inputs: NaN payloads may differ (docs/emulator.md)
        c = (rng.standard_normal((s.c_regs, W, 64)) * 1e3).astype(np.float32).view(np.uint32)
    with X.engine("cpu"):
        ref = M.mfma(name, "gfx942", a, b, c)
    cp = X.cupy_module()
    with X.engine("cuda"):
        got = M.mfma(name, "gfx942", cp.asarray(a), cp.asarray(b), cp.asarray(c)).get()
    if s.out_type == "f32":
        nan = np.isnan(ref.view(np.float32))
        assert (nan == np.isnan(got.view(np.float32))).all()
        ref, got = ref[~nan], got[~nan]
    assert np.array_equal(ref, got)


@needs_cuda
@pytest.mark.parametrize("n", [256, 384])
def test_triton_matmul_same_bits_as_cpu(n):
    from tools import emu_cuda_fixtures as F
    k = _fixture(F.triton_matmul)
    A, B = _bf16_pair(n, n, n, n)
    a16, b16 = A.view(torch.int16).numpy(), B.view(torch.int16).numpy()
    outs = {}
    for eng in ("cpu", "cuda"):
        dev = Device("gfx942", sanitize=False, array_module=eng)
        with warnings.catch_warnings():
            warnings.simplefilter("error", X.FtzWarning)      # its float32 VALU ops cannot see a flush
            _, c, _ = F.run_triton(dev, k, a16, b16, n, n, n)
        outs[eng] = dev.from_device(c, (n * n,), np.uint16)
    assert np.array_equal(outs["cpu"], outs["cuda"])
    C, ref = _as_double(outs["cuda"], (n, n)), A.double() @ B.double()
    assert ((C - ref).abs() <= 2.0 ** -8 * ref.abs() + 1e-4 * (A.double().abs() @ B.double().abs())).all()


@needs_cuda
@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_gemm_bf16_same_bits_as_cpu(target):
    from tools import emu_cuda_fixtures as F
    co = _fixture(F.gemm_co, target)
    m, n, k = 512, 256, 320
    A, B = _bf16_pair(m, n, k, 3, bt=True)
    a16, b16 = A.view(torch.int16).numpy(), B.view(torch.int16).numpy()
    outs = {}
    for eng in ("cpu", "cuda"):
        dev = Device(target, sanitize=False, array_module=eng)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            _, c, _ = F.run_gemm(dev, target, co, a16, b16, m, n, k)
        # v_rcp_f32 in its index arithmetic: the cuda engine says a flushed subnormal could change it
        assert any(issubclass(w.category, X.FtzWarning) for w in seen) == (eng == "cuda")
        outs[eng] = dev.from_device(c, (m * n,), np.uint16)
    assert np.array_equal(outs["cpu"], outs["cuda"])
    C, ref = _as_double(outs["cuda"], (m, n)), A.double() @ B.double().T
    assert ((C - ref).abs() <= 2.0 ** -8 * ref.abs() + 1e-5 * np.sqrt(k) * 8).all()


def _f32_operands(rng, n):
    """float32 bit patterns over every class: random bits (NaN payloads, both signs), subnormals, values
    near the overflow and underflow edges, zeros and infinities."""
    with np.errstate(all="ignore"):             # (the near-overflow draws may round to inf)
        parts = [rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32),
                 rng.integers(1, 0x800000, n, dtype=np.uint32) | (rng.integers(0, 2, n, dtype=np.uint32) << 31),
                 (rng.standard_normal(n) * 3e38).astype(np.float32).view(np.uint32),
                 (rng.standard_normal(n) * 2e-38).astype(np.float32).view(np.uint32),
                 np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0x00800000, 1],
                          np.uint32)]
    return np.concatenate(parts)


@needs_cuda
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_f32_arith_kernel_gives_numpys_bits(op):
    """xp.f32_arith (v_add/sub/subrev/mul_f32 and the output modifier on the cuda engine) against numpy's
    float32 arithmetic on the host, bit for bit, over every pairing of the classes above: subnormal inputs
    and results kept, a NaN operand's NaN quieted, invalid operations x86's default NaN.  (Pairs of two NaNs
    left out: which one numpy's loop returns is the compiler's choice.)"""
    rng = np.random.default_rng(5)
    a = _f32_operands(rng, 4000)
    b = _f32_operands(rng, 4000)
    rng.shuffle(b)
    nan = lambda u: (u & 0x7FFFFFFF) > 0x7F800000           # noqa: E731
    keep = ~(nan(a) & nan(b))
    a, b = a[keep], b[keep]
    fa, fb = a.view(np.float32), b.view(np.float32)
    with np.errstate(all="ignore"):
        ref = {"add": fa + fb, "sub": fa - fb, "mul": fa * fb}[op].view(np.uint32)
    cp = X.cupy_module()
    with X.engine("cuda"):
        got = X.f32_arith(op, cp.asarray(fa), cp.asarray(fb)).view(cp.uint32).get()
        one = X.f32_arith(op, cp.asarray(fa), np.float32(1.5)).view(cp.uint32).get()     # a host scalar operand
    with np.errstate(all="ignore"):
        ref_one = {"add": fa + np.float32(1.5), "sub": fa - np.float32(1.5), "mul": fa * np.float32(1.5)}[op]
    assert np.array_equal(got, ref)
    assert np.array_equal(one, ref_one.view(np.uint32))


@needs_cuda
def test_ldexp_f32_gives_numpys_bits():
    """v_ldexp_f32's arithmetic on the cuda engine (exact widening and rounding, NaNs passed through) against
    the CPU engine's numpy path, bit for bit, over every class of operand and exponents that move values
    across the subnormal and overflow edges."""
    from isagen.runtime.emu import ops_valu as V
    rng = np.random.default_rng(9)
    x = _f32_operands(rng, 2000).view(np.float32)
    e = rng.integers(-300, 300, x.size).astype(np.int32)
    with X.engine("cpu"), np.errstate(all="ignore"):
        ref = np.asarray(V._ldexp32(x, e)).view(np.uint32)
    cp = X.cupy_module()
    with X.engine("cuda"):
        got = V._ldexp32(cp.asarray(x), cp.asarray(e)).view(cp.uint32).get()
    assert np.array_equal(got, ref)


def _report_key(r):
    return (r.category, r.pc, r.message, r.workgroup, r.wave, r.lanes, r.address, r.extra.get("occurrences", 1))


@needs_cuda
@pytest.mark.parametrize("kernel", ["triton", "gemm_bf16_gfx942", "gemm_bf16_gfx950"])
def test_out_of_bounds_loads_reported_as_on_cpu(kernel):
    """B's allocation 4 KiB short of what the kernel reads: the cuda engine's load kernels (global loads,
    LDS DMA) report the same out-of-bounds accesses as the CPU engine (collect mode) and leave the same C."""
    from tools import emu_cuda_fixtures as F
    m = n = k = 256
    bt = kernel != "triton"
    A, B = _bf16_pair(m, n, k, 5, bt=bt)
    a16, b16 = A.view(torch.int16).numpy(), B.view(torch.int16).numpy().ravel()[:-2048].copy()
    out = {}
    for eng in ("cpu", "cuda"):
        if kernel == "triton":
            target, co, name = "gfx942", _fixture(F.triton_matmul), None
        else:
            target = kernel.rsplit("_", 1)[1]
            co, name = _fixture(F.gemm_co, target), "gemm_bf16"
        dev = Device(target, sanitize=False, array_module=eng)
        a, b = dev.to_device(a16), dev.to_device(b16)
        c = dev.alloc(m * n * 2, "C")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", X.FtzWarning)
            if kernel == "triton":
                mod = dev.load_module(co.hsaco)
                reps = mod.launch(co.name, grid=co.grid(m, n), block=co.block, shared_bytes=co.shared,
                                  args=co.args(a, b, c, m, n, k), on_error="collect")
            else:
                from isagen.builders.contract import evaluate
                info = F.gemm_spec().launch_info(target)
                env = {**info.constants, "m": m, "n": n, "k": k}
                args = [a, b, c] + [np.uint32(evaluate(info.source_of(x)[1], env)) for x in
                                    ("m", "n", "k", "tiles_m", "tiles_n", "k_tiles", "pad")]
                mod = dev.load_module(co)
                reps = mod.launch(name, grid=info.grid_for({"m": m, "n": n, "k": k}, "gemm"), block=info.block,
                                  args=args, on_error="collect")
        out[eng] = ([_report_key(r) for r in reps], dev.from_device(c, (m * n,), np.uint16),
                    mod.last_stats["global_bytes_read"], mod.last_stats["lds_bytes_written"])
    assert out["cpu"][0], "the short allocation must be reported"
    assert out["cpu"][0] == out["cuda"][0]
    assert np.array_equal(out["cpu"][1], out["cuda"][1])
    assert out["cpu"][2:] == out["cuda"][2:]



@needs_cuda
def test_perm_b32_kernel_same_bits_as_numpy():
    """The cuda engine's v_perm_b32 kernel (xp.perm_b32: one kernel whatever the selectors, so it can be
    graph-captured) against the numpy path, on random words with every selector byte value (per-lane
    selectors) and with one selector for all lanes (the numpy path's shift-and-mask branch)."""
    import cupy as cp  # type: ignore[import-not-found]

    from isagen.runtime.emu import ops_valu as V
    rng = np.random.default_rng(3)
    a, b = (rng.integers(0, 2 ** 32, (40, 64), dtype=np.uint32) for _ in range(2))
    every = np.arange(256, dtype=np.uint32)
    per_lane = (rng.permutation(np.tile(every, 10))[:2560].reshape(40, 64)
                | (rng.integers(0, 2 ** 24, (40, 64), dtype=np.uint32) << np.uint32(8)))
    sels = [per_lane] + [np.uint32(v) for v in (0x0C0D0E0F, 0x05040100, 0x07060302, 0x0C0C0C0C, 0x0F0E0D0C,
                                                   0x08090A0B, 0x03020100, 0x0D0C0102)]
    for sel in sels:
        want = V._perm(a, b, sel)
        with X.engine("cuda"):
            got = V._perm(cp.asarray(a), cp.asarray(b), cp.asarray(sel)).get()
        assert np.array_equal(np.broadcast_to(want, a.shape), got), hex(int(np.asarray(sel).flat[0]))


@needs_cuda
@pytest.mark.parametrize("name,fa,fb", [("v_mfma_scale_f32_16x16x128_f8f6f4", 0, 0),
                                        ("v_mfma_scale_f32_32x32x64_f8f6f4", 4, 4),
                                        ("v_mfma_scale_f32_16x16x128_f8f6f4", 2, 1),
                                        ("v_mfma_scale_f32_32x32x64_f8f6f4", 3, 0),
                                        ("v_mfma_f32_16x16x128_f8f6f4", 4, 2),
                                        ("v_mfma_f32_32x32x64_f8f6f4", 1, 3)])
def test_mx_mfma_random_bits_match_cpu(name, fa, fb):
    """gfx950's f8f6f4 MFMAs (block-scaled or not; every format for A and B: fp8, bf8, fp6, bf6, fp4) on
    random register bits and random E8M0 scales (a wide exponent range, so the sum's order shows; NaN
    scales too) give the CPU engine's bits through the cuda engine's kernel (cuda_kernels.mfma_mx)."""
    s = M.spec(name, "gfx950")
    na, nb = M.operand_regs(name, fa, fb)
    rng = np.random.default_rng(11 + fa + 5 * fb)
    W = 24
    a = rng.integers(0, 2**32, (na, W, 64), dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, (nb, W, 64), dtype=np.uint64).astype(np.uint32)
    c = (rng.standard_normal((s.c_regs, W, 64)) * 1e3).astype(np.float32).view(np.uint32)
    for x, f in ((a, fa), (b, fb)):
        if f <= 1:           # fp8 / bf8: their NaN and inf codes made finite (bit 6 cleared), or most sums are NaN
            table = M._decode_table(M.F8F6F4_FORMATS[f][0], "gfx950")
            by = x.view(np.uint8)
            by[~np.isfinite(table[by])] &= np.uint8(0xBF)
    kw = {}
    if s.scaled:
        def scale():          # bytes mostly 2^-20..2^20, some anywhere (255: NaN)
            e = rng.integers(107, 148, (W, 64, 4)).astype(np.uint8)
            wild = rng.random((W, 64, 4)) < 0.05
            e[wild] = rng.integers(0, 256, int(wild.sum()))
            return e.view(np.uint32).reshape(W, 64)
        kw = dict(scale_a=scale(), scale_b=scale(), opsel_a=int(rng.integers(4)), opsel_b=int(rng.integers(4)))
    with X.engine("cpu"):
        ref = M.mfma(name, "gfx950", a, b, c, cbsz=fa, blgp=fb, **kw)
    cp = X.cupy_module()
    dkw = {k: (cp.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
    with X.engine("cuda"):
        got = M.mfma(name, "gfx950", cp.asarray(a), cp.asarray(b), cp.asarray(c), cbsz=fa, blgp=fb, **dkw).get()
    nan = np.isnan(ref.view(np.float32))
    assert (nan == np.isnan(got.view(np.float32))).all()
    assert nan.mean() < 0.5, "too few finite results to compare"
    assert np.array_equal(ref[~nan], got[~nan])


@needs_cuda
def test_lds_sub_dword_reads_same_as_cpu(monkeypatch):
    """ds_read_u8/i8/u16/i16, their d16 and d16_hi forms and an unaligned ds_read_b32 at random per-lane
    addresses (some past the LDS allocation) under a random EXEC, 3 workgroups of 2 waves: the cuda
    engine's kernel (cuda_kernels.ds_read2, checked to be used for the byte/half reads) leaves the CPU
    engine's registers, reports and LDS statistics."""
    from isagen.runtime.emu import cuda_kernels as CK
    from tools import emu_cuda_fixtures as F
    co = _fixture(F.lds_sub_reads_co)
    n = F.LDS_SUB_ROWS
    rng = np.random.default_rng(5)
    inp = rng.integers(0, 2**32, (5, n), dtype=np.uint64).astype(np.uint32)
    inp[2] = rng.integers(0, 1008, n)
    far = rng.random(n) < 0.05
    inp[2, far] = rng.integers(1010, 1100, int(far.sum()))
    inp[3] = rng.random(n) < 0.7
    sizes = []
    real = CK.ds_read2

    def spy(st, ws, ai, di, o0, o1, size, *a, **kw):
        sizes.append(size)
        return real(st, ws, ai, di, o0, o1, size, *a, **kw)
    out = {}
    for eng in ("cpu", "cuda"):
        if eng == "cuda":
            monkeypatch.setattr(CK, "ds_read2", spy)
        dev = Device("gfx942", sanitize=False, array_module=eng)
        din = dev.to_device(inp)
        dout = dev.to_device(np.zeros((len(F.LDS_SUB_READS), n), np.uint32))
        mod = dev.load_module(co)
        reps = mod.launch("lds_sub_reads", grid=(3,), block=(128,), args=[din, dout], on_error="collect")
        out[eng] = ([_report_key(r) for r in reps], dev.from_device(dout, (len(F.LDS_SUB_READS), n), np.uint32),
                    mod.last_stats["lds_bytes_read"])
    assert out["cpu"][0], "the reads past the allocation must be reported"
    assert out["cpu"][0] == out["cuda"][0]
    assert np.array_equal(out["cpu"][1], out["cuda"][1])
    assert out["cpu"][2] == out["cuda"][2]
    assert {1, 2} <= set(sizes)


@needs_cuda
def test_lds_writes_same_as_cpu(monkeypatch):
    """LDS writes of every size (b8, b16 and their d16_hi forms, unaligned b32, b64, b96, b128, write2
    b32/b64) into per-lane slots (a random permutation, some past the allocation) under a random EXEC,
    3 workgroups of 2 waves: the cuda engine's kernel (cuda_kernels.ds_write, checked to be used for
    every size) leaves the CPU engine's LDS, reports and statistics."""
    from isagen.runtime.emu import cuda_kernels as CK
    from tools import emu_cuda_fixtures as F
    co = _fixture(F.lds_writes_co)
    n = F.LDS_WRITE_ROWS
    rng = np.random.default_rng(2)
    inp = rng.integers(0, 2**32, (6, n), dtype=np.uint64).astype(np.uint32)
    for g in range(3):
        inp[0, g * 128:(g + 1) * 128] = rng.permutation(128) * 96
    far = rng.random(n) < 0.05
    inp[0, far] += F.LDS_WRITE_BYTES
    inp[1] = rng.random(n) < 0.7
    sizes = []
    real = CK.ds_write

    def spy(st, ws, ai, d0, d1, o0, o1, size, *a, **kw):
        sizes.append(size)
        return real(st, ws, ai, d0, d1, o0, o1, size, *a, **kw)
    out = {}
    for eng in ("cpu", "cuda"):
        if eng == "cuda":
            monkeypatch.setattr(CK, "ds_write", spy)
        dev = Device("gfx942", sanitize=False, array_module=eng)
        din = dev.to_device(inp)
        dout = dev.to_device(np.zeros((F.LDS_WRITE_DUMP, n), np.uint32))
        mod = dev.load_module(co)
        reps = mod.launch("lds_writes", grid=(3,), block=(128,), args=[din, dout], on_error="collect")
        out[eng] = ([_report_key(r) for r in reps], dev.from_device(dout, (F.LDS_WRITE_DUMP, n), np.uint32),
                    mod.last_stats["lds_bytes_written"])
    assert out["cpu"][0], "the writes past the allocation must be reported"
    assert out["cpu"][0] == out["cuda"][0]
    assert np.array_equal(out["cpu"][1], out["cuda"][1])
    assert out["cpu"][2] == out["cuda"][2]
    assert {1, 2, 4, 8, 12, 16} <= set(sizes)


def _stats(st):
    return {k: v for k, v in st.items() if k not in ("seconds", "wall_seconds")}


@needs_cuda
@pytest.mark.parametrize("kernel", ["triton", "gemm_bf16_gfx942", "gemm_bf16_gfx950"])
def test_cuda_graphs_same_bits_and_stats(kernel, monkeypatch):
    """Blocks replayed as CUDA graphs (cuda_graph.py; the default) leave the same C, launch statistics and
    instruction counts as the same launch with every handler run plainly, and as the CPU engine.  The
    Triton GEMM's loop blocks really go through graphs (captured once, launched again); gemm_bf16's waves
    run as groups that branched apart (producer and consumer roles), which graphs do not take: its
    launches must simply be unchanged."""
    from isagen.runtime.emu import cuda_graph as G
    from tools import emu_cuda_fixtures as F
    bt = kernel != "triton"
    m, n, k = (512, 512, 512) if not bt else (512, 256, 640)
    A, B = _bf16_pair(m, n, k, 11, bt=bt)
    a16, b16 = A.view(torch.int16).numpy(), B.view(torch.int16).numpy()
    out = {}
    for label, eng, graphs in (("cpu", "cpu", "1"), ("plain", "cuda", "0"), ("graphs", "cuda", "1")):
        monkeypatch.setenv(G.ENV, graphs)
        before = dict(G.STATS)
        dev = Device("gfx942" if not bt else kernel.rsplit("_", 1)[1], sanitize=False, array_module=eng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", X.FtzWarning)
            if kernel == "triton":
                mod, c, kw = F.run_triton(dev, _fixture(F.triton_matmul), a16, b16, m, n, k)
            else:
                t = kernel.rsplit("_", 1)[1]
                mod, c, kw = F.run_gemm(dev, t, _fixture(F.gemm_co, t), a16, b16, m, n, k)
        out[label] = (dev.from_device(c, (m * n,), np.uint16), _stats(mod.last_stats))
        used = {x: G.STATS[x] - before[x] for x in G.STATS}
        if label == "graphs" and kernel == "triton":
            assert used["captured"] > 0 and used["launched"] > used["captured"], used
        elif label != "graphs":
            assert used["launched"] == 0, used
    assert np.array_equal(out["cpu"][0], out["graphs"][0])
    assert np.array_equal(out["plain"][0], out["graphs"][0])
    assert out["plain"][1] == out["graphs"][1]
    assert out["cpu"][1]["wave_instructions"] == out["graphs"][1]["wave_instructions"]


@needs_cuda
def test_torch_cuda_tensors_in_and_out_through_dlpack():
    from tools import emu_cuda_fixtures as F
    co = _fixture(F.gemm_co, "gfx942")
    m = n = k = 256
    A, B = _bf16_pair(m, n, k, 5, bt=True)
    dev = Device("gfx942", sanitize=False, array_module="cuda")
    _, c, _ = F.run_gemm(dev, "gfx942", co, A.cuda(), B.cuda(), m, n, k)     # CUDA tensors: no host copy
    out = torch.from_dlpack(dev.to_array(c, (m, n), np.int16)).view(torch.bfloat16)
    assert out.is_cuda
    host = Device("gfx942", sanitize=False)
    _, hc, _ = F.run_gemm(host, "gfx942", co, A.view(torch.int16).numpy(), B.view(torch.int16).numpy(), m, n, k)
    assert np.array_equal(out.view(torch.int16).cpu().numpy().ravel(), host.from_device(hc, (m * n,), np.int16))


def _sanitized_runs(co, name, n_out, block, args_in=()):
    """(reports, output words) of one collect-mode sanitized launch of ``co`` on each engine."""
    got = {}
    for eng in ("cpu", "cuda"):
        dev = Device("gfx942", array_module=eng)            # sanitize=True by default
        ins = [dev.to_device(a, f"in{i}") for i, a in enumerate(args_in)]
        out = dev.to_device(np.zeros(n_out, np.uint32), "out")
        reports = dev.load_module(co).launch(name, grid=(1,), block=(block,), args=[*ins, out], on_error="collect")
        got[eng] = ([_report_key(r) for r in reports], dev.from_device(out, n_out, np.uint32))
    return got


# the sanitizer's planted bugs (test_emu_sanitizer.py): LDS exchange between two waves without its waits or
# barrier, out of range, uninitialised; one LDS word stored by two waves (same value or not: the data of a
# write is looked at); lanes written under a partial EXEC; MFMA hazards
_PLANTED = [("exchange", {}), ("exchange", {"wait_load": ""}), ("exchange", {"barrier": ""}),
            ("exchange", {"wait_lds": ""}), ("exchange", {"store_off": " offset:256"}),
            ("exchange", {"read_off": " offset:512"}), ("exchange", {"addend": "v9"}),
            ("shared", ("ds_write_b32", 0, 7, 0, 7, None)), ("shared", ("ds_write_b32", 0, 7, 0, 8, {7, 8})),
            ("shared", ("ds_write_b16", 0, 7, 1, 8, {0x807, 7})), ("partial", None), ("mfma", 6), ("mfma", 2)]


@needs_cuda
@pytest.mark.parametrize("kind, planted", _PLANTED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(_PLANTED)])
def test_sanitizer_reports_as_on_cpu(kind, planted):
    """The sanitizer on the cuda engine (its bookkeeping host-side, fed from the device): the same reports
    (category, pc, message, workgroup, wave, lanes, address, count) and the same output as the CPU engine on
    the planted bugs of test_emu_sanitizer.py, and at least one report where a bug is planted.  Where two
    waves store different values to one LDS word in one instruction (an LDS race), which store lands last is
    the engine's: the CPU engine keeps the last wave's, CuPy's scatter an unspecified one, so the word read
    back is either order's (``racing``)."""
    from emu_support import build
    from test_emu_sanitizer import CLEAN, EXCHANGE, MFMA, SHARED_WORD
    if kind == "exchange":
        co = _fixture(lambda: build("exchange", EXCHANGE.format(**{**CLEAN, **planted}),
                                    args=(("ptr", "inp"), ("ptr", "out")), lds=512, vgprs=16))
        got = _sanitized_runs(co, "exchange", 128, 128, [np.arange(128, dtype=np.float32) * 0.5])
    elif kind == "shared":
        store, a0, a1, b0, b1, racing = planted
        co = _fixture(lambda: build("shared", SHARED_WORD.format(store=store, a0=a0, a1=a1, b0=b0, b1=b1), lds=64))
        got = _sanitized_runs(co, "shared", 128, 128)
    elif kind == "partial":
        body = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_mov_b64 exec, 0xffffffff
  v_mov_b32 v5, 1.0
  s_mov_b64 exec, -1
  v_lshlrev_b32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v5, s[4:5]
"""
        co = _fixture(build, "partial", body)
        got = _sanitized_runs(co, "partial", 64, 64)
    else:
        co = _fixture(lambda: build("mfma", MFMA.format(nops=planted), vgprs=8, agprs=4))
        got = _sanitized_runs(co, "mfma", 64, 64)
    assert got["cuda"][0] == got["cpu"][0]
    if kind == "shared" and planted[-1] is not None:
        assert set(got["cpu"][1].tolist()) <= planted[-1] and set(got["cuda"][1].tolist()) <= planted[-1]
    else:
        assert np.array_equal(got["cuda"][1], got["cpu"][1])
    clean = (kind == "exchange" and not planted) or planted == ("ds_write_b32", 0, 7, 0, 7, None) or planted == 6
    assert (got["cpu"][0] == []) == clean


@needs_cuda
def test_sanitized_triton_matmul_as_on_cpu():
    """A whole Triton GEMM sanitized on both engines: no report (a report raises) and the same C bits."""
    from tools import emu_cuda_fixtures as F
    k = _fixture(F.triton_matmul)
    n = 256
    A, B = _bf16_pair(n, n, n, 11)
    a16, b16 = A.view(torch.int16).numpy(), B.view(torch.int16).numpy()
    outs = {}
    for eng in ("cpu", "cuda"):
        dev = Device("gfx942", sanitize=True, array_module=eng)
        _, c, _ = F.run_triton(dev, k, a16, b16, n, n, n)
        outs[eng] = dev.from_device(c, (n * n,), np.uint16)
    assert np.array_equal(outs["cuda"], outs["cpu"])


@needs_cuda
def test_env_selects_cuda(monkeypatch):
    monkeypatch.setenv(X.ENV, "cuda")
    assert Device("gfx942").engine == "cuda"


# ---------------------------------------------------------------------------------- everywhere

def test_engine_selection_errors(monkeypatch):
    monkeypatch.setenv(X.ENV, "tpu")
    with pytest.raises(X.EngineError, match="ISAGEN_EMU_DEVICE='tpu'"):
        Device("gfx942")
    monkeypatch.delenv(X.ENV)
    assert Device("gfx942").engine == "cpu"
    assert Device("gfx942", array_module=np).engine == "cpu"
    with pytest.raises(X.EngineError, match="array_module="):
        Device("gfx942", array_module="jax")


@pytest.mark.skipif(REASON is None, reason="CUDA and CuPy are present here")
def test_cuda_engine_refused_with_one_line_without_cupy():
    with pytest.raises(X.EngineError) as e:
        Device("gfx942", array_module="cuda")
    assert "\n" not in str(e.value) and "cuda emulator engine" in str(e.value)


@needs_cuda
@pytest.mark.parametrize("spec", ["gemm_fp8_blockscale", "gemm_mxfp4", "gemm_mxfp8", "attention_bf16"])
def test_reference_on_the_gpu_matches_the_cpu(spec):
    """``isagen run``'s reference evaluated by torch on the GPU (what it does on the cuda engine,
    run.reference_device) agrees with the same expression on the CPU to float64 rounding (the sums' order
    may differ), on the spec's emulator shapes."""
    from isagen.runtime.run import plan_run, random_inputs, random_scalars, reference, resolve_spec
    plan = plan_run(resolve_spec(spec), backend="emu")
    inputs = random_inputs(plan.kernel, plan.sizes)
    values = random_scalars(plan.kernel, {})
    cpu = reference(plan.kernel, inputs, values, plan.sizes)
    gpu = reference(plan.kernel, {n: t.cuda() for n, t in inputs.items()}, values, plan.sizes)
    for name, want in cpu.items():
        got = gpu[name]
        assert got.is_cuda
        assert torch.allclose(got.cpu(), want, rtol=1e-12, atol=1e-12 * float(want.abs().max())), name


def _lds_model_inputs(F, rng):
    n = F.LDS_WRITE_ROWS
    inp = rng.integers(0, 2**32, (6, n), dtype=np.uint64).astype(np.uint32)
    for g in range(3):
        inp[0, g * 128:(g + 1) * 128] = rng.permutation(128) * 96
    far = rng.random(n) < 0.05
    inp[0, far] += F.LDS_WRITE_BYTES
    inp[1] = rng.random(n) < 0.7
    return inp


def test_lds_fixture_kernels_against_a_numpy_model():
    """The two LDS fixture kernels the cuda tests compare engines on, run on the CPU engine (everywhere the
    fixtures can be built), against a numpy model of what they compute: each read's bytes, sign extension
    and d16 half; each write's bytes in its lane's slot, over the fill pattern."""
    from tools import emu_cuda_fixtures as F
    rng = np.random.default_rng(9)
    # reads
    co = _fixture(F.lds_sub_reads_co)
    n = F.LDS_SUB_ROWS
    inp = rng.integers(0, 2**32, (5, n), dtype=np.uint64).astype(np.uint32)
    inp[2] = rng.integers(0, 1100, n)
    inp[3] = rng.random(n) < 0.7
    dev = Device("gfx942", sanitize=False)
    din, dout = dev.to_device(inp), dev.to_device(np.zeros((len(F.LDS_SUB_READS), n), np.uint32))
    dev.load_module(co).launch("lds_sub_reads", grid=(3,), block=(128,), args=[din, dout], on_error="collect")
    got = dev.from_device(dout, (len(F.LDS_SUB_READS), n), np.uint32)
    # (offset, bytes, signed, d16) of each read, from its text
    forms = []
    for r in F.LDS_SUB_READS:
        name, *_ = r.split()
        off = int(r.split("offset:")[1]) if "offset:" in r else 0
        ty = name.split("_")[2]
        forms.append((off, {"u8": 1, "i8": 1, "u16": 2, "i16": 2, "b32": 4}[ty], ty[0] == "i",
                      "hi" if name.endswith("hi") else ("lo" if "d16" in name else None)))
    for t in range(n):
        g, a = t // 128, int(inp[2, t])
        lds = np.concatenate([inp[0, g * 128:(g + 1) * 128], inp[1, g * 128:(g + 1) * 128]]).view(np.uint8)
        prev = int(inp[4, t])
        for j, (off, size, sgn, d16) in enumerate(forms):
            if not inp[3, t]:
                want = prev
            else:
                ok = a + off + size <= 1024
                v = int.from_bytes(lds[a + off:a + off + size].tobytes(), "little") if ok else 0
                if sgn and v >> (8 * size - 1):
                    v -= 1 << (8 * size)
                v &= 0xFFFFFFFF
                want = {None: v, "lo": (prev & 0xFFFF0000) | (v & 0xFFFF),
                        "hi": (prev & 0xFFFF) | ((v & 0xFFFF) << 16)}[d16]
            assert int(got[j, t]) == want, (F.LDS_SUB_READS[j], t)
    # writes
    co = _fixture(F.lds_writes_co)
    n = F.LDS_WRITE_ROWS
    inp = _lds_model_inputs(F, rng)
    dev = Device("gfx942", sanitize=False)
    din, dout = dev.to_device(inp), dev.to_device(np.zeros((F.LDS_WRITE_DUMP, n), np.uint32))
    dev.load_module(co).launch("lds_writes", grid=(3,), block=(128,), args=[din, dout], on_error="collect")
    got = dev.from_device(dout, (F.LDS_WRITE_DUMP, n), np.uint32)
    for g in range(3):
        t = np.arange(128, dtype=np.uint64)
        fill = (((t * 0x9E3779B1) & 0xFFFFFFFF).astype(np.uint32) ^ np.uint32(g))
        lds = np.concatenate([fill ^ np.uint32(0x1000193 * (r + 1) & 0x7FFFFFFF) for r in range(F.LDS_WRITE_DUMP)])
        b = lds.view(np.uint8)
        for lane in range(128):
            i = g * 128 + lane
            a = int(inp[0, i])
            if not inp[1, i] or a + 80 > F.LDS_WRITE_BYTES:
                continue
            d0, d1, d2, d3 = (int(inp[k, i]) for k in (2, 3, 4, 5))
            for off, val, nb in ((0, d0, 1), (2, d1, 2), (4, d2 >> 16, 1), (6, d3 >> 16, 2), (9, d1, 4),
                                 (13, d0 | d1 << 32, 8), (24, d2, 4), (28, d3, 4), (32, d0 | d1 << 32 | d2 << 64, 12),
                                 (48, d0 | d1 << 32, 8), (56, d2 | d3 << 32, 8),
                                 (64, d0 | d1 << 32 | d2 << 64 | d3 << 96, 16)):
                b[a + off:a + off + nb] = np.frombuffer((val & ((1 << (8 * nb)) - 1)).to_bytes(nb, "little"), np.uint8)
        assert np.array_equal(got[:, g * 128:(g + 1) * 128].reshape(-1), lds), g
