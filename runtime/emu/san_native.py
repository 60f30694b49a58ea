"""The sanitizer's LDS race shadow in C: the common LDS access in one call instead of ~25 numpy operations.

``Sanitizer.lds_access`` spends most of a sanitized GEMM's time on bookkeeping that finds nothing: for
every ``ds_read``/``ds_write`` of every wave it works out each wave's span of words, asks the
per-workgroup boxes and 64-word block map whether a stamp of this barrier generation can lie there,
grows the boxes, and for writes stamps every word (and checks that no two waves of the instruction
write one word).  This module does exactly that for the common access (every
lane active, whole aligned words, no LDS DMA anywhere in the batch, not an atomic) in one C call, and
answers "nothing to report" or "look closer": in the second case nothing of the shadow has been
changed (a write that found two waves writing one word puts back the stamps it replaced) and
the Python path runs as before, so every report is made by the same code, with the same text.

The library is built once per machine with the host C compiler (the one native.py finds) and cached
beside the native MFMA kernel.  ``ISAGEN_EMU_SAN_NATIVE=0`` (or no compiler) keeps the numpy path;
``tests/runtime/emu/test_emu_sanitizer_native.py`` checks both give the same reports and state.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

_SRC = r"""
#include <stdint.h>

#define BIG (((int64_t)1) << 62)

/* Per row (one wave of the access): workgroup, first and last word of its span, stamp; -1 when an
   address is not word-aligned or a word lies outside the workgroup's LDS (the Python path decides). */
static int prep(int64_t R, const int64_t *a, const int64_t *waves, const int64_t *wg, const int64_t *wiw,
                const int32_t *gen, int64_t LW, int64_t nw, int64_t idx,
                int64_t *g_out, int64_t *lo, int64_t *hi, int64_t *me_out, int64_t *w0)
{
    for (int64_t r = 0; r < R; r++) {
        const int64_t w = waves[r];
        const int64_t g = wg[w];
        const int64_t *ar = a + r * 64;
        int64_t mn = ar[0], mx = ar[0], bad = 0;
        for (int l = 0; l < 64; l++) {
            const int64_t x = ar[l];
            bad |= x & 3;
            mn = x < mn ? x : mn;
            mx = x > mx ? x : mx;
        }
        if (bad || mn < 0 || (mx >> 2) + nw - 1 >= LW)
            return -1;
        const int64_t base = g * LW;
        for (int l = 0; l < 64; l++)
            w0[r * 64 + l] = (ar[l] >> 2) + base;
        g_out[r] = g;
        lo[r] = (mn >> 2) + base;
        hi[r] = (mx >> 2) + (nw - 1) + base;
        me_out[r] = ((int64_t)gen[g] << 32) | (idx << 10) | (0xF << 6) | wiw[w];
    }
    return 0;
}

/* Sanitizer._may_hit: a stamp of the current generation of a row's workgroup may lie in its span */
static int may_hit(int64_t R, const int64_t *g, const int64_t *lo, const int64_t *hi, const int32_t *gen,
                   const int64_t *bgen, const int64_t *blo, const int64_t *bhi)
{
    for (int64_t r = 0; r < R; r++) {
        const int64_t k = g[r];
        if (bgen[k] == (int64_t)gen[k] && lo[r] <= bhi[k] && hi[r] >= blo[k])
            return 1;
    }
    return 0;
}

/* ... and the block map: a block of a lane's words was written in the current generation */
static int block_hit(int64_t R, const int64_t *a, const int64_t *g, const int32_t *gen, const int64_t *wblk,
                     int64_t NB, int64_t nbytes)
{
    for (int64_t r = 0; r < R; r++) {
        const int64_t base = g[r] * NB, gv = gen[g[r]];
        for (int l = 0; l < 64; l++) {
            const int64_t x = a[r * 64 + l];
            if (wblk[base + (x >> 8)] == gv)
                return 1;
            if (nbytes > 4 && wblk[base + ((x + nbytes - 1) >> 8)] == gv)
                return 1;
        }
    }
    return 0;
}

