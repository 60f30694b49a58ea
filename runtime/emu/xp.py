"""The array namespace the emulator's per-wave array code runs on: numpy (the CPU engine) or CuPy (the
CUDA engine, on an NVIDIA GPU).

The instruction handlers (ops_*.py, access.py, numerics.py, mfma.py, wide.py, wave.py) are written
against numpy's interface and name it ``np``; at run time that name is :data:`np` here, a module
object whose attributes are numpy's, or CuPy's (numpy's where CuPy has no such attribute: dtypes,
``errstate``, ``iinfo`` ...) while a launch of a CUDA device runs (:func:`engine`).  Attribute
lookups cost what they cost on the numpy module itself, so the CPU engine runs exactly as before.
The host-side scheduling (PCs, status, instruction counts, workgroup ids) stays numpy on both
engines; the register files, LDS, scratch and global memory live on the engine's device.

The switch is process-wide while a launch runs: launches of CPU and CUDA devices may alternate in one
process but must not run concurrently in threads.
"""

from __future__ import annotations

import contextlib
import os
import types

import numpy

from isagen.errors import IsagenError

ENGINES = ("cpu", "cuda")
ENV = "ISAGEN_EMU_DEVICE"


class EngineError(IsagenError):
    """The requested emulator engine is not available or cannot run this work."""


class FtzWarning(UserWarning):
    """The cuda engine runs float VALU arithmetic of a kernel that keeps float32 subnormals (see
    _CONV_SRC below: CuPy flushes them)."""


np = types.ModuleType("isagen_emu_array_namespace", "numpy, or CuPy while a CUDA launch runs")
np.__dict__.update(numpy.__dict__)
_numpy_dict = dict(np.__dict__)
_active = "cpu"
_cache_clearers: list = []      # functions that drop array caches built under the other engine


def cupy_module():
    """The cupy module, or an EngineError saying why the CUDA engine cannot run."""
    try:
        import cupy  # type: ignore[import-not-found]
    except Exception as e:      # ImportError, or a CUDA library that does not load
        raise EngineError(f"the cuda emulator engine needs CuPy: import cupy failed ({e}); "
                          f"use {ENV}=cpu") from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        raise EngineError(f"the cuda emulator engine found no CUDA device ({e}); use {ENV}=cpu") from None
    if n < 1:
        raise EngineError(f"the cuda emulator engine found no CUDA device; use {ENV}=cpu")
    return cupy


def resolve(array_module=None) -> str:
    """The engine name ("cpu" or "cuda") for ``Device(array_module=...)``: a module (numpy or cupy), a
    name, or None for ``$ISAGEN_EMU_DEVICE`` (default cpu)."""
    if array_module is None:
        name = os.environ.get(ENV, "cpu").strip().lower() or "cpu"
        if name not in ENGINES:
            raise EngineError(f"{ENV}={name!r}: expected one of {', '.join(ENGINES)}")
    elif isinstance(array_module, str):
        name = {"numpy": "cpu", "cupy": "cuda"}.get(array_module.lower(), array_module.lower())
        if name not in ENGINES:
            raise EngineError(f"array_module={array_module!r}: expected numpy, cupy, 'cpu' or 'cuda'")
    elif array_module is numpy:
        name = "cpu"
    elif getattr(array_module, "__name__", "") == "cupy":
        name = "cuda"
    else:
        raise EngineError(f"array_module={array_module!r}: expected the numpy or cupy module")
    if name == "cuda":
        cupy_module()
    return name


def module(name: str):
    """The real array module of engine ``name``."""
    return cupy_module() if name == "cuda" else numpy


def register_cache(clear) -> None:
    """``clear()`` is called when the engine changes (caches of arrays made under the other one)."""
    _cache_clearers.append(clear)


def _switch(name: str) -> None:
    global _active
    if name == _active:
        return
    d = np.__dict__
    d.clear()
    d.update(_numpy_dict)
    if name == "cuda":
        cp = cupy_module()
        for k, v in cp.__dict__.items():
            if not k.startswith("__") and k in _numpy_dict and not isinstance(v, type):
                d[k] = v          # cupy's functions; numpy's dtypes/classes stay (cupy uses them too)
        d["ndarray"] = cp.ndarray
        d.update(_cuda_overrides(cp))
    for clear in _cache_clearers:
        clear()
    _active = name


