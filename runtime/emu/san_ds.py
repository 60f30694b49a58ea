"""LDS instructions inside the sanitized native runs (san_cgen.SanPlan): the race shadow's common access in
the generated C, per workgroup.

Without this, every DS instruction under the sanitizer ends a native run and goes through its numpy
handler and ``Sanitizer.lds_access`` (one C call of san_native.py over all waves for the common access).
Here a sanitized run holds the DS instructions cgen covers (``ds_read/write_b32..b128``,
``ds_read2/write2[st64]_b32/b64``), and its C makes, for each workgroup, what san_native's fast path
makes for the access: each wave's span of words, the per-workgroup boxes and 64-word block map of the
current barrier generation, another wave's write stamp in the words written, two waves of the
instruction writing one word, then the stamps, boxes and block map, and the access itself (cgen's
code).  Where that path would answer "look closer", or the access is not its common case (a lane
inactive, a misaligned address, an LDS DMA write in the batch, an ``lds_observer``), the run stops
before the instruction in that workgroup, as it does for an access out of range, having changed
nothing of the instruction: the numpy handlers (instrumented: ``lds_access`` with every report) then
run it and the rest of the run for those waves.  Workgroups share no LDS and no shadow word, so
deciding per workgroup gives the reports and state deciding over all waves gives.

After the call the records the per-instruction path keeps are made from what the C wrote: for each
access, the words of every wave that made it in C and its stamp (``unstamped_reads`` and
``inflight_reads`` for reads, ``pending_lds`` for writes), with the ``lgkmcnt`` sequence number it would
have had.  The run's handler makes all its instructions' checks and records first (``issue()`` advances
``issued["lds"]``), so the sequence numbers come from the counts at the run's entry plus the
instruction's place in the run, and the numpy handlers after a stop see the counts as they were at
that instruction.  The reports of the checks (made first) and of the numpy handlers (after the call)
are put back in the per-instruction order: by instruction, the checks' before the access's.
"""

from __future__ import annotations

import sys

import numpy as np

from isagen.runtime.emu import native
from isagen.runtime.emu.sanitizer import _Words

# the fields of the parameter block the generated DS code reads at recs - SP_N (sd_* in _SRC)
(SP_MODE, SP_WR, SP_WBG, SP_WBL, SP_WBH, SP_RBG, SP_RBL, SP_RBH, SP_WBLK, SP_GEN, SP_WIW, SP_LW, SP_NB,
 SP_SAVED, SP_W0, SP_ME, SP_NALL, SP_WS0, SP_WG, SP_SPAN, SP_N) = range(21)
SAVE_PER_WAVE = 2 * 4 * 64       # (word, old stamp) for up to 4 words a lane (b128, or a pair of b64)

# modes of a call: the common LDS checks in C; no shadow at all (one wave per workgroup: lds_access
# records nothing); every DS instruction to the numpy handlers
MODE_PLAIN, MODE_SHADOW, MODE_STOP = 0, 1, 2

