"""The emulator's native MFMA kernel: a small C function, compiled once per machine with the host C
compiler and loaded through ctypes, that runs the float MFMAs with 8- and 16-bit inputs and f32
results (bf16, f16, fp8/bf8 ``v_mfma_f32_*`` of the gfx9 layout) for all waves of a group in one call.

It computes what ``mfma._run`` computes with numpy: every input decoded exactly (bf16 by its bits,
f16 and fp8/bf8 through float32 tables of every code), every product exact in float64, the K-sum in
float64 in k order, then C added in float64 and one rounding to float32.  numpy's float64 ``matmul``
gives the same bits on random inputs over the whole finite range, where the order of the sum shows,
so its BLAS sums these shapes in k order too (while the sum is exact, as it is unless the products
span more than ~2^30 in magnitude, every order gives the same bits anyway).  It is compiled without
fast-math, so the compiler keeps that order (a fused multiply-add gives the same bits here: the
products are exact).  ``tests/runtime/emu/test_emu_engine.py`` checks it against the numpy path bit
for bit (NaN payloads aside).

Its gain is memory traffic: the numpy path writes the [W, M, N] float64 products, reads them back
transposed and casts; here a wave's 32x32 accumulator stays in L1.  About 1.5x faster per
wave-MFMA than the numpy path in isolation (~1.1 us per 32x32x8 wave-MFMA), more inside a GEMM with
fused runs (executor._fuse_mfma_runs), where the accumulators of 32 waves stay in cache.

The shared object is cached under ``isagen.objects.cache.cache_dir() / "emu-native"`` by a hash of
the source and compiler.  No compiler (``cc``/``gcc``/``clang``/``clang-22``/``clang-19`` on PATH, or
``$CC``), a failed build, or ``ISAGEN_EMU_NATIVE=0`` leaves the numpy path in use; ``available()`` says which.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

_SRC = r"""
#include <stdint.h>
#include <stddef.h>

#define CHUNK 32    /* waves whose accumulators are kept at once: D is written word by word over them */

/* acc[i][j] = sum over k in order of a[i][k] * b[k][j] (float64) */
static inline __attribute__((always_inline))
void rows(const double *restrict av, const double *restrict bv, double *restrict ac, int M, int K, int N)
{
    for (int i = 0; i < M; i++) {
        double *restrict r = ac + i * N;
        for (int j = 0; j < N; j++) r[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double x = av[i * K + k];
            for (int j = 0; j < N; j++) r[j] += x * bv[k * N + j];
        }
    }
}

/* One float MFMA for W waves.
   A, B: raw input elements (uint16 or uint8 per elem_bytes); element e of wave w is at
   A[w * a_ws + a_off[e]] where a_off gives the position inside the wave of element e = (b, i, k)
   (B: (b, k, j)), offsets in elements precomputed from the lane layout.
   lut_a / lut_b: float value of every raw code.  C: float32 at C[w * c_ws + c_off[t]] (c_ws = 0 and
   c_off all 0 for an inline constant).  D: float32 at D[w * d_ws + d_off[t]].  d_src[t]: the flat
   (b, i, j) product that D word/lane t receives.  d_rs >= 0: the products are already in D order
   (A's rows gathered in D-register order) and D/C words are d_rs/c_rs apart with lanes contiguous
   (c_ls = 1) or one broadcast value (c_ls = 0); d_off/c_off/d_src are then unused.
   elem_bytes: 1 (8-bit codes through the tables), 2 (16-bit codes through the tables), 3 (bf16).
   a_val, b_val: scratch of blocks*M*K and blocks*K*N doubles; acc: of CHUNK*blocks*M*N doubles. */