def _cuda_overrides(cp) -> dict:
    """numpy functions the handlers use that CuPy lacks or takes fewer arguments of, on CuPy arrays."""
    consts: dict = {}      # small device constants, made once (a copy from the host cannot be graph-captured)

    def const(key, make):
        c = consts.get(key)
        if c is None:
            c = consts[key] = cp.asarray(make())
        return c

    def packbits(a, axis=None, bitorder="big"):
        a = cp.asarray(a)
        if axis is None:
            a, axis = a.ravel(), -1
        if axis not in (-1, a.ndim - 1):
            raise NotImplementedError("packbits: only the last axis")
        n = a.shape[-1]
        if n % 8:
            a = cp.concatenate([a, cp.zeros(a.shape[:-1] + (8 - n % 8,), a.dtype)], axis=-1)
        w = const(("pack", bitorder), lambda: numpy.left_shift(
            1, numpy.arange(8) if bitorder == "little" else numpy.arange(7, -1, -1)).astype(numpy.uint8))
        bits = (a != 0).astype(cp.uint8).reshape(a.shape[:-1] + (a.shape[-1] // 8, 8))
        return (bits * w).sum(axis=-1, dtype=cp.uint8)

    def unpackbits(a, axis=None, bitorder="big"):
        a = cp.asarray(a)
        if axis is None:
            a, axis = a.ravel(), -1
        if axis not in (-1, a.ndim - 1):
            raise NotImplementedError("unpackbits: only the last axis")
        sh = const(("unpack", bitorder), lambda: (numpy.arange(8) if bitorder == "little"
                                                  else numpy.arange(7, -1, -1)).astype(numpy.uint8))
        return ((a[..., None] >> sh) & 1).astype(cp.uint8).reshape(a.shape[:-1] + (a.shape[-1] * 8,))

    cp_asarray, cp_array = cp.asarray, cp.array

    def _scalar(a, dtype):
        """A 0-d device array of a host scalar, filled by a kernel (its value a kernel argument): no copy from
        host memory (CuPy stages one through pinned memory), so it can be captured in a CUDA graph
        (cuda_graph.py).  Filled through the unsigned integer view, so no float conversion can flush it."""
        h = numpy.asarray(a, dtype)
        if h.dtype.kind not in "biuf" or h.dtype.itemsize not in (1, 2, 4, 8):
            return None
        u = numpy.dtype(f"u{h.dtype.itemsize}")
        return cp.full((), h.view(u)[()], u).view(h.dtype)

    def asarray(a, dtype=None, *args, **kw):
        if not args and not kw and isinstance(a, (int, float, bool, numpy.generic)):
            r = _scalar(a, dtype)
            if r is not None:
                return r
        return cp_asarray(a, dtype, *args, **kw)

    def array(a, dtype=None, *args, **kw):
        if not args and not kw and isinstance(a, (int, float, bool, numpy.generic)):
            r = _scalar(a, dtype)
            if r is not None:
                return r
        return cp_array(a, dtype, *args, **kw)

    out: dict = {"packbits": packbits, "unpackbits": unpackbits, "asarray": asarray, "array": array}
    if not hasattr(cp, "bitwise_count"):
        popc = cp.ElementwiseKernel("T x", "uint8 y", "y = __popcll((unsigned long long)x)", "isagen_popcount")
        out["bitwise_count"] = lambda x: popc(cp.asarray(x))
    return out


@contextlib.contextmanager
def capture_guard():
    """While a CUDA graph is captured (cuda_graph.py): ``np.asarray``/``np.array`` of host arrays raise (a
    copy from host memory would be replayed from a buffer reused since), so the handler doing one is run
    outside graphs."""
    d = np.__dict__
    saved = d["asarray"], d["array"]

    def refuse(f):
        def g(a, *args, **kw):
            if isinstance(a, (numpy.ndarray, list, tuple)):
                raise EngineError("a host array is copied to the device while a CUDA graph is captured")
            return f(a, *args, **kw)
        return g
    d["asarray"], d["array"] = refuse(saved[0]), refuse(saved[1])
    try:
        yield
    finally:
        d["asarray"], d["array"] = saved


@contextlib.contextmanager
def engine(name: str):
    """Run the block with the array namespace of engine ``name``."""
    prev = _active
    _switch(name)
    try:
        yield
    finally:
        _switch(prev)


def active() -> str:
    return _active


def to_host(a):
    """A numpy array (or numpy scalar) of ``a``, wherever it lives."""
    if _active == "cuda" and hasattr(a, "get") and not isinstance(a, numpy.ndarray):
        return a.get()
    return numpy.asarray(a)


def from_host(a):
    """``a`` (a numpy array) on the active engine's device."""
    if _active == "cuda":
        return np.asarray(a)
    return a


_W2M = None


def words_to_mask(lo, hi):
    """uint32 lo/hi [n] -> bool [n, 64] lane masks, on the CUDA device (one kernel)."""
    global _W2M
    cp = cupy_module()
    if _W2M is None:
        _W2M = cp.ElementwiseKernel(
            "uint32 lo, uint32 hi", "bool m",
            "int l = (int)(i % 64); m = ((l < 32 ? (lo >> l) : (hi >> (l - 32))) & 1u) != 0u", "isagen_w2m")
    lo = cp.asarray(lo, dtype=cp.uint32)
    hi = cp.asarray(hi, dtype=cp.uint32)
    out = cp.empty((lo.shape[0], 64), cp.bool_)
    _W2M(lo[:, None], hi[:, None], out)
    return out


_PERM = None


def perm_b32(a, b, sel):
    """v_perm_b32 on the CUDA device, one kernel whatever the selectors (no value read back to choose a
    path, so it can be graph-captured): per result byte i, selector byte s = sel[8i+7:8i] picks byte s of
    {a, b} (b the low word) for s < 8, the sign bit of byte 2(s-8)+1 replicated for s < 12, 0 for s == 12
    and 0xFF above (cgen.py's perm_b32, the numpy path's table)."""
    global _PERM
    cp = cupy_module()
    if _PERM is None:
        _PERM = cp.ElementwiseKernel(
            "uint32 a, uint32 b, uint32 sel", "uint32 out",
            """const unsigned long long d = ((unsigned long long)a << 32) | b;
               unsigned int r = 0;
               for (int i = 0; i < 4; i++) {
                   const unsigned int s = (sel >> (8 * i)) & 0xFFu;
                   unsigned int v;
                   if (s < 8u) v = (unsigned int)(d >> (8 * s)) & 0xFFu;
                   else if (s < 12u) v = ((d >> (8 * (2 * (s - 8) + 1) + 7)) & 1ull) ? 0xFFu : 0u;
                   else if (s == 12u) v = 0u;
                   else v = 0xFFu;
                   r |= v << (8 * i);
               }
               out = r;""", "isagen_perm_b32")
    return _PERM(a, b, sel)


_KORDER = None


def matmul_k_order(a, b, out) -> None:
    """``out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]`` in float64, summed in k order from 0 (the
    numpy path's and the native kernel's order), on the CUDA device.  cuBLAS's order is not specified;
    this kernel's is, so the bits match the CPU engine where the products are exact (8/16-bit and f32
    inputs: their products fit float64's 53 bits, so a fused multiply-add rounds the same as the
    separate add)."""
    global _KORDER
    cp = cupy_module()
    if _KORDER is None:
        _KORDER = cp.RawKernel(r"""
extern "C" __global__ void korder(const double* a, const double* b, double* out,
                                  long long nb, int M, int N, int K) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nb * M * N) return;
    int j = (int)(t % N); long long r = t / N; int i = (int)(r % M); long long g = r / M;
    const double* pa = a + (g * M + i) * K;
    const double* pb = b + g * K * N + j;
    double acc = 0.0;
    for (int k = 0; k < K; ++k) acc = __dadd_rn(acc, __dmul_rn(pa[k], pb[(long long)k * N]));
    out[t] = acc;
}""", "korder")
    a = cp.ascontiguousarray(a, dtype=cp.float64)
    b = cp.ascontiguousarray(b, dtype=cp.float64)
    M, K = a.shape[-2], a.shape[-1]
    N = b.shape[-1]
    nb = int(numpy.prod(out.shape[:-2]))
    if a.shape[:-2] != out.shape[:-2] or b.shape[:-2] != out.shape[:-2]:
        raise EngineError("emulator bug: matmul_k_order needs equal batch shapes")
    res = out if out.flags.c_contiguous and out.dtype == cp.float64 else cp.empty(out.shape, cp.float64)
    total = nb * M * N
    threads = 256
    _KORDER(((total + threads - 1) // threads,), (threads,),
            (a, b, res, numpy.int64(nb), numpy.int32(M), numpy.int32(N), numpy.int32(K)))
    if res is not out:
        out[...] = res


# CuPy compiles every kernel with -ftz=true (not overridable: cupy issue #9576), so float32 operations on
# the device flush subnormal inputs and results to zero, conversions between float32 and float64
# included.  The MFMA path converts with these kernels instead: integer and float64 operations only
# (float64 is never flushed), so it keeps the CPU engine's bits where float32 subnormals occur.
_F32_TO_F64 = None
_ADD_ROUND = None

_CONV_SRC = r"""
__device__ double isagen_f32_bits_to_f64(unsigned int b) {
    unsigned int e = (b >> 23) & 0xffu, m = b & 0x7fffffu;
    if (e == 0u) {                                    /* zero or subnormal: m * 2^-149, exact */
        double v = ldexp((double)m, -149);
        return (b >> 31) ? -v : v;
    }
    return (double)__uint_as_float(b);                /* normal, inf, NaN: no subnormal involved */
}
__device__ unsigned int isagen_f64_to_f32_bits(double x) {
    double ax = fabs(x);
    if (!(ax < ldexp(1.0, -126))) return __float_as_uint(__double2float_rn(x));   /* normal result, inf, NaN */
    unsigned int m = (unsigned int)rint(ldexp(ax, 149));      /* exact scaling; rint rounds half to even */
    return (signbit(x) ? 0x80000000u : 0u) | m;          /* m == 2^23 is the smallest normal: right bits */
}
"""


# float32 a + b, a - b, a * b as numpy computes them on x86 (the CPU engine): through float64 (exact for one
# such operation of float32 operands: 53 >= 2*24 + 2 bits, so rounding the float64 result to float32 is the
# correctly rounded float32 result), subnormals kept; a NaN operand's NaN comes out quieted (the first
# operand's when both are), an invalid operation (inf - inf, 0 * inf) gives x86's default NaN 0xffc00000.
_F32_ARITH = None
_ARITH_SRC = r"""
__device__ unsigned int isagen_f32_arith(unsigned int a, unsigned int b, int op) {
    if ((a & 0x7fffffffu) > 0x7f800000u) return a | 0x400000u;
    if ((b & 0x7fffffffu) > 0x7f800000u) return b | 0x400000u;
    double x = isagen_f32_bits_to_f64(a), y = isagen_f32_bits_to_f64(b);
    double z = op == 0 ? __dadd_rn(x, y) : (op == 1 ? __dsub_rn(x, y) : __dmul_rn(x, y));
    if (z != z) return 0xffc00000u;
    return isagen_f64_to_f32_bits(z);
}
"""
_ARITH_OPS = {"add": 0, "sub": 1, "mul": 2}


def f32_arith(op: str, a, b):
    """float32 ``a op b`` (op: add, sub, mul; float32 arrays or scalars) on the CUDA device with the CPU
    engine's bits (_ARITH_SRC): CuPy's own float32 arithmetic flushes subnormals and returns CUDA's
    canonical NaN."""
    global _F32_ARITH
    cp = cupy_module()
    if _F32_ARITH is None:
        _F32_ARITH = cp.ElementwiseKernel("uint32 a, uint32 b, int32 op", "uint32 y", "y = isagen_f32_arith(a, b, op)",
                                          "isagen_f32_arith", preamble=_CONV_SRC + _ARITH_SRC)
    ua = np.asarray(a, numpy.float32).view(numpy.uint32)      # (host scalars filled through their bits: xp.py)
    ub = np.asarray(b, numpy.float32).view(numpy.uint32)
    return _F32_ARITH(ua, ub, numpy.int32(_ARITH_OPS[op])).view(numpy.float32)


def f32_bits_to_f64(bits):
    """float64 values of float32 bit patterns (uint32, on the device), subnormals kept."""
    global _F32_TO_F64
    cp = cupy_module()
    if _F32_TO_F64 is None:
        _F32_TO_F64 = cp.ElementwiseKernel("uint32 b", "float64 y", "y = isagen_f32_bits_to_f64(b)",
                                           "isagen_f32_to_f64", preamble=_CONV_SRC)
    return _F32_TO_F64(cp.ascontiguousarray(bits, dtype=cp.uint32))


def add_round_f32(acc, c_bits, out_bits) -> None:
    """``out_bits = f32_bits(round_to_nearest_even(acc + f64(c_bits)))``: float64 ``acc`` plus the float32
    ``c_bits``, one rounding to float32, as the CPU engine computes it, subnormals kept."""
    global _ADD_ROUND
    cp = cupy_module()
    if _ADD_ROUND is None:
        _ADD_ROUND = cp.ElementwiseKernel(
            "float64 acc, uint32 c", "uint32 y",
            "y = isagen_f64_to_f32_bits(acc + isagen_f32_bits_to_f64(c))", "isagen_add_round", preamble=_CONV_SRC)
    _ADD_ROUND(acc, c_bits, out_bits)
