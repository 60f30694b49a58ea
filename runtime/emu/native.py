"""The emulator's native MFMA kernel: a small C library, compiled once per machine with the host C
compiler and loaded through ctypes, that runs the float MFMAs with 8- and 16-bit inputs and f32
results (bf16, f16, fp8/bf8 ``v_mfma_f32_*`` of the gfx9 layout) for all waves of a batch in one call,
one MFMA or a run of them (executor._fuse_mfma_runs), on several threads.

It computes what ``mfma._run`` computes with numpy: every input decoded exactly (bf16 by its bits,
f16 and fp8/bf8 through float32 tables of every code), every product exact in float64, the K-sum in
float64 in k order starting from 0, then C added in float64 and one rounding to float32 (per MFMA:
a chained MFMA reads the previous one's rounded D).  numpy's float64 ``matmul`` gives the same bits
on random inputs over the whole finite range, where the order of the sum shows, so its BLAS sums
these shapes in k order too.  It is compiled without fast-math, so the compiler keeps that order;
``-ffp-contract=fast`` lets it fuse a product with its add, which gives the same bits because every
product is exact.  ``tests/runtime/emu/test_emu_engine.py`` checks it against the numpy path bit
for bit (NaN payloads aside).

How (per wave and MFMA): A's rows k and B's rows k are converted to float64 once (for the gfx9
layouts a row is one element of M or N consecutive lanes, read as whole 32-bit words, 8 at a time);
then for 4 (N = 32) or 8 (N = 16) rows of D at a time the float64 accumulators of the whole rows
stay in AVX-512 registers while k runs (B's row k loaded once for those rows), and C is added and
the rows rounded and stored straight into D's registers.  A run's MFMAs go wave chunk by wave chunk
(all of them for a few waves, then the next waves: the accumulator tiles a run chains stay in
cache; the registers of the wave two ahead are prefetched), and up to :func:`threads` threads take
the chunks one at a time (the ctypes call releases the GIL).  About 0.5 us of one core per 32x32x8
wave-MFMA (8192 float64 multiply-adds: ~0.29 us at one 8-wide FMA per cycle; the rest is converting
A, B and C and rounding D), 2.5-3x less CPU time than the previous kernel of this file.

The shared object is cached under ``isagen.objects.cache.cache_dir() / "emu-native"`` by a hash of
the source and compiler.  No compiler (``cc``/``gcc``/``clang``/``clang-22``/``clang-19`` on PATH, or
``$CC``), a failed build, or ``ISAGEN_EMU_NATIVE=0`` leaves the numpy path in use; ``available()`` says
which.  ``ISAGEN_EMU_THREADS`` caps the threads (default: the CPUs this process may run on).
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
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* 8 floats to float64, and 8 float64 rounded to float32 (to nearest even) and stored: one
   instruction each with AVX-512 (GCC 12 splits the generic conversions into four) */
static inline v8d widen8(v8f f)
{
#ifdef __AVX512F__
    return (v8d)_mm512_cvtps_pd((__m256)f);
#else
    return __builtin_convertvector(f, v8d);
#endif
}

static inline void store_rounded8(float *p, v8d x)
{
#ifdef __AVX512F__
    _mm256_storeu_ps(p, _mm512_cvtpd_ps((__m512d)x));
#else
    v8f o = __builtin_convertvector(x, v8f);
    memcpy(p, &o, sizeof o);
#endif
}

/* One float MFMA of one instruction form over the waves of a batch (all fields int64; pointers as
   addresses).  Wave w's operands start at A + w * a_ws (bytes), likewise B, C, D.
   kind: 1 8-bit codes through the tables lut_a/lut_b, 2 16-bit codes through them, 3 bf16 (by its bits).
   a_off[(b*K + k)*M + i]: offset in input elements (of 1 or 2 bytes) of A[b][i][k] inside the wave;
   a_contig: A[b][i][k] for i = 0..M-1 are the same element of M consecutive lanes (32-bit words), so
   a whole row k is read as M words.  B likewise with j and N.
   c_row[b*M + i] / d_row[b*M + i]: offset in 32-bit words of C/D[b][i][0]; j steps one word (one
   lane) in D, c_ls words in C (0: one broadcast value per row, an inline constant). */
typedef struct {
    int64_t kind, blocks, M, N, K;
    int64_t A, a_ws, a_off, a_contig;
    int64_t B, b_ws, b_off, b_contig;
    int64_t lut_a, lut_b;
    int64_t C, c_ws, c_row, c_ls;
    int64_t D, d_ws, d_row;
    int64_t a_regs, a_rs, b_regs, b_rs, cd_regs, c_rs, d_rs;
    int64_t pad[3];
} Rec;

#define MAXE 1024     /* the most elements of one operand of one wave (blocks * M * K) */

/* dst[(b*K + k)*n + i] = value of element (b, k, i) of one operand of one wave, as float64 */
static void convert(const Rec *r, const char *base, const int64_t *off, int contig, const float *lut,
                    int n, double *restrict dst)
{
    const int64_t rows = r->blocks * r->K;
    const int eb = r->kind == 1 ? 1 : 2;
    if (contig && n % 8 == 0) {
        const int per = 4 / eb;
        for (int64_t q = 0; q < rows; q++) {
            const int64_t e = off[q * n];
            const uint32_t *p = (const uint32_t *)base + (per == 2 ? e >> 1 : e >> 2);
            const int sh = (int)(e & (per - 1)) * 8 * eb;
            double *d = dst + q * n;
            for (int i = 0; i < n; i += 8) {
                v8u w;
                memcpy(&w, p + i, sizeof w);
                w >>= sh;
                v8f f;
                if (r->kind == 3) {
                    w <<= 16;
                    memcpy(&f, &w, sizeof f);
                } else {
                    w &= eb == 1 ? 0xFFu : 0xFFFFu;
                    for (int t = 0; t < 8; t++) f[t] = lut[w[t]];
                }
                v8d x = widen8(f);
                memcpy(d + i, &x, sizeof x);
            }
        }
        return;
    }
    const int64_t ne = rows * n;
    if (r->kind == 3) {
        const uint16_t *a = (const uint16_t *)base;
        union { uint32_t u; float f; } cv;
        for (int64_t e = 0; e < ne; e++) { cv.u = (uint32_t)a[off[e]] << 16; dst[e] = (double)cv.f; }
    } else if (r->kind == 2) {
        const uint16_t *a = (const uint16_t *)base;
        for (int64_t e = 0; e < ne; e++) dst[e] = (double)lut[a[off[e]]];
    } else {
        const uint8_t *a = (const uint8_t *)base;
        for (int64_t e = 0; e < ne; e++) dst[e] = (double)lut[a[off[e]]];
    }
}

/* D rows i0..i0+R-1 = round_f32(sum over k in order of a[k][i] * b[k][j] + C) for N = 8*NV columns:
   the float64 accumulators of R rows stay in registers; the products are exact, so a fused
   multiply-add gives the bits of the product followed by the add. */
#define TILE(NAME, NV, R, KK)                                                                        \
static void NAME(const double *restrict av, const double *restrict bv, int M,                        \
                 const float *C, const int64_t *c_row, int c_ls, float *D, const int64_t *d_row)     \
{                                                                                                    \
    for (int i0 = 0; i0 < M; i0 += R) {                                                              \
        v8d acc[R][NV];                                                                              \
        for (int r = 0; r < R; r++) for (int v = 0; v < NV; v++) acc[r][v] = (v8d){0};               \
        for (int k = 0; k < KK; k++) {                                                               \
            v8d bk[NV];                                                                              \
            for (int v = 0; v < NV; v++) { memcpy(&bk[v], bv + (k * NV + v) * 8, sizeof(v8d));            \
                __asm__("" : "+v"(bk[v])); }  /* in a register: loaded once for R rows */            \
            for (int r = 0; r < R; r++) {                                                            \
                const double x = av[k * M + i0 + r];                                                 \
                for (int v = 0; v < NV; v++) acc[r][v] += x * bk[v];                                 \
            }                                                                                        \
        }                                                                                            \
        for (int r = 0; r < R; r++) {                                                                \
            const float *c = C + c_row[i0 + r];                                                      \
            float *d = D + d_row[i0 + r];                                                            \
            for (int v = 0; v < NV; v++) {                                                           \
                v8f cf;                                                                              \
                if (c_ls) memcpy(&cf, c + 8 * v, sizeof cf);                                         \
                else cf = (v8f){0} + c[0];                                                           \
                store_rounded8(d + 8 * v, acc[r][v] + widen8(cf));                                   \
            }                                                                                        \
        }                                                                                            \
    }                                                                                                \
}

TILE(t32k4, 4, 4, 4)
TILE(t32k8, 4, 4, 8)
TILE(t32k16, 4, 4, 16)
TILE(t16k4, 2, 8, 4)
TILE(t16k16, 2, 8, 16)
TILE(t16k32, 2, 8, 32)

static void tile_any(const double *restrict av, const double *restrict bv, int M, int N, int K,
                     const float *C, const int64_t *c_row, int c_ls, float *D, const int64_t *d_row)
{
    double acc[64];
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) acc[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double x = av[k * M + i];
            for (int j = 0; j < N; j++) acc[j] += x * bv[k * N + j];
        }
        const float *c = C + c_row[i];
        float *d = D + d_row[i];
        for (int j = 0; j < N; j++) d[j] = (float)(acc[j] + (double)c[j * c_ls]);
    }
}

/* one MFMA for wave w */
static void wave_mfma(const Rec *r, int64_t w)
{
    double av[MAXE] __attribute__((aligned(64))), bv[MAXE] __attribute__((aligned(64)));
    const int M = (int)r->M, N = (int)r->N, K = (int)r->K;
    convert(r, (const char *)(intptr_t)r->A + w * r->a_ws, (const int64_t *)(intptr_t)r->a_off, (int)r->a_contig,
            (const float *)(intptr_t)r->lut_a, M, av);
    convert(r, (const char *)(intptr_t)r->B + w * r->b_ws, (const int64_t *)(intptr_t)r->b_off, (int)r->b_contig,
            (const float *)(intptr_t)r->lut_b, N, bv);
    const float *C = (const float *)((const char *)(intptr_t)r->C + w * r->c_ws);
    float *D = (float *)((char *)(intptr_t)r->D + w * r->d_ws);
    const int64_t *c_row = (const int64_t *)(intptr_t)r->c_row, *d_row = (const int64_t *)(intptr_t)r->d_row;
    const int c_ls = (int)r->c_ls;
    for (int b = 0; b < r->blocks; b++) {
        const double *a = av + b * K * M, *bb = bv + b * K * N;
        const int64_t *cr = c_row + b * M, *dr = d_row + b * M;
        if (N == 32 && K == 8) t32k8(a, bb, M, C, cr, c_ls, D, dr);
        else if (N == 32 && K == 16) t32k16(a, bb, M, C, cr, c_ls, D, dr);
        else if (N == 32 && K == 4) t32k4(a, bb, M, C, cr, c_ls, D, dr);
        else if (N == 16 && K == 16) t16k16(a, bb, M, C, cr, c_ls, D, dr);
        else if (N == 16 && K == 32) t16k32(a, bb, M, C, cr, c_ls, D, dr);
        else if (N == 16 && K == 4) t16k4(a, bb, M, C, cr, c_ls, D, dr);
        else tile_any(a, bb, M, N, K, C, cr, c_ls, D, dr);
    }
}

/* ask for the registers of wave w of MFMA r a few waves before it runs (always_inline: GCC takes a
   function whose only effect is prefetching for a pure one and drops its calls) */
static inline __attribute__((always_inline)) void prefetch(const Rec *r, int64_t w)
{
    const char *a = (const char *)(intptr_t)r->A + w * r->a_ws, *b = (const char *)(intptr_t)r->B + w * r->b_ws;
    for (int64_t q = 0; q < r->a_regs; q++)
        for (int o = 0; o < 256; o += 64) __builtin_prefetch(a + q * r->a_rs + o, 0, 3);
    for (int64_t q = 0; q < r->b_regs; q++)
        for (int o = 0; o < 256; o += 64) __builtin_prefetch(b + q * r->b_rs + o, 0, 3);
    const char *c = (const char *)(intptr_t)r->C + w * r->c_ws, *d = (const char *)(intptr_t)r->D + w * r->d_ws;
    if (r->c_ls)
        for (int64_t q = 0; q < r->cd_regs; q++)
            for (int o = 0; o < 256; o += 64) __builtin_prefetch(c + q * r->c_rs + o, 0, 3);
    if (d != c || !r->c_ls)
        for (int64_t q = 0; q < r->cd_regs; q++)
            for (int o = 0; o < 256; o += 64) __builtin_prefetch(d + q * r->d_rs + o, 1, 3);
}
/* how many waves ahead (measured: 2 takes ~10% off single MFMAs over all waves, 4 adds time) */
#define AHEAD 2

typedef struct { const Rec *recs; int nm; int64_t W, chunk, next, done, refs; } Job;

/* take the next chunk of waves until none is left, and run every MFMA of the run for it (all of them
   for the chunk's first wave, then for the next: a wave's accumulators stay in cache along its chain);
   chunks are handed out one at a time, so a thread the OS holds back does less of the work */
static void work(Job *j)
{
    for (;;) {
        const int64_t w0 = __atomic_fetch_add(&j->next, j->chunk, __ATOMIC_RELAXED);
        if (w0 >= j->W) break;
        const int64_t w1 = w0 + j->chunk < j->W ? w0 + j->chunk : j->W;
        for (int m = 0; m < j->nm; m++)
            for (int64_t w = w0; w < w1; w++) {
                if (w + AHEAD < w1) prefetch(j->recs + m, w + AHEAD);
                wave_mfma(j->recs + m, w);
            }
        __atomic_fetch_add(&j->done, w1 - w0, __ATOMIC_RELEASE);
    }
}

static void release(Job *j)
{
    if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) == 0) free(j);
}

static void *helper(void *arg)
{
    work((Job *)arg);
    release((Job *)arg);
    return NULL;
}

#define MAXT 64

/* A run of nm MFMAs (records R) over waves 0..W-1 in chunks of `chunk` waves, on up to `threads`
   threads (one per min_waves waves at most); returns the number of threads asked for.  The caller's
   thread takes chunks too and returns once every chunk is done: a helper thread the OS starts late
   finds no chunk left and only drops its reference to the job (detached: nobody waits for it). */
int mfma_run(int nm, const int64_t *R, int64_t W, int64_t chunk, int threads, int64_t min_waves)
{
    if (chunk < 1) chunk = 1;
    if (min_waves < 1) min_waves = 1;
    int64_t nt = W / min_waves;
    if (nt > threads) nt = threads;
    if (nt > MAXT) nt = MAXT;
    if (nt < 1) nt = 1;
    if (nt > 1 && chunk * nt > W) chunk = (W + nt - 1) / nt;      /* a chunk for each thread at least */
    Job local = {(const Rec *)R, nm, W, chunk, 0, 0, 1};
    if (nt == 1) {
        work(&local);
        return 1;
    }
    Job *j = malloc(sizeof *j);
    if (!j) {
        work(&local);
        return 1;
    }
    *j = local;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (int64_t t = 1; t < nt; t++) {
        pthread_t tid;
        __atomic_add_fetch(&j->refs, 1, __ATOMIC_RELAXED);
        if (pthread_create(&tid, &attr, helper, j) != 0) __atomic_sub_fetch(&j->refs, 1, __ATOMIC_RELAXED);
    }
    pthread_attr_destroy(&attr);
    work(j);
    while (__atomic_load_n(&j->done, __ATOMIC_ACQUIRE) < W) sched_yield();   /* a helper's last chunk */
    release(j);
    return (int)nt;
}

/* one MFMA (record R) for wave w alone: the native block engine (cgen.py) calls it from its generated
   runs, wave by wave in program order among the wave's other instructions */
void mfma_wave(const int64_t *R, int64_t w) { wave_mfma((const Rec *)R, w); }

/* int64 fields of a record (Rec): checked against native.REC when the library is loaded */
int mfma_rec_fields(void) { return (int)(sizeof(Rec) / sizeof(int64_t)); }
"""

