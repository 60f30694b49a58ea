"""The emulator's fast paths against the per-instruction semantics they replace, bit for bit, on
random inputs: the native MFMA kernel (native.py) against the numpy MFMA path (mfma._run), the
uniform-selector v_perm_b32 against a per-lane byte selection, and the whole-access (8/16-byte)
gathers and scatters of global memory and LDS against byte-by-byte references."""

from __future__ import annotations

import numpy as np
import pytest

from isagen.runtime.emu import mfma as M
from isagen.runtime.emu import native, wide
from isagen.runtime.emu.ops_valu import _perm

NATIVE = [n for n, s in sorted(M.SPECS.items()) if M._native_ok(s, s.a_type, s.b_type)]

needs_native = pytest.mark.skipif(not native.available(), reason=f"native MFMA kernel unavailable: {native.why_not()}")


def _numpy_mfma(monkeypatch, *args, **kw):
    with monkeypatch.context() as m, np.errstate(all="ignore"):   # NaN inputs: results, not warnings
        m.setattr(M, "_native_ok", lambda *a: False)
        return M.mfma(*args, **kw)


def _finite_codes(x: np.ndarray, kind: str, target: str) -> np.ndarray:
    """Replace the NaN/inf codes of the packed elements of ``x`` by 0 (in place)."""
    lut = M._lut32(kind, target)
    v = x.view(np.uint16 if M._NATIVE_KINDS[kind] == 2 else np.uint8)
    v[~np.isfinite(lut[v])] = 0
    return x


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bits, except that two NaNs are equal whatever their payloads."""
    fa, fb = a.view(np.float32), b.view(np.float32)
    return bool(((a == b) | (np.isnan(fa) & np.isnan(fb))).all())


def _words(rng, shape) -> np.ndarray:
    return rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)


def test_native_covers_the_float_mfmas():
    # the families the native kernel takes: 16-bit and 8-bit float inputs, f32 results, gfx9 layout
    assert {"v_mfma_f32_32x32x8_bf16", "v_mfma_f32_16x16x16_f16", "v_mfma_f32_32x32x16_fp8_fp8",
            "v_mfma_f32_4x4x4_16b_f16", "v_mfma_f32_32x32x16_bf16"} <= set(NATIVE)
    for n in ("v_mfma_f32_32x32x2_f32", "v_mfma_i32_32x32x16_i8", "v_mfma_f64_16x16x4_f64"):
        s = M.SPECS[n]
        assert not M._native_ok(s, s.a_type, s.b_type)


@needs_native
@pytest.mark.parametrize("name", NATIVE)
def test_native_mfma_matches_numpy_path(name, monkeypatch):
    s = M.SPECS[name]
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    for target in sorted(s.archs):
        W = 5
        # every finite code (products spanning the whole exponent range: the k-order of the sum shows)
        a = _finite_codes(_words(rng, (s.a_regs, W, 64)), s.a_type, target)
        b = _finite_codes(_words(rng, (s.b_regs, W, 64)), s.b_type, target)
        c = rng.standard_normal((s.c_regs, W, 64)).astype(np.float32).view(np.uint32)
        want = _numpy_mfma(monkeypatch, name, target, a, b, c)
        got = M.mfma(name, target, a, b, c)
        assert np.array_equal(got, want), name
        # any bits (NaN, inf, subnormals): equal but for NaN payloads
        a2, b2, c2 = _words(rng, a.shape), _words(rng, b.shape), _words(rng, c.shape)
        assert _same(M.mfma(name, target, a2, b2, c2), _numpy_mfma(monkeypatch, name, target, a2, b2, c2))
        # an inline-constant C (broadcast), and accumulation in place into a register file slice
        k = np.full((s.c_regs, 1, 1), np.float32(0.5).view(np.uint32), np.uint32)
        assert np.array_equal(M.mfma(name, target, a, b, k), _numpy_mfma(monkeypatch, name, target, a, b, k))
        V = np.zeros((s.a_regs + s.b_regs + s.c_regs + 3, 2 * W, 64), np.uint32)
        V[:s.a_regs, ::2], V[s.a_regs:s.a_regs + s.b_regs, ::2] = a, b
        d0 = s.a_regs + s.b_regs + 3
        V[d0:, ::2] = c
        V2 = V.copy()
        M.mfma(name, target, V[:s.a_regs], V[s.a_regs:s.a_regs + s.b_regs], V[d0:], out=V[d0:])
        ref = _numpy_mfma(monkeypatch, name, target, V2[:s.a_regs], V2[s.a_regs:s.a_regs + s.b_regs], V2[d0:])
        assert np.array_equal(V[d0:], ref)


@needs_native
def test_native_mfma_with_c_overlapping_d(monkeypatch):
    # D = C shifted by one register: C must be read before D is written (as numpy does)
    name = "v_mfma_f32_16x16x16_bf16"
    s = M.SPECS[name]
    rng = np.random.default_rng(7)
    V = rng.standard_normal((s.a_regs + s.b_regs + s.c_regs + 1, 3, 64)).astype(np.float32).view(np.uint32)
    c0 = s.a_regs + s.b_regs
    ref = _numpy_mfma(monkeypatch, name, "gfx942", V[:2], V[2:4], V[c0:c0 + s.c_regs].copy())
    M.mfma(name, "gfx942", V[:2], V[2:4], V[c0:c0 + s.c_regs], out=V[c0 + 1:c0 + 1 + s.c_regs])
    assert np.array_equal(V[c0 + 1:c0 + 1 + s.c_regs], ref)


MULTI_BLOCK = [n for n in NATIVE if M.SPECS[n].blocks > 1]


@needs_native
@pytest.mark.parametrize("name", MULTI_BLOCK)
def test_native_mfma_modifiers_match_numpy_path(name, monkeypatch):
    # A-block broadcast (cbsz/abid) and B lane patterns (blgp): rows of lanes that wrap or repeat, read
    # element by element (and 4x4 blocks, narrower than the 8-wide rows): the same bits as numpy
    s = M.SPECS[name]
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    W = 3
    max_cbsz = min(4, s.blocks.bit_length() - 1)
    settings = [(cbsz, abid, blgp) for cbsz in range(max_cbsz + 1) for abid in {0, (1 << cbsz) - 1}
                for blgp in range(8)]
    for cbsz, abid, blgp in settings[::3] + [settings[-1]]:
        a = _finite_codes(_words(rng, (s.a_regs, W, 64)), s.a_type, "gfx942")
        b = _finite_codes(_words(rng, (s.b_regs, W, 64)), s.b_type, "gfx942")
        c = rng.standard_normal((s.c_regs, W, 64)).astype(np.float32).view(np.uint32)
        kw = dict(cbsz=cbsz, abid=abid, blgp=blgp)
        want = _numpy_mfma(monkeypatch, name, "gfx942", a, b, c, **kw)
        assert np.array_equal(M.mfma(name, "gfx942", a, b, c, **kw), want), (name, kw)


def _run_reference(monkeypatch, V, name, ops):
    for a, b, c, d in ops:
        V[d] = _numpy_mfma(monkeypatch, name, "gfx942", V[a], V[b], V[c])


@needs_native
@pytest.mark.parametrize("name", ["v_mfma_f32_32x32x8_bf16", "v_mfma_f32_16x16x32_fp8_fp8", "v_mfma_f32_4x4x4_16b_f16"])
def test_native_run_threads_and_chunks(name, monkeypatch):
    """A run of MFMAs (two chained on one accumulator, one into another tile) over a ragged number of
    waves: the same bits for every thread count and chunk size, ranges and chunks not dividing W."""
    s = M.SPECS[name]
    W = 37
    rng = np.random.default_rng(3)
    na, nb, nc = s.a_regs, s.b_regs, s.c_regs
    V = rng.standard_normal((2 * na + nb + 2 * nc, W, 64)).astype(np.float32).view(np.uint32)
    V[:2 * na + nb] = _finite_codes(_words(rng, (2 * na + nb, W, 64)), s.a_type, "gfx942")
    a0, a1, b0 = slice(0, na), slice(na, 2 * na), slice(2 * na, 2 * na + nb)
    d0, d1 = slice(2 * na + nb, 2 * na + nb + nc), slice(2 * na + nb + nc, 2 * na + nb + 2 * nc)
    ops = [(a0, b0, d0, d0), (a1, b0, d0, d0), (a1, b0, d1, d1)]
    ref = V.copy()
    _run_reference(monkeypatch, ref, name, ops)
    for threads, chunk in ((1, 1), (2, 5), (3, 64), (8, 4), (40, 1)):
        X = V.copy()
        calls = [M.native_call(name, "gfx942", X[a], X[b], X[c], X[d]) for a, b, c, d in ops]
        used = native.run(M.run_plan(calls), W, chunk, threads, min_waves=1)
        assert used == min(threads, W)
        assert np.array_equal(X, ref), (threads, chunk)
    # a thread only for enough work: 37 waves of 3 MFMAs at 20 waves a thread at least -> 1 thread
    X = V.copy()
    calls = [M.native_call(name, "gfx942", X[a], X[b], X[c], X[d]) for a, b, c, d in ops]
    assert native.run(M.run_plan(calls), W, 8, 4, min_waves=20) == 1
    assert np.array_equal(X, ref)


def test_native_threads_setting(monkeypatch):
    from isagen.errors import IsagenError
    monkeypatch.setenv("ISAGEN_EMU_THREADS", "3")
    assert native.threads() == 3
    monkeypatch.setenv("ISAGEN_EMU_THREADS", "many")
    with pytest.raises(IsagenError, match="ISAGEN_EMU_THREADS"):
        native.threads()
    monkeypatch.delenv("ISAGEN_EMU_THREADS")
    assert native.threads() >= 1


def _perm_ref(a: int, b: int, sel: int) -> int:
    """v_perm_b32 for one lane, from the ISA's byte-select table."""
    data = (a << 32) | b
    out = 0
    for i in range(4):
        s = (sel >> (8 * i)) & 0xFF
        if s < 8:
            byte = (data >> (8 * s)) & 0xFF
        elif s < 12:
            byte = 0xFF if (data >> (8 * (2 * (s - 8) + 1) + 7)) & 1 else 0
        elif s == 12:
            byte = 0
        else:
            byte = 0xFF
        out |= byte << (8 * i)
    return out


