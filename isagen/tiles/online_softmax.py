"""Online softmax over rows of 16x16 MFMA accumulators (flash-attention's running max and sum), in exp2.

With B fed as src0 (``tiles.mma``), a 16x16 accumulator tile gives lane ``L`` four consecutive columns
``4 (L / 16) + [0, 4)`` of row ``L % 16``: a row of a ``frags_m x frags_n`` tile grid lives in four lanes
(``L``, ``L ^ 16``, ``L ^ 32``, ``L ^ 48``), ``4 * frags_n`` values each.  ``RowSoftmax`` keeps, per row
fragment ``fm``, the running reference max ``m`` (raw logits) and two partial row sums (a lane's own
columns; the four lanes are summed once, at the end), and does per tile:

* ``row_max``: the lane's max (``v_max3_f32`` chain), then two exchanges (``ds_bpermute_b32`` with the
  lanes ``^16`` and ``^32``) so the row's four lanes agree; other LDS work (``side`` ops, e.g. the next
  operand's reads) goes out between the exchanges, at most 15 behind each (``lgkmcnt`` counts to 15);
* ``lazy_rescale``: a row's reference moves only when its max grew by more than ``threshold_log2``
  (FA4/HipKittens: 8, so P <= 256), and only then are its sums and output rows scaled by
  ``alpha = exp2((m_old - m_new) c)``; the block is skipped by one branch when no row of the wave moved,
  and sits between the labels ``rescale`` .. ``no_rescale`` so a model can count it apart;
* ``exponentiate``: ``P = exp2((S - m) c)`` in place (two packed fp32 ops per pair: the difference is
  taken before the scaling, so a large max keeps its own exponent exact), the partial sums;
* ``finish``: the row sums over the four lanes, ``1/l`` and ``LSE = (m c + log2 l) ln 2``; a row that saw
  no column (l = 0) gets ``1/l = 0`` (its output 0) and ``LSE = -inf``.

The running max starts at -FLT_MAX, not -inf: a row whose columns are all masked (-inf) then computes
``exp2((-inf + FLT_MAX) c) = 0`` instead of ``exp2(NaN)``.  ``c = scale * log2 e`` is positive.

``mask_columns`` sets logits whose column is not below a per-lane limit to -inf (two VALU per value).
"""

from __future__ import annotations

from isagen.isa.operands import VCC, Reg
from isagen.tiles import lanexpr as lx
from isagen.tiles.schedule import Op, emit

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
NEG_FLT_MAX = 0xFF7FFFFF
NEG_INF = 0xFF800000
MAX_LGKM = 15               # s_waitcnt lgkmcnt's largest count (4 bits)
ROW_LANES = (16, 32)        # the exchanges that join a row's four lanes