REC = 32              # int64 fields of one MFMA record (the C source's Rec)
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


def build_library(src: str, stem: str, flags: list[str], what: str) -> tuple[ctypes.CDLL | None, str]:
    """Compile the C source ``src`` into a shared library with the host C compiler and load it:
    ``(library, "")``, or ``(None, why not)``.  Cached as ``cache_dir() / "emu-native" / STEM_KEY.so``,
    the key a hash of the source, compiler, flags and host CPU (``-march=native`` builds for it);
    ``what`` names the library in the reason a build fails."""
    cc = _compiler()
    if cc is None:
        return None, "no C compiler on PATH (cc, gcc, clang, clang-22, clang-19 or $CC)"
    from isagen.objects.cache import cache_dir
    key = hashlib.sha256((src + cc + " ".join(flags) + _cpu_id()).encode()).hexdigest()[:16]
    out_dir = cache_dir() / "emu-native"
    so = out_dir / f"{stem}_{key}.so"
    if not so.exists():
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                c_file = Path(tmp) / f"{stem}.c"
                c_file.write_text(src)
                tmp_so = Path(tmp) / so.name
                r = subprocess.run([cc, *flags, str(c_file), "-o", str(tmp_so)], capture_output=True, text=True,
                                   timeout=120)
                if r.returncode != 0:
                    return None, f"{cc} failed: {r.stderr.strip()[:300]}"
                os.replace(tmp_so, so)       # atomic: concurrent builders leave one complete file
        except (OSError, subprocess.SubprocessError) as e:
            return None, f"building {what} failed: {e}"
    try:
        return ctypes.CDLL(str(so)), ""
    except OSError as e:
        return None, f"loading {so} failed: {e}"