def test_perm_uniform_selector_matches_per_lane_semantics():
    rng = np.random.default_rng(3)
    for _ in range(300):
        a, b = _words(rng, (3, 64)), _words(rng, (3, 64))
        codes = rng.integers(0, 8, 4) if rng.random() < 0.8 else rng.integers(0, 16, 4)
        sel = int(sum(int(c) << (8 * i) for i, c in enumerate(codes)))
        sels = np.full((3, 1), sel, np.uint32)                      # an SGPR: one selector per wave
        if rng.random() < 0.3:                                      # a VGPR with per-lane selectors
            sels = np.where(rng.random((3, 64)) < 0.5, np.uint32(sel), _words(rng, (3, 64)) & np.uint32(0x0F0F0F0F))
        got = _perm(a, b, sels)
        full = np.broadcast_to(sels, (3, 64))
        want = np.array([[_perm_ref(int(a[w, L]), int(b[w, L]), int(full[w, L])) for L in range(64)]
                         for w in range(3)], np.uint32)
        assert np.array_equal(got, want), hex(sel)


@pytest.mark.parametrize("nbytes", [4, 8, 16])
def test_wide_gather_scatter_match_bytes(nbytes):
    rng = np.random.default_rng(nbytes)
    buf = rng.integers(0, 256, 4096 + 5, dtype=np.uint8)     # a tail that is not a whole item
    off = rng.integers(0, 4096 // nbytes, (4, 64)).astype(np.int64) * nbytes
    got = wide.gather(buf, off, nbytes)
    want = np.stack([buf[o:o + nbytes] for o in off.ravel()]).view(np.uint32).reshape(4, 64, nbytes // 4)
    assert np.array_equal(got, want)
    # stores: repeated offsets keep the last lane's value, as sequential stores would
    off = rng.integers(0, 64, 200).astype(np.int64) * nbytes
    vals = _words(rng, (200, nbytes // 4))
    ref = buf.copy()
    for o, v in zip(off, vals):
        ref[o:o + nbytes] = v.view(np.uint8)
    wide.scatter(buf, off, vals, nbytes)
    assert np.array_equal(buf, ref)


@pytest.mark.parametrize("nbytes", [1, 2, 4, 8, 12, 16])
def test_global_read_write_match_bytes(nbytes):
    from isagen.runtime.emu import xp as X
    from isagen.runtime.emu.device import Device
    rng = np.random.default_rng(100 + nbytes)
    dev = Device("gfx942")                          # either engine ($ISAGEN_EMU_DEVICE)
    xp = X.module(dev.engine)
    data = rng.integers(0, 256, 8192, dtype=np.uint8)
    buf = dev.to_device(data)
    mem = dev.memory
    for align in (nbytes, 4, 1):
        if align < 4 and nbytes >= 4 and align != 1:
            continue
        off = rng.integers(0, (8192 - 16) // align, (3, 64)).astype(np.uint64) * np.uint64(align)
        addr = off + np.uint64(int(buf))
        ok = rng.random((3, 64)) < 0.9
        with X.engine(dev.engine):
            got = X.to_host(mem.read(xp.asarray(addr), nbytes, xp.asarray(ok)))
        raw = np.stack([data[int(o):int(o) + nbytes] if k else np.zeros(nbytes, np.uint8)
                        for o, k in zip(off.ravel(), ok.ravel())])
        if nbytes >= 4:
            want = raw.view(np.uint32).reshape(3, 64, nbytes // 4)
        else:
            want = (raw.astype(np.uint32) << (8 * np.arange(nbytes, dtype=np.uint32))).sum(-1).reshape(3, 64)
        assert np.array_equal(got, want), (nbytes, align)


@needs_native
def test_native_runs_match_mfma(monkeypatch):
    # the fused-run entry points (native_call, run_plan, call_run over chunks of waves) against the numpy path
    name = "v_mfma_f32_32x32x8_bf16"
    rng = np.random.default_rng(11)
    V = rng.standard_normal((40, 70, 64)).astype(np.float32).view(np.uint32)
    V[:4] = _finite_codes(_words(rng, (4, 70, 64)), "bf16", "gfx942")
    ref = V.copy()
    ref[20:36] = _numpy_mfma(monkeypatch, name, "gfx942", ref[0:2], ref[2:4], ref[20:36])
    call = M.native_call(name, "gfx942", V[0:2], V[2:4], V[20:36], V[20:36])
    assert call is not None
    M.call_run(M.run_plan([call]), 70, 32)         # chunks of 32, 32 and 6 waves
    assert np.array_equal(V, ref)
    # a run of two MFMAs chained on one accumulator (the second reads the first's D), chunk by chunk
    ref[20:36] = _numpy_mfma(monkeypatch, name, "gfx942", ref[2:4], ref[0:2], ref[20:36])
    ref[20:36] = _numpy_mfma(monkeypatch, name, "gfx942", ref[0:2], ref[2:4], ref[20:36])
    calls = [M.native_call(name, "gfx942", V[2:4], V[0:2], V[20:36], V[20:36]),
             M.native_call(name, "gfx942", V[0:2], V[2:4], V[20:36], V[20:36])]
    M.call_run(M.run_plan(calls), 70, 16)
    assert np.array_equal(V, ref)
    # D overlapping C by a shift, or A: no native call (the general path copies first)
    assert M.native_call(name, "gfx942", V[0:2], V[2:4], V[20:36], V[21:37]) is None


@pytest.mark.parametrize("target,mfma_size", [("gfx942", 32), ("gfx942", 16), ("gfx950", 32)])
def test_triton_matmul_same_bits_on_every_engine_path(target, mfma_size, monkeypatch):
    """A Triton bf16 matmul big enough for fused MFMA runs (64 waves) gives the same C bits with the
    native kernel and fused runs as with the numpy MFMA path MFMA by MFMA, and matches torch."""
    import torch

    from isagen.runtime.emu import executor
    from isagen.runtime.emu.device import Device
    from tools.triton_kernels import compile_matmul

    kernel = compile_matmul(target, block_m=128, block_n=128, block_k=64, num_warps=4, dtype="bf16",
                            aligned=True, mfma_size=mfma_size)
    M_, N_, K_ = 512, 512, 128
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(M_, K_, generator=g).bfloat16(), torch.randn(K_, N_, generator=g).bfloat16()

    def run():
        dev = Device(target, sanitize=False)
        mod = dev.load_module(kernel.hsaco)
        A, B = dev.to_device(a.view(torch.int16)), dev.to_device(b.view(torch.int16))
        C = dev.alloc(M_ * N_ * 2, "C")
        mod.launch(kernel.name, grid=kernel.grid(M_, N_), block=kernel.block, args=kernel.args(A, B, C, M_, N_, K_),
                   shared_bytes=kernel.shared)
        assert mod.last_stats["waves"] > executor.MFMA_RUN_CHUNK
        return dev.from_device(C, (M_, N_), np.uint16)

    fast = run()
    with monkeypatch.context() as m:
        m.setattr(M, "_native_ok", lambda *x: False)
        m.setattr(executor, "_fuse_mfma_runs", lambda steps: [s.fn for s in steps])
        slow = run()
    assert np.array_equal(fast, slow)
    c = torch.from_numpy(fast.view(np.int16)).view(torch.bfloat16).double()
    ref = a.double() @ b.double()
    assert ((c - ref).abs() <= 2.0 ** -7 * ref.abs() + 1e-3 * (a.double().abs() @ b.double().abs())).all()