/* Sanitizer._box_add */
static void box_add(int64_t R, const int64_t *g, const int64_t *lo, const int64_t *hi, const int32_t *gen,
                    int64_t *bgen, int64_t *blo, int64_t *bhi)
{
    for (int64_t r = 0; r < R; r++) {
        const int64_t k = g[r];
        if (bgen[k] != (int64_t)gen[k]) {
            bgen[k] = gen[k];
            blo[k] = BIG;
            bhi[k] = -1;
        }
        if (lo[r] < blo[k])
            blo[k] = lo[r];
        if (hi[r] > bhi[k])
            bhi[k] = hi[r];
    }
}

/* Whether no two rows can write one word: the rows of a workgroup are consecutive and their spans of
   words [lo, hi] pairwise apart (rows of different workgroups never share a word) */
static int spans_apart(int64_t R, const int64_t *g, const int64_t *lo, const int64_t *hi)
{
    for (int64_t r0 = 0, r1; r0 < R; r0 = r1) {
        for (r1 = r0 + 1; r1 < R && g[r1] == g[r0]; r1++)
            ;
        if (r1 < R && g[r1] < g[r0])
            return 0;
        for (int64_t x = r0; x < r1; x++)
            for (int64_t y = x + 1; y < r1; y++)
                if (lo[x] <= hi[y] && lo[y] <= hi[x])
                    return 0;
    }
    return 1;
}

/* A read.  0: nothing written in this generation can lie in its words: the read-box grown and the
   outputs filled for its record; 1: look closer (nothing changed); -1: not the common case. */
int64_t san_lds_read(int64_t R, const int64_t *a, const int64_t *waves, const int64_t *wg, const int64_t *wiw,
                     const int32_t *gen, int64_t LW, int64_t NB, int64_t nw, int64_t nbytes, int64_t idx,
                     const int64_t *wbgen, const int64_t *wblo, const int64_t *wbhi, const int64_t *wblk,
                     int64_t *rbgen, int64_t *rblo, int64_t *rbhi,
                     int64_t *g_out, int64_t *lo, int64_t *hi, int64_t *me_out, int64_t *w0,
                     uint32_t *V, int64_t W, int64_t vreg, const uint32_t *lds)
{
    if (prep(R, a, waves, wg, wiw, gen, LW, nw, idx, g_out, lo, hi, me_out, w0))
        return -1;
    if (may_hit(R, g_out, lo, hi, gen, wbgen, wblo, wbhi) && block_hit(R, a, g_out, gen, wblk, NB, nbytes))
        return 1;
    box_add(R, g_out, lo, hi, gen, rbgen, rblo, rbhi);
    if (vreg >= 0) {
        /* and the read itself (every lane active, whole words): V[vreg + k][wave][lane] = LDS word
           w0 + k (w0 already counts the workgroup's base) */
        for (int64_t k = 0; k < nw; k++)
            for (int64_t r = 0; r < R; r++) {
                uint32_t *dst = V + ((vreg + k) * W + waves[r]) * 64;
                const int64_t *src = w0 + r * 64;
                for (int l = 0; l < 64; l++)
                    dst[l] = lds[src[l] + k];
            }
    }
    return 0;
}

/* A write.  0: no other wave wrote (Sanitizer._checked_write's other_w) or may have read (the read-box)
   its words in this generation and no two waves of the access write one word: the words stamped, the
   write-box and block map updated; 1: a read of this generation may lie there, 2: another wave wrote
   one of its words in this generation, or two of its waves write one word: look closer (nothing
   changed); -1: not the common case.  ``saved``: room for the n * nw stamps the write replaces. */