_SRC = r"""
/* ---- the sanitizer's LDS shadow for a DS instruction of a sanitized run, one workgroup (san_ds.py) ---- */
enum { SP_MODE, SP_WR, SP_WBG, SP_WBL, SP_WBH, SP_RBG, SP_RBL, SP_RBH, SP_WBLK, SP_GEN, SP_WIW, SP_LW, SP_NB,
       SP_SAVED, SP_W0, SP_ME, SP_NALL, SP_WS0, SP_WG, SP_SPAN, SP_N };
#define SD_BIG (((I64)1) << 62)
#define SD_KEEP_GEN_WAVE ((I64)~0xFFFFFFE0LL)

/* the words of a wave's 64 lanes: in 32 bits, which the compiler vectorises (it does not where the
   arrays may overlap, hence the restrict parameters): every address plus the offset is below LW * 4
   (sd_prep checks it first) and every word below 2^31 (san_ds._mode) */
static inline void sd_words(int32_t *restrict wr, const U32 *restrict ad, U32 off, U32 base)
{
    for (int l = 0; l < 64; l++)
        wr[l] = (int32_t)(((ad[l] + off) >> 2) + base);
}

/* each wave's words (record rec: w0 [pos][64], stamp me [pos]) and span (element e: g, lo, hi [pos]);
   1 when a lane is misaligned or past the workgroup's words (not the common case) */
static int sd_prep(const I64 *sp, I64 W, const I64 *ws, I64 k0, I64 k1, const U32 *V, I64 ai, I64 off,
                   I64 nw, I64 idx, I64 rec, I64 e)
{
    const I64 LW = sp[SP_LW], nall = sp[SP_NALL], p0 = ws - (const I64 *)(intptr_t)sp[SP_WS0];
    const I64 *wg = (const I64 *)(intptr_t)sp[SP_WG], *wiw = (const I64 *)(intptr_t)sp[SP_WIW];
    const int32_t *gen = (const int32_t *)(intptr_t)sp[SP_GEN];
    int32_t *w0 = (int32_t *)(intptr_t)sp[SP_W0] + (rec * nall + p0) * 64;
    I64 *me = (I64 *)(intptr_t)sp[SP_ME] + rec * nall + p0;
    I64 *g = (I64 *)(intptr_t)sp[SP_SPAN] + 3 * e * nall + p0, *lo = g + nall, *hi = g + 2 * nall;
    for (I64 k = k0; k < k1; k++) {
        const I64 w = ws[k], gw = wg[w];
        const U32 *ad = V + (ai * W + w) * 64;
        I64 mn = (I64)ad[0] + off, mx = mn, bad = 0;
        for (int l = 0; l < 64; l++) {
            const I64 x = (I64)ad[l] + off;
            bad |= x & 3;
            mn = x < mn ? x : mn;
            mx = x > mx ? x : mx;
        }
        if (bad || mn < 0 || (mx >> 2) + nw - 1 >= LW)
            return 1;
        const U32 base = (U32)(gw * LW);
        sd_words(w0 + k * 64, ad, (U32)off, base);
        g[k] = gw;
        lo[k] = (mn >> 2) + (I64)base;
        hi[k] = (mx >> 2) + nw - 1 + (I64)base;
        me[k] = ((I64)gen[gw] << 32) | (idx << 10) | (0xF << 6) | wiw[w];
    }
    return 0;
}

/* Sanitizer._may_hit over the rows k0..k1 of element e */
static int sd_may_hit(const I64 *sp, const I64 *ws, I64 k0, I64 k1, I64 e, int which)
{
    const I64 nall = sp[SP_NALL], p0 = ws - (const I64 *)(intptr_t)sp[SP_WS0];
    const I64 *g = (const I64 *)(intptr_t)sp[SP_SPAN] + 3 * e * nall + p0, *lo = g + nall, *hi = g + 2 * nall;
    const int32_t *gen = (const int32_t *)(intptr_t)sp[SP_GEN];
    const I64 *bg = (const I64 *)(intptr_t)sp[which], *bl = (const I64 *)(intptr_t)sp[which + 1],
              *bh = (const I64 *)(intptr_t)sp[which + 2];
    for (I64 k = k0; k < k1; k++) {
        const I64 q = g[k];
        if (bg[q] == (I64)gen[q] && lo[k] <= bh[q] && hi[k] >= bl[q])
            return 1;
    }
    return 0;
}

/* the block map: a 64-word block of a lane's words (first and last) was written in this generation */
static int sd_block_hit(const I64 *sp, const I64 *ws, I64 k0, I64 k1, I64 nw, I64 rec, I64 e)
{
    const I64 nall = sp[SP_NALL], p0 = ws - (const I64 *)(intptr_t)sp[SP_WS0], LW = sp[SP_LW], NB = sp[SP_NB];
    const I64 *g = (const I64 *)(intptr_t)sp[SP_SPAN] + 3 * e * nall + p0;
    const int32_t *w0 = (const int32_t *)(intptr_t)sp[SP_W0] + (rec * nall + p0) * 64;
    const int32_t *gen = (const int32_t *)(intptr_t)sp[SP_GEN];
    const I64 *wblk = (const I64 *)(intptr_t)sp[SP_WBLK];
    for (I64 k = k0; k < k1; k++) {
        const I64 base = g[k] * NB, gv = gen[g[k]], wb = g[k] * LW;
        const int32_t *wr = w0 + k * 64;
        for (int l = 0; l < 64; l++) {
            const I64 x = wr[l] - wb;
            if (wblk[base + (x >> 6)] == gv || (nw > 1 && wblk[base + ((x + nw - 1) >> 6)] == gv))
                return 1;
        }
    }
    return 0;
}

/* Sanitizer._box_add (and for writes the block map) over the rows k0..k1 of element e */
static void sd_commit(const I64 *sp, const I64 *ws, I64 k0, I64 k1, I64 nw, I64 rec, I64 e, int which)
{
    const I64 nall = sp[SP_NALL], p0 = ws - (const I64 *)(intptr_t)sp[SP_WS0];
    const I64 *g = (const I64 *)(intptr_t)sp[SP_SPAN] + 3 * e * nall + p0, *lo = g + nall, *hi = g + 2 * nall;
    const int32_t *gen = (const int32_t *)(intptr_t)sp[SP_GEN];
    I64 *bg = (I64 *)(intptr_t)sp[which], *bl = (I64 *)(intptr_t)sp[which + 1], *bh = (I64 *)(intptr_t)sp[which + 2];
    for (I64 k = k0; k < k1; k++) {
        const I64 q = g[k];
        if (bg[q] != (I64)gen[q]) {
            bg[q] = gen[q];
            bl[q] = SD_BIG;
            bh[q] = -1;
        }
        if (lo[k] < bl[q]) bl[q] = lo[k];
        if (hi[k] > bh[q]) bh[q] = hi[k];
    }
    if (which != SP_WBG)
        return;
    const I64 LW = sp[SP_LW], NB = sp[SP_NB];
    const int32_t *w0 = (const int32_t *)(intptr_t)sp[SP_W0] + (rec * nall + p0) * 64;
    I64 *wblk = (I64 *)(intptr_t)sp[SP_WBLK];
    for (I64 k = k0; k < k1; k++) {
        const I64 base = g[k] * NB, gv = gen[g[k]], wb = g[k] * LW;
        const int32_t *wr = w0 + k * 64;
        for (int l = 0; l < 64; l++) {
            const I64 x = wr[l] - wb;
            wblk[base + (x >> 6)] = gv;
            if (nw > 1)
                wblk[base + ((x + nw - 1) >> 6)] = gv;
        }
    }
}

/* whether, within each workgroup, the spans of the elements e0..e1 of one wave are apart from those of
   every other wave (rows of a workgroup consecutive; 0 when they are not) */
static int sd_apart(const I64 *sp, const I64 *ws, I64 k0, I64 k1, I64 e0, I64 e1)
{
    const I64 nall = sp[SP_NALL], p0 = ws - (const I64 *)(intptr_t)sp[SP_WS0];
    const I64 *sb = (const I64 *)(intptr_t)sp[SP_SPAN] + p0, *g = sb;
    for (I64 r0 = k0, r1; r0 < k1; r0 = r1) {
        for (r1 = r0 + 1; r1 < k1 && g[r1] == g[r0]; r1++)
            ;
        if (r1 < k1 && g[r1] < g[r0])
            return 0;
        for (I64 e = e0; e < e1; e++)
            for (I64 f = e0; f < e1; f++) {
                const I64 *lo = sb + (3 * e + 1) * nall, *hi = sb + (3 * e + 2) * nall;
                const I64 *lo2 = sb + (3 * f + 1) * nall, *hi2 = sb + (3 * f + 2) * nall;
                for (I64 x = r0; x < r1; x++)
                    for (I64 y = r0; y < r1; y++)
                        if (x != y && lo[x] <= hi2[y] && lo2[y] <= hi[x])
                            return 0;
            }
    }
    return 1;
}

static void sd_undo(I64 *wr, const I64 *sv, I64 n)
{
    for (I64 j = n - 1; j >= 0; j--)
        wr[sv[2 * j]] = sv[2 * j + 1];
}

/* every lane of the rows' waves active (EXEC does not change inside a sanitized run) */
static int sd_all_active(const uint8_t *EX, const I64 *ws, I64 k0, I64 k1)
{
    for (I64 k = k0; k < k1; k++) {
        const uint8_t *ex = EX + ws[k] * 64;
        int all = 1;
        for (int l = 0; l < 64; l++) all &= ex[l];
        if (!all) return 0;
    }
    return 1;
}

/* A DS read of nel elements (offsets o0, o1) by the rows k0..k1: 0 when nothing written in this
   generation can lie in its words (its read-boxes grown, its records made), 1: look closer (nothing
   changed) */
static int sd_read(const I64 *sp, I64 W, const I64 *ws, I64 k0, I64 k1, const U32 *V, I64 ai, I64 nel,
                   I64 o0, I64 o1, I64 nw, I64 idx, I64 rec0)
{
    for (I64 e = 0; e < nel; e++)
        if (sd_prep(sp, W, ws, k0, k1, V, ai, e ? o1 : o0, nw, idx, rec0 + e, e))
            return 1;
    for (I64 e = 0; e < nel; e++)
        if (sd_may_hit(sp, ws, k0, k1, e, SP_WBG) && sd_block_hit(sp, ws, k0, k1, nw, rec0 + e, e))
            return 1;
    for (I64 e = 0; e < nel; e++)
        sd_commit(sp, ws, k0, k1, nw, rec0 + e, e, SP_RBG);
    return 0;
}

/* A DS write: 0 when no other wave wrote (or may have read) its words in this generation and no two
   waves write one word (each element checked after the one before it is stamped, as lds_access makes
   them): the words stamped, boxes and block map grown, records made; 1: look closer (nothing changed) */
static int sd_write(const I64 *sp, I64 W, const I64 *ws, I64 k0, I64 k1, const U32 *V, I64 ai, I64 nel,
                    I64 o0, I64 o1, I64 nw, I64 idx, I64 rec0)
{
    for (I64 e = 0; e < nel; e++)
        if (sd_prep(sp, W, ws, k0, k1, V, ai, e ? o1 : o0, nw, idx, rec0 + e, e))
            return 1;
    for (I64 e = 0; e < nel; e++)
        if (sd_may_hit(sp, ws, k0, k1, e, SP_RBG))
            return 1;
    const I64 nall = sp[SP_NALL], p0 = ws - (const I64 *)(intptr_t)sp[SP_WS0];
    I64 *wr = (I64 *)(intptr_t)sp[SP_WR];
    /* no write of this generation in any element's words, and no wave's words among another's (of any
       element): the checks below cannot find anything, so the stamps alone (a wave's later element over
       its own earlier one is no conflict) */
    /* (the first element's answer also decides whether the careful loop below checks its stamps) */
    const int hit0 = sd_may_hit(sp, ws, k0, k1, 0, SP_WBG) && sd_block_hit(sp, ws, k0, k1, nw, rec0, 0);
    int clear = !hit0;
    for (I64 e = 1; e < nel && clear; e++)
        clear = !(sd_may_hit(sp, ws, k0, k1, e, SP_WBG) && sd_block_hit(sp, ws, k0, k1, nw, rec0 + e, e));
    if (clear && (k1 - k0 < 2 || sd_apart(sp, ws, k0, k1, 0, nel))) {
        for (I64 e = 0; e < nel; e++) {
            const int32_t *w0 = (const int32_t *)(intptr_t)sp[SP_W0] + ((rec0 + e) * nall + p0) * 64;
            const I64 *me = (const I64 *)(intptr_t)sp[SP_ME] + (rec0 + e) * nall + p0;
            for (I64 k = k0; k < k1; k++) {
                const I64 m = me[k];
                const int32_t *wk = w0 + k * 64;
                for (int l = 0; l < 64; l++)
                    for (I64 j = 0; j < nw; j++)
                        wr[wk[l] + j] = m;
            }
        }
        for (I64 e = 0; e < nel; e++)
            sd_commit(sp, ws, k0, k1, nw, rec0 + e, e, SP_WBG);
        return 0;
    }
    I64 *sv = (I64 *)(intptr_t)sp[SP_SAVED] + (p0 + k0) * 512;
    I64 ns = 0;
    for (I64 e = 0; e < nel; e++) {
        const int32_t *w0 = (const int32_t *)(intptr_t)sp[SP_W0] + ((rec0 + e) * nall + p0) * 64;
        const I64 *me = (const I64 *)(intptr_t)sp[SP_ME] + (rec0 + e) * nall + p0;
        /* another wave's write of this generation may lie here: look at the stamps (the second element
           always: the first one's stamps are not in the boxes yet) */
        const int chk_w = e > 0 || hit0;
        /* (a single element with nothing to check and the waves apart took the stamps-alone path above) */
        const int apart = k1 - k0 < 2 || sd_apart(sp, ws, k0, k1, e, e + 1);
        for (I64 k = k0; k < k1; k++) {
            const I64 m = me[k];
            const int32_t *wk = w0 + k * 64;
            for (int l = 0; l < 64; l++)
                for (I64 j = 0; j < nw; j++) {
                    const I64 f = (I64)wk[l] + j;
                    const I64 old = wr[f];
                    if (chk_w && (U64)(((old ^ m) & SD_KEEP_GEN_WAVE) - 1) < 31) {
                        sd_undo(wr, sv, ns);
                        return 1;
                    }
                    sv[2 * ns] = f;
                    sv[2 * ns + 1] = old;
                    ns++;
                    wr[f] = m;
                }
        }
        if (!apart) {
            /* two waves of the access wrote one word: its stamp is not every writer's */
            for (I64 k = k0; k < k1; k++) {
                const I64 m = me[k];
                const int32_t *wk = w0 + k * 64;
                for (int l = 0; l < 64; l++)
                    for (I64 j = 0; j < nw; j++)
                        if (wr[wk[l] + j] != m) {
                            sd_undo(wr, sv, ns);
                            return 1;
                        }
            }
        }
    }
    for (I64 e = 0; e < nel; e++)
        sd_commit(sp, ws, k0, k1, nw, rec0 + e, e, SP_WBG);
    return 0;
}
"""