void mfma_f32(int W, int blocks, int M, int N, int K, int elem_bytes,
              const void *A, ptrdiff_t a_ws, const int64_t *a_off,
              const void *B, ptrdiff_t b_ws, const int64_t *b_off,
              const float *lut_a, const float *lut_b,
              const float *C, ptrdiff_t c_ws, const int64_t *c_off,
              float *D, ptrdiff_t d_ws, const int64_t *d_off,
              const int64_t *d_src, int64_t nout, ptrdiff_t d_rs, ptrdiff_t c_rs, int c_ls,
              double *a_val, double *b_val, double *acc)
{
    const int64_t na = (int64_t)blocks * M * K, nb = (int64_t)blocks * K * N, nacc = (int64_t)blocks * M * N;
    for (int w0 = 0; w0 < W; w0 += CHUNK) {
        const int cw = W - w0 < CHUNK ? W - w0 : CHUNK;
        for (int u = 0; u < cw; u++) {
            const int w = w0 + u;
            if (d_rs >= 0 && w0 + CHUNK < W && u < nout / 64) {
                /* the next chunk's C words, one word per wave of this one: a word of CHUNK waves is
                   one contiguous run of CHUNK*256 bytes, too short for the hardware prefetcher */
                const char *p = (const char *)(C + (w0 + CHUNK) * c_ws + u * c_rs);
                const int64_t len = (int64_t)(W - w0 - CHUNK < CHUNK ? W - w0 - CHUNK : CHUNK) * c_ws * 4;
                for (int64_t o = 0; o < len; o += 64) __builtin_prefetch(p + o, 1, 3);
            }
            if (elem_bytes == 3) {      /* bf16: the bits are the top half of an f32 */
                const uint16_t *a = (const uint16_t *)A + w * a_ws, *b = (const uint16_t *)B + w * b_ws;
                union { uint32_t u; float f; } cv;
                for (int64_t e = 0; e < na; e++) { cv.u = (uint32_t)a[a_off[e]] << 16; a_val[e] = (double)cv.f; }
                for (int64_t e = 0; e < nb; e++) { cv.u = (uint32_t)b[b_off[e]] << 16; b_val[e] = (double)cv.f; }
            } else if (elem_bytes == 2) {
                const uint16_t *a = (const uint16_t *)A + w * a_ws, *b = (const uint16_t *)B + w * b_ws;
                for (int64_t e = 0; e < na; e++) a_val[e] = (double)lut_a[a[a_off[e]]];
                for (int64_t e = 0; e < nb; e++) b_val[e] = (double)lut_b[b[b_off[e]]];
            } else {
                const uint8_t *a = (const uint8_t *)A + w * a_ws, *b = (const uint8_t *)B + w * b_ws;
                for (int64_t e = 0; e < na; e++) a_val[e] = (double)lut_a[a[a_off[e]]];
                for (int64_t e = 0; e < nb; e++) b_val[e] = (double)lut_b[b[b_off[e]]];
            }
            for (int bl = 0; bl < blocks; bl++) {
                const double *av = a_val + (int64_t)bl * M * K;
                const double *bv = b_val + (int64_t)bl * K * N;
                double *ac = acc + u * nacc + (int64_t)bl * M * N;
                /* compile-time N and K keep a row of the accumulator in registers */
                if (N == 32 && K == 8) rows(av, bv, ac, M, 8, 32);
                else if (N == 32 && K == 16) rows(av, bv, ac, M, 16, 32);
                else if (N == 16 && K == 16) rows(av, bv, ac, M, 16, 16);
                else if (N == 16 && K == 32) rows(av, bv, ac, M, 32, 16);
                else if (N == 4 && K == 4) rows(av, bv, ac, M, 4, 4);
                else rows(av, bv, ac, M, K, N);
            }
        }
        if (d_rs >= 0) {     /* acc is in D order: word-major, 64 lanes each, lanes contiguous in D */
            for (int64_t word = 0; word < nout / 64; word++)
                for (int u = 0; u < cw; u++) {
                    const double *restrict s = acc + u * nacc + word * 64;
                    const float *cw_ = C + (w0 + u) * c_ws + word * c_rs;
                    float *restrict dw = D + (w0 + u) * d_ws + word * d_rs;
                    if (c_ls)
                        for (int l = 0; l < 64; l++) dw[l] = (float)(s[l] + (double)cw_[l]);
                    else
                        for (int l = 0; l < 64; l++) dw[l] = (float)(s[l] + (double)cw_[0]);
                }
        } else {
            for (int u = 0; u < cw; u++) {
                const float *c = C + (w0 + u) * c_ws;
                float *d = D + (w0 + u) * d_ws;
                const double *s = acc + u * nacc;
                for (int64_t t = 0; t < nout; t++)
                    d[d_off[t]] = (float)(s[d_src[t]] + (double)c[c_off[t]]);
            }
        }
    }
}

/* A run of MFMAs over W waves, chunk by chunk: all of them for waves 0..chunk-1, then the next chunk.
   P holds nm records of 32 int64: mfma_f32's 28 arguments (the first, W, unused) followed by the byte
   step per wave of A, B, C and D. */