def _build() -> ctypes.CDLL | None:
    global _why
    if os.environ.get("ISAGEN_EMU_NATIVE", "1") == "0":
        _why = "disabled by ISAGEN_EMU_NATIVE=0"
        return None
    # -ffp-contract=fast: a product and its add become one fused multiply-add (the same bits: every
    # product is exact); no fast-math, so the order of the sum stays k order
    flags = ["-O3", "-march=native", "-fPIC", "-shared", "-pthread", "-fno-fast-math", "-ffp-contract=fast",
             "-std=gnu99"]
    lib, _why = build_library(_SRC, "mfma", flags, "the native MFMA kernel")
    if lib is None:
        return None
    so = lib._name
    if lib.mfma_rec_fields() != REC:
        _why = f"{so}: records of {lib.mfma_rec_fields()} fields, native.py writes {REC}"
        return None
    run = lib.mfma_run
    run.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_int64]
    run.restype = ctypes.c_int
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


def wave_function() -> int:
    """The address of the C function ``mfma_wave(const int64_t *record, int64_t wave)`` (one MFMA of
    :func:`run`'s records for one wave), for generated code that calls it; 0 without the library."""
    lib = library()
    return 0 if lib is None else ctypes.cast(lib.mfma_wave, ctypes.c_void_p).value or 0