def source() -> str:
    return _SRC


class DsGen:
    """The C of a sanitized run's DS instructions (cgen._Run.ds_gen), numbering their elements' records."""

    def __init__(self):
        self.recs: list[tuple[int, bool, int]] = []     # per element record: (step in the run, write, words)

    def __call__(self, inst, ctx, k: int):
        from isagen.runtime.emu import cgen
        from isagen.runtime.emu.ops_ds import DsAddressing
        name = inst.name
        la = DsAddressing(inst, ctx)
        size, elems = cgen.ds_layout(name, la)
        nel = len(elems)
        o0, o1 = elems[0], elems[-1]
        write = name.startswith("ds_write")
        rec0 = len(self.recs)
        idx = ctx.pc_index.get(inst.pc, 0) & 0xFFFFF
        fn = "sd_write" if write else "sd_read"
        lines = [f"if (recs[-{SP_N} + {SP_MODE}]) {{",
                 f"    const I64 *sp = recs - {SP_N};",
                 f"    if (sp[{SP_MODE}] == {MODE_STOP} || !sd_all_active(EX, ws, k0, k1)",
                 f"        || {fn}(sp, W, ws, k0, k1, V, {la.ai}, {nel}, {o0}, {o1}, {size // 4}, {idx}, {rec0})) {{",
                 f"        counts[2] = k0; return {k};", "    }", "}"]
        r = cgen._ds(inst, ctx, k, lines)
        for _ in range(nel):
            self.recs.append((k, write, size // 4))
        return r


class DsHook:
    """A sanitized run's LDS side around its C call (cgen._handler's ``hook``): the parameter block, and
    after the call the records of the accesses the C made."""

    def __init__(self, run, gen: DsGen):
        self.records = gen.recs
        n = len(run.steps)
        self.before = lgkm_before(run.steps)
        # each record's lgkm sequence number past the entry count (its step's place among the issues)
        self.seq_off = np.array([self.before[j] + 1 for j, _, _ in self.records], np.int64)[:, None]
        self.nsteps = n
        self.iss0: np.ndarray | None = None
        self._w0: np.ndarray | None = None
        self._me: np.ndarray | None = None
        self._free: list[tuple[np.ndarray, np.ndarray]] = []
        self._mode = MODE_STOP

    def begin(self, st) -> None:
        """Before the run's checks: the lgkm counts at its entry."""
        san = st.san
        self.iss0 = san.issued["lds"].copy() if san is not None else None

    def _block(self, st, mrecs):
        """The per-batch parameter block (and the MFMA records after it)."""
        key = ("san_ds", id(self), id(mrecs))
        blk = st.native_calls.get(key)
        if blk is None:
            nm = 0 if mrecs is None else mrecs.size
            arr = np.zeros(SP_N + nm, np.int64)
            if mrecs is not None:
                arr[SP_N:] = mrecs.reshape(-1)
            san = st.san
            if san is not None:
                a = native.address
                ctx = _batch_shadow(st, san)
                arr[SP_WR] = a(san.wr_stamp)
                arr[SP_WBG:SP_WBH + 1] = [a(x) for x in san.wbox]
                arr[SP_RBG:SP_RBH + 1] = [a(x) for x in san.rbox]
                arr[SP_WBLK], arr[SP_GEN], arr[SP_WIW] = a(san.wblk), a(san.gen), a(ctx.wiw)
                arr[SP_LW], arr[SP_NB] = san.LW, san.NB
                arr[SP_SAVED], arr[SP_WG] = a(ctx.saved), a(ctx.wg)
            blk = st.native_calls[key] = (arr, mrecs)     # (mrecs kept alive with it)
        return blk[0]

    def _buffers(self, nr: int, n: int):
        """Room for the records of a call: a buffer of an earlier call no record refers to any more
        (the records are views of it: its reference count says), else a new one (fresh memory costs a
        page fault per 4 KiB)."""
        free = self._free
        for w0, me in free:
            # references: the list's tuple, the loop's name and getrefcount's argument
            if w0.shape == (nr, n, 64) and sys.getrefcount(w0) <= 3 and sys.getrefcount(me) <= 3:
                return w0, me
        pair = (np.empty((nr, n, 64), np.int32), np.empty((nr, n), np.int64))
        free.append(pair)
        if len(free) > 4:
            free.pop(0)
        return pair

    def recs(self, st, mrecs, wsa) -> int:
        arr = self._block(st, mrecs)
        mode = _mode(st)
        self._mode = mode
        arr[SP_MODE] = mode
        if mode == MODE_SHADOW:
            n = wsa.size
            nr = len(self.records)
            ctx = _batch_shadow(st, st.san)
            if ctx.span.size < 6 * n:
                ctx.grow(n)
            w0, me = self._w0, self._me = self._buffers(nr, n)
            a = native.address
            arr[SP_W0], arr[SP_ME], arr[SP_NALL], arr[SP_WS0] = a(w0), a(me), n, a(wsa)
            arr[SP_SPAN], arr[SP_SAVED] = a(ctx.span), a(ctx.saved)
        return native.address(arr) + 8 * SP_N

    def after(self, st, wsa, wg, bounds, res, stopped) -> None:
        """The records of the accesses the C made (before the numpy handlers make the rest)."""
        if self._mode != MODE_SHADOW:
            return
        san = st.san
        w0s, mes = self._w0, self._me
        self._w0 = self._me = None
        assert w0s is not None and mes is not None
        pos = None
        if stopped:
            from isagen.runtime.emu import cgen
            pos = cgen.stop_positions(wsa, wg, bounds, res, self.nsteps)
        iss0 = self.iss0
        assert iss0 is not None
        # (the waves' lgkm counts and workgroups, the same for every access of a call that did not stop)
        iss_all, wg_all = iss0[wsa], st.wg[wsa]
        seqs = list(iss_all + self.seq_off)         # every record's sequence numbers, in one operation
        for r, (j, write, nw) in enumerate(self.records):
            if pos is None:
                rows = None
                waves, seq, wg = wsa, seqs[r], wg_all
            else:
                rows = pos > j
                if not rows.any():
                    continue
                waves, seq, wg = wsa[rows], seqs[r][rows], wg_all[rows]
            w0 = w0s[r] if rows is None else w0s[r][rows]
            me = mes[r] if rows is None else mes[r][rows]
            words = w0 if nw == 1 else _Words(w0, nw)
            if write:
                san.pending_lds.append(("lds", waves, seq, words, None))
            else:
                me2 = me[:, None]
                san.unstamped_reads.append((words, me2, waves.size > 1, wg))
                san.inflight_reads.append((waves, seq, words, me2, None))


def lgkm_before(steps) -> list[int]:
    """The lgkm counts issue() adds for the steps before each step of a run (and for all of them, last)."""
    before = [0]
    for s in steps:
        also = bool(s.flags.get("also_lgkm")) if isinstance(s.flags, dict) else False
        before.append(before[-1] + (s.counter == "lgkm") + also)
    return before


def _mode(st) -> int:
    san = st.san
    if san is None:
        return MODE_PLAIN
    if st.run.device.lds_observer is not None or san.wr_dma is not None or san.native is None:
        return MODE_STOP
    if san.single_wave:
        return MODE_PLAIN
    if san.wr_stamp.size >= 1 << 31:
        return MODE_STOP            # (the records hold the words as int32)
    return MODE_SHADOW


class _Shadow:
    """Per batch: scratch of the C (each wave's spans, the stamps a write replaces) and int64 copies."""

    def __init__(self, st):
        self.wiw = np.ascontiguousarray(st.wave_in_wg, np.int64)
        self.wg = np.ascontiguousarray(st.wg, np.int64)
        self.span = np.empty(0, np.int64)
        self.saved = np.empty(0, np.int64)
        self.grow(st.W)

    def grow(self, n: int) -> None:
        self.span = np.empty(6 * n, np.int64)           # 2 elements x (g, lo, hi) per wave
        self.saved = np.empty(SAVE_PER_WAVE * n, np.int64)


def _batch_shadow(st, san) -> _Shadow:
    ctx = st.native_calls.get("san_ds")
    if ctx is None:
        ctx = st.native_calls["san_ds"] = _Shadow(st)
    return ctx


def fallback(fn, after: int):
    """The numpy handler of a DS step of a sanitized run, ``after`` lgkm counts before the run's end: it
    runs after the run's checks (their issue() calls made), so lds_access must see the counts less those
    of this step and the ones after it."""
    if after == 0:
        return fn

    def f(st, ws):
        san = st.san
        if san is None:
            return fn(st, ws)
        iss = san.issued["lds"]
        now = iss.copy()
        now[ws] -= after
        san.issued["lds"] = now
        try:
            fn(st, ws)
        finally:
            san.issued["lds"] = iss
    return f


__all__ = ["DsGen", "DsHook", "fallback", "lgkm_before", "source"]