class RowSoftmax:
    """Running row statistics of ``frags_m`` row fragments; ``scale`` is an SGPR (fp32), the logits'
    multiplier (attention's softmax_scale)."""

    def __init__(self, k, lane: Reg, frags_m: int, scale: Reg, threshold_log2: float = 8.0):
        self.k, self.frags_m = k, frags_m
        self.threshold_log2 = threshold_log2
        n = frags_m
        self.m = k.vgpr(n, "row_max", kernel=True)
        self.lsum = k.vgpr(2 * n, "row_sum", align=2, kernel=True)        # two partial sums per fragment
        self.negm = k.vgpr(2 * n, "neg_max", align=2, kernel=True)        # -m twice: a v_pk_add operand
        self.c2 = k.vgpr(2, "scale_log2e", align=2, kernel=True)          # c twice: a v_pk_mul operand
        self.thr = k.sgpr(1, "rescale_threshold", kernel=True)
        self.xor_addr = k.vgpr(2, "xor_lane_addr", kernel=True)
        for i in range(n):
            k.v_mov_b32(self.m[i], NEG_FLT_MAX, comment=f"row max (fragment {i}): -FLT_MAX, finite on purpose")
        for i in range(2 * n):
            k.v_mov_b32(self.lsum[i], 0, comment="row sums (two partial sums per fragment)")
        k.v_mov_b32(self.c2[0], LOG2E, comment="log2(e)")
        k.v_mul_f32(self.c2[0], scale, self.c2[0], comment="c = scale * log2(e)")
        k.v_mov_b32(self.c2[1], self.c2[0])
        t = k.vgpr(1, "thr_tmp")
        k.v_rcp_f32(t, self.c2[0], comment="1/c")
        k.v_mul_f32(t, threshold_log2, t, comment=f"lazy-rescale threshold in logits: {threshold_log2:g}/c")
        k.v_readfirstlane_b32(self.thr, t)
        k.free(t)
        em = lx.Emitter(k, lane)
        L = lx.lane()
        for i, x in enumerate(ROW_LANES):
            em.emit((L ^ x) * 4, dst=self.xor_addr[i], comment=f"ds_bpermute address of lane ^ {x}")
        em.free()

    def release(self) -> None:
        self.k.free(self.m, self.lsum, self.negm, self.c2, self.thr, self.xor_addr)

    # ------------------------------------------------------------------ per tile
    def row_max(self, S, side: list[Op]) -> Reg:
        """The tile's row maxima (one VGPR per row fragment, the same in a row's four lanes); ``side``
        ops (LDS reads) are issued between and after the exchanges.  The caller frees the result."""
        k = self.k
        mx = k.vgpr(self.frags_m, "tile_max")
        part = k.vgpr(self.frags_m, "max_partner")
        for fm in range(self.frags_m):
            regs = [S.tile(fm, fn)[r] for fn in range(S.frags_n) for r in range(4)]
            k.v_max3_f32(mx[fm], regs[0], regs[1], regs[2], comment=f"row fragment {fm}: max of this lane's columns")
            i = 3
            while i < len(regs):
                if i + 1 < len(regs):
                    k.v_max3_f32(mx[fm], mx[fm], regs[i], regs[i + 1])
                    i += 2
                else:
                    k.v_max_f32(mx[fm], mx[fm], regs[i])
                    i += 1
        chunks = (side[:MAX_LGKM], side[MAX_LGKM:2 * MAX_LGKM])
        for step, chunk in enumerate(chunks):
            for fm in range(self.frags_m):
                k.ds_bpermute_b32(part[fm], self.xor_addr[step], mx[fm],
                                  comment=f"row max: partner lane ^ {ROW_LANES[step]}")
            emit(chunk)
            k.wait(lgkmcnt=len(chunk), why="the partners' maxima are here (the reads behind them may still fly)")
            for fm in range(self.frags_m):
                k.v_max_f32(mx[fm], mx[fm], part[fm])
        k.free(part)
        emit(side[2 * MAX_LGKM:])
        return mx

    def lazy_rescale(self, mx: Reg, O) -> None:
        """Rows whose max ``mx`` grew by more than the threshold take it as their reference; their sums
        and their rows of ``O`` (AGPR accumulators of the same row fragments) are scaled by alpha."""
        k = self.k
        if self.frags_m != 2:
            raise ValueError("lazy_rescale keeps one row mask per fragment in an SGPR pair and VCC: 2 fragments")
        k.comment(f"lazy rescale: a row's reference max moves only when the max grew by > {self.threshold_log2:g} "
                  "in log2 (p stays <= 2^threshold)")
        grow = k.sgpr(2, "grow_mask", align=2)
        both = k.sgpr(2, "grow_any", align=2)
        d = k.vgpr(2, "max_growth")
        for fm in range(2):
            k.v_max_f32(mx[fm], mx[fm], self.m[fm], comment=f"row fragment {fm}: new max")
            k.v_sub_f32(d[fm], mx[fm], self.m[fm], comment="growth of the max")
        k.v_cmp_lt_f32(grow, self.thr, d[0], comment="fragment 0: rows past the threshold")
        k.v_cmp_lt_f32(VCC, self.thr, d[1], comment="fragment 1: rows past the threshold")
        k.s_or_b64(both, grow, VCC, comment="any row of the wave?")
        skip = k.label("no_rescale")
        k.s_cbranch_scc0(skip)
        k.place(k.label("rescale"))
        masks = (grow, VCC)
        alpha = k.vgpr(2, "alpha")
        tmp = k.vgpr(4, "rescale_tmp")
        for fm in range(2):
            k.v_cndmask_b32(mx[fm], self.m[fm], mx[fm], masks[fm], comment=f"fragment {fm}: new reference max")
            k.v_sub_f32(alpha[fm], self.m[fm], mx[fm])
            k.v_mul_f32(alpha[fm], alpha[fm], self.c2[0])
            k.v_exp_f32(alpha[fm], alpha[fm], comment="alpha = exp2((m_old - m_new) * c): 1 for other rows")
            k.v_mov_b32(self.m[fm], mx[fm])
            k.v_mul_f32(self.lsum[2 * fm], self.lsum[2 * fm], alpha[fm])
            k.v_mul_f32(self.lsum[2 * fm + 1], self.lsum[2 * fm + 1], alpha[fm])
        for fm in range(2):
            regs = [O.tile(fm, fd)[r] for fd in range(O.frags_n) for r in range(O.c_regs)]
            for i in range(0, len(regs), 4):
                for j in range(4):
                    k.v_accvgpr_read_b32(tmp[j], regs[i + j])
                for j in range(4):
                    k.v_mul_f32(tmp[j], tmp[j], alpha[fm])
                for j in range(4):
                    k.v_accvgpr_write_b32(regs[i + j], tmp[j])
        k.free(alpha, tmp)
        k.place(skip)
        k.free(d, grow, both)

    def exponentiate(self, S) -> None:
        """``S <- exp2((S - m) c)`` in place; the partial row sums grow by it."""
        k = self.k
        k.comment("P = exp2((S - m) * c); row sums")
        for fm in range(self.frags_m):
            k.v_xor_b32(self.negm[2 * fm], 0x80000000, self.m[fm], comment=f"-m (row fragment {fm})")
            k.v_mov_b32(self.negm[2 * fm + 1], self.negm[2 * fm])
        for fm in range(self.frags_m):
            negm = self.negm[2 * fm:2 * fm + 2]
            lsum = self.lsum[2 * fm:2 * fm + 2]
            for fn in range(S.frags_n):
                tile = S.tile(fm, fn)
                for pair in (tile[0:2], tile[2:4]):
                    k.v_pk_add_f32(pair, pair, negm, comment=f"S[{fm}][{fn}] - m")
                    k.v_pk_mul_f32(pair, pair, self.c2, comment="* c")
                for r in range(4):
                    k.v_exp_f32(tile[r], tile[r])
                for pair in (tile[0:2], tile[2:4]):
                    k.v_pk_add_f32(lsum, lsum, pair, comment="row sum")

    # ------------------------------------------------------------------ the end
    def finish(self) -> tuple[Reg, Reg]:
        """``(inv_l, lse)``: per row fragment 1/l (0 for a row that saw nothing) and the natural-log
        LSE (-inf there), the same in a row's four lanes.  The caller frees both."""
        k, n = self.k, self.frags_m
        k.comment("row sums across the row's four lanes; 1/l; LSE = (m c + log2 l) ln 2; rows that saw no "
                  "column (l = 0): 1/l = 0, LSE = -inf")
        part = k.vgpr(n, "sum_partner")
        l = k.vgpr(n, "row_l")
        for fm in range(n):
            k.v_add_f32(l[fm], self.lsum[2 * fm], self.lsum[2 * fm + 1], comment=f"fragment {fm}: this lane's sum")
        for step in range(2):
            for fm in range(n):
                k.ds_bpermute_b32(part[fm], self.xor_addr[step], l[fm], comment="partner lane's sum")
            k.wait(lgkmcnt=0, why="partner sums")
            for fm in range(n):
                k.v_add_f32(l[fm], l[fm], part[fm])
        inv = k.vgpr(n, "inv_l")
        lse = k.vgpr(n, "lse")
        ninf = k.vgpr(1, "neg_inf")
        k.v_mov_b32(ninf, NEG_INF)
        for fm in range(n):
            k.v_rcp_f32(inv[fm], l[fm], comment="1 / l")
            k.v_log_f32(lse[fm], l[fm], comment="log2 l")
            k.v_fma_f32(lse[fm], self.m[fm], self.c2[0], lse[fm], comment="m c + log2 l")
            k.v_mul_f32(lse[fm], LN2, lse[fm], comment="natural log")
            k.v_cmp_lt_f32(VCC, 0, l[fm], comment="did the row see a column?")
            k.v_cndmask_b32(inv[fm], 0, inv[fm], VCC, comment="no: output 0")
            k.v_cndmask_b32(lse[fm], ninf, lse[fm], VCC, comment="no: LSE = -inf")
        k.free(part, l, ninf)
        return inv, lse


def mask_columns(k, S, limits: Reg, keep: str = "below") -> None:
    """Logits become -inf where the column offset ``16 fn + r`` (within the lane's run, see the module
    docstring) is not below ``limits[fm]`` (``keep="below"``: a signed per-lane VGPR per row fragment;
    attention's keys past a causal diagonal) or is below it (``keep="from"``: the backward's transposed
    scores, queries before the diagonal)."""
    if keep not in ("below", "from"):
        raise ValueError(f"keep must be 'below' or 'from', not {keep!r}")
    ninf = k.vgpr(1, "neg_inf")
    k.v_mov_b32(ninf, NEG_INF)
    for fm in range(S.frags_m):
        for fn in range(S.frags_n):
            tile = S.tile(fm, fn)
            for r in range(4):
                if keep == "below":
                    k.v_cmp_gt_i32(VCC, limits[fm], 16 * fn + r, comment=f"S[{fm}][{fn}].{r}: column visible?")
                else:
                    k.v_cmp_le_i32(VCC, limits[fm], 16 * fn + r, comment=f"S[{fm}][{fn}].{r}: column visible?")
                k.v_cndmask_b32(tile[r], ninf, tile[r], VCC)
    k.free(ninf)