def why_not() -> str:
    """Why the native kernel is not in use ('' when it is)."""
    library()
    return _why


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]      # the address of a[0, ...] (faster than a.ctypes.data)


def threads() -> int:
    """Threads the kernel may use: ``$ISAGEN_EMU_THREADS`` if set, else the CPUs this process may run on."""
    env = os.environ.get("ISAGEN_EMU_THREADS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            from isagen.errors import IsagenError
            raise IsagenError(f"ISAGEN_EMU_THREADS must be a whole number of threads, got {env!r}") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# a thread is started only for this many wave-MFMAs or more (starting one costs ~20-50 us; a
# 32x32x8 wave-MFMA ~0.3 us)
MIN_THREAD_WORK = 256


def run(rec: np.ndarray, W: int, chunk: int, nthreads: int | None = None, min_waves: int | None = None) -> int:
    """Run the MFMAs of ``rec`` (``int64[n, REC]`` records, see the C source) in program order for each of
    the waves 0..W-1: all of them for ``chunk`` waves, then for the next ``chunk``, on up to ``nthreads``
    threads (default :func:`threads`), each taking a contiguous range of at least ``min_waves`` waves
    (default: enough for MIN_THREAD_WORK wave-MFMAs).  Returns the number of threads used."""
    lib = library()
    assert lib is not None and rec.dtype == np.int64 and rec.flags.c_contiguous and rec.shape[1] == REC
    n = rec.shape[0]
    if min_waves is None:
        min_waves = -(-MIN_THREAD_WORK // max(n, 1))
    return lib.mfma_run(n, address(rec), W, chunk, threads() if nthreads is None else nthreads, min_waves)