int64_t san_lds_write(int64_t R, const int64_t *a, const int64_t *waves, const int64_t *wg, const int64_t *wiw,
                      const int32_t *gen, int64_t LW, int64_t NB, int64_t nw, int64_t nbytes, int64_t idx,
                      int64_t *wbgen, int64_t *wblo, int64_t *wbhi, int64_t *wblk,
                      const int64_t *rbgen, const int64_t *rblo, const int64_t *rbhi,
                      int64_t *restrict wr_stamp, int64_t *restrict saved,
                      int64_t *g_out, int64_t *lo, int64_t *hi, int64_t *me_out, int64_t *w0,
                      const uint32_t *V, int64_t W, int64_t vreg, uint32_t *lds)
{
    if (prep(R, a, waves, wg, wiw, gen, LW, nw, idx, g_out, lo, hi, me_out, w0))
        return -1;
    if (may_hit(R, g_out, lo, hi, gen, rbgen, rblo, rbhi))
        return 1;
    const int64_t n = R * 64;
    /* another wave's write of this generation may lie here: look (same generation, other wave) */
    const int chk_w = may_hit(R, g_out, lo, hi, gen, wbgen, wblo, wbhi)
                      && block_hit(R, a, g_out, gen, wblk, NB, nbytes);
    const int64_t keep_gen_wave = (int64_t)~0xFFFFFFE0LL;
    /* one pass: each word's stamp saved and replaced (so that the shadow can be put back: in reverse
       order, a word written twice ends with the value it had) */
    for (int64_t i = 0; i < n; i++) {
        const int64_t me = me_out[i >> 6];
        for (int64_t k = 0; k < nw; k++) {
            int64_t *p = wr_stamp + w0[i] + k;
            const int64_t old = *p;
            if (chk_w && (uint64_t)(((old ^ me) & keep_gen_wave) - 1) < 31) {
                for (int64_t j = i * nw + k - 1; j >= 0; j--)
                    wr_stamp[w0[j / nw] + j % nw] = saved[j];
                return 2;
            }
            saved[i * nw + k] = old;
            *p = me;
        }
    }
    if (R > 1 && !spans_apart(R, g_out, lo, hi)) {
        /* two waves of the access wrote one word: its stamp is not every writer's; put the shadow back */
        int dup = 0;
        for (int64_t i = 0; i < n && !dup; i++) {
            const int64_t me = me_out[i >> 6];
            for (int64_t k = 0; k < nw; k++)
                dup |= wr_stamp[w0[i] + k] != me;
        }
        if (dup) {
            for (int64_t j = n * nw - 1; j >= 0; j--)
                wr_stamp[w0[j / nw] + j % nw] = saved[j];
            return 2;
        }
    }
    box_add(R, g_out, lo, hi, gen, wbgen, wblo, wbhi);
    for (int64_t r = 0; r < R; r++) {
        const int64_t base = g_out[r] * NB, gv = gen[g_out[r]];
        for (int l = 0; l < 64; l++) {
            const int64_t x = a[r * 64 + l];
            wblk[base + (x >> 8)] = gv;
            if (nbytes > 4)
                wblk[base + ((x + nbytes - 1) >> 8)] = gv;
        }
    }
    if (vreg >= 0) {
        /* and the write itself (every lane active, whole words), in the numpy path's order (wave, lane,
           word: where two lanes write one word, the later one's value stays) */
        for (int64_t r = 0; r < R; r++)
            for (int l = 0; l < 64; l++) {
                const int64_t f = w0[r * 64 + l];
                for (int64_t k = 0; k < nw; k++)
                    lds[f + k] = V[((vreg + k) * W + waves[r]) * 64 + l];
            }
    }
    return 0;
}
"""

_lib = None
_tried = False
_why = ""


def _build():
    global _why
    if os.environ.get("ISAGEN_EMU_SAN_NATIVE", "1") == "0":
        _why = "disabled by ISAGEN_EMU_SAN_NATIVE=0"
        return None
    from isagen.runtime.emu import native
    lib, _why = native.build_library(_SRC, "sanlds", ["-O3", "-march=native", "-fPIC", "-shared", "-std=gnu99"],
                                     "the sanitizer's LDS library")
    if lib is None:
        return None
    P, L = ctypes.c_void_p, ctypes.c_int64
    lib.san_lds_write.argtypes = [L] + [P] * 5 + [L] * 5 + [P] * 14 + [P, L, L, P]
    lib.san_lds_read.argtypes = [L] + [P] * 5 + [L] * 5 + [P] * 12 + [P, L, L, P]
    lib.san_lds_write.restype = lib.san_lds_read.restype = L
    return lib


def library():
    """The loaded library, built on first use; None where it cannot be had (see :func:`why_not`)."""
    global _lib, _tried
    if not _tried:
        _tried = True
        _lib = _build()
    return _lib


def why_not() -> str:
    library()
    return _why


def _p(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class LdsShadow:
    """The C calls for one sanitizer (one batch): the addresses of its arrays, taken once."""

    def __init__(self, san, st):
        self.lib = library()
        self.san = san
        W = st.W
        self.all_waves = np.arange(W, dtype=np.int64)
        self._st = (_p(st.wg), _p(st.wave_in_wg), _p(san.gen))
        assert st.wg.dtype == np.int64 and st.wave_in_wg.dtype == np.int64 and san.gen.dtype == np.int32
        wb, rb = san.wbox, san.rbox
        self._wbox = tuple(_p(x) for x in wb)
        self._rbox = tuple(_p(x) for x in rb)
        self._wblk = _p(san.wblk)
        self._wr = _p(san.wr_stamp)
        self._saved_arr = np.empty(W * 64 * 4, np.int64)    # the stamps a write replaces (16 bytes a lane at most)
        self._saved = _p(self._saved_arr)
        self.LW, self.NB = san.LW, san.NB
        # the batch's registers and LDS (allocated once per batch: wave.Batch), for accesses made here
        assert st.V.dtype == np.uint32 and st.V.flags.c_contiguous and st.lds.flags.c_contiguous
        self._vl = (_p(st.V), W, _p(st.lds))
        self._lohi = np.empty((2, W), np.int64)         # scratch: each wave's span (not kept)

    def access(self, waves: np.ndarray, a: np.ndarray, nbytes: int, idx: int, write: bool, st=None,
               vgpr: int = -1):
        """(code, g, lo, hi, me, w0) for the common access (see the C source); ``a`` int64 [R, 64].  With
        ``vgpr`` >= 0 the access is also made when the code is 0: a read's words moved into the VGPRs
        ``vgpr``... of the batch ``st``, a write's from them into its LDS."""
        R = waves.shape[0]
        if nbytes > 16:
            return -1, None, None, None, None, None
        a = np.ascontiguousarray(a, np.int64)
        g = np.empty(R, np.int64)
        lo, hi = self._lohi[0, :R], self._lohi[1, :R]
        me = np.empty(R, np.int64)
        w0 = np.empty((R, 64), np.int64)
        wg, wiw, gen = self._st
        move = (self._vl[0], self._vl[1], vgpr, self._vl[2]) if vgpr >= 0 else (None, 0, -1, None)
        if write:
            code = self.lib.san_lds_write(R, _p(a), _p(waves), wg, wiw, gen, self.LW, self.NB, nbytes // 4, nbytes,
                                          idx, *self._wbox, self._wblk, *self._rbox, self._wr, self._saved,
                                          _p(g), _p(lo), _p(hi), _p(me), _p(w0), *move)
        else:
            code = self.lib.san_lds_read(R, _p(a), _p(waves), wg, wiw, gen, self.LW, self.NB, nbytes // 4, nbytes,
                                         idx, *self._wbox, self._wblk, *self._rbox,
                                         _p(g), _p(lo), _p(hi), _p(me), _p(w0), *move)
        return code, g, lo, hi, me, w0


__all__ = ["LdsShadow", "library", "why_not"]