void mfma_run(int nm, const int64_t *P, int W, int chunk)
{
    for (int w0 = 0; w0 < W; w0 += chunk) {
        const int n = W - w0 < chunk ? W - w0 : chunk;
        for (int m = 0; m < nm; m++) {
            const int64_t *p = P + (int64_t)m * 32;
            mfma_f32(n, (int)p[1], (int)p[2], (int)p[3], (int)p[4], (int)p[5],
                     (const char *)(intptr_t)p[6] + w0 * p[28], p[7], (const int64_t *)(intptr_t)p[8],
                     (const char *)(intptr_t)p[9] + w0 * p[29], p[10], (const int64_t *)(intptr_t)p[11],
                     (const float *)(intptr_t)p[12], (const float *)(intptr_t)p[13],
                     (const float *)((const char *)(intptr_t)p[14] + w0 * p[30]), p[15],
                     (const int64_t *)(intptr_t)p[16],
                     (float *)((char *)(intptr_t)p[17] + w0 * p[31]), p[18], (const int64_t *)(intptr_t)p[19],
                     (const int64_t *)(intptr_t)p[20], p[21], p[22], p[23], (int)p[24],
                     (double *)(intptr_t)p[25], (double *)(intptr_t)p[26], (double *)(intptr_t)p[27]);
        }
    }
}
"""

CHUNK = 32            # the C source's CHUNK: waves per accumulator scratch
_lib = None
_tried = False
_why = ""


def _compiler() -> str | None:
    cc = os.environ.get("CC")
    if cc and shutil.which(cc):
        return shutil.which(cc)
    # Debian's LLVM packages (which isagen's CI installs) name their clang by version only
    for name in ("cc", "gcc", "clang", "clang-22", "clang-19"):
        p = shutil.which(name)
        if p:
            return p
    return None


def _cpu_id() -> str:
    """The host CPU's model and flags (the library is built for it: -march=native)."""
    try:
        with open("/proc/cpuinfo") as f:
            return "".join(line for line in f if line.startswith(("model name", "flags")))[:4096]
    except OSError:
        import platform
        return platform.processor() + platform.machine()


def _build() -> ctypes.CDLL | None:
    global _why
    if os.environ.get("ISAGEN_EMU_NATIVE", "1") == "0":
        _why = "disabled by ISAGEN_EMU_NATIVE=0"
        return None
    cc = _compiler()
    if cc is None:
        _why = "no C compiler on PATH (cc, gcc, clang, clang-22, clang-19 or $CC)"
        return None
    from isagen.objects.cache import cache_dir
    flags = ["-O3", "-march=native", "-fPIC", "-shared", "-fno-fast-math", "-std=c99"]
    key = hashlib.sha256((_SRC + cc + " ".join(flags) + _cpu_id()).encode()).hexdigest()[:16]
    out_dir = cache_dir() / "emu-native"
    so = out_dir / f"mfma_{key}.so"
    if not so.exists():
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "mfma.c"
                src.write_text(_SRC)
                tmp_so = Path(tmp) / so.name
                r = subprocess.run([cc, *flags, str(src), "-o", str(tmp_so)], capture_output=True, text=True,
                                   timeout=120)
                if r.returncode != 0:
                    _why = f"{cc} failed: {r.stderr.strip()[:300]}"
                    return None
                os.replace(tmp_so, so)       # atomic: concurrent builders leave one complete file
        except (OSError, subprocess.SubprocessError) as e:
            _why = f"building the native MFMA kernel failed: {e}"
            return None
    try:
        lib = ctypes.CDLL(str(so))
    except OSError as e:
        _why = f"loading {so} failed: {e}"
        return None
    f = lib.mfma_f32
    P, I, L = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    f.argtypes = [I, I, I, I, I, I, P, L, P, P, L, P, P, P, P, L, P, P, L, P, P, L, L, L, I, P, P, P]
    f.restype = None
    run = lib.mfma_run
    run.argtypes = [I, P, I, I]
    run.restype = None
    return lib


def library() -> ctypes.CDLL | None:
    """The loaded native library, building it on first use; None where it cannot be had."""
    global _lib, _tried
    if not _tried:
        _tried = True
        _lib = _build()
    return _lib


def available() -> bool:
    return library() is not None


def why_not() -> str:
    """Why the native kernel is not in use ('' when it is)."""
    library()
    return _why


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]      # the address of a[0, ...] (faster than a.ctypes.data)


def mfma_f32(W: int, blocks: int, M: int, N: int, K: int, elem_bytes: int,
             a: np.ndarray, a_ws: int, a_off: np.ndarray, b: np.ndarray, b_ws: int, b_off: np.ndarray,
             lut_a: np.ndarray, lut_b: np.ndarray, c: np.ndarray, c_ws: int, c_off: np.ndarray,
             d: np.ndarray, d_ws: int, d_off: np.ndarray, d_src: np.ndarray, d_rs: int, c_rs: int, c_ls: int,
             scratch: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    """Run the C kernel (arguments as in the C source: element strides and int64 offset arrays).
    ``a``/``b``/``c``/``d`` are the arrays whose first element is wave 0's base."""
    lib = library()
    assert lib is not None
    av, bv, acc = scratch
    lib.mfma_f32(W, blocks, M, N, K, elem_bytes, address(a), a_ws, address(a_off), address(b), b_ws, address(b_off),
                 address(lut_a), address(lut_b), address(c), c_ws, address(c_off), address(d), d_ws, address(d_off),
                 address(d_src), d_src.size, d_rs, c_rs, c_ls, address(av), address(bv), address(acc))
