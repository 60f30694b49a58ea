"""Chiplet-aware workgroup order (HipKittens' two-stage remap, reference notes hipkittens.md §3).

The dispatcher hands workgroup ids round-robin to the XCDs (``wgid % num_xcds``), each with its own
L2.  Two stages make neighbouring output tiles share an L2:

1. XCD grouping: ``C`` consecutive remapped ids go to one XCD::

       xcd = wgid % X;  block = X*C;  limit = (nwg // block) * block
       id  = wgid                                            if wgid >= limit (the tail is left alone)
       id  = (local // C) * block + xcd*C + local % C        with local = wgid // X, otherwise

2. grouped walk ``W`` tile-rows tall (Triton's ``GROUP_M``)::

       grp = W * tiles_n;  first = (id // grp) * W;  h = min(tiles_m - first, W)
       pid_m = first + (id % grp) % h;   pid_n = (id % grp) // h

(HipKittens writes ``wgid > limit``; ``>=`` is the bijective form.)  ``remap`` gives the numpy
reference; ``emit_remap`` the SALU code (uniform divisions through a short VALU float sequence with
exact integer correction, ``udiv``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from isagen.isa.operands import Reg

if TYPE_CHECKING:
    pass


def remap(wgid, tiles_m: int, tiles_n: int, group_m: int, chunk: int, xcds: int = 8):
    """(pid_m, pid_n) of workgroup ``wgid`` (int or numpy array)."""
    import numpy as np

    wgid = np.asarray(wgid, dtype=np.int64)
    nwg = tiles_m * tiles_n
    block = xcds * chunk
    limit = (nwg // block) * block
    local = wgid // xcds
    ident = (local // chunk) * block + (wgid % xcds) * chunk + local % chunk
    wid = np.where(wgid >= limit, wgid, ident)
    grp = group_m * tiles_n
    first = (wid // grp) * group_m
    h = np.minimum(tiles_m - first, group_m)
    rem = wid % grp
    return first + rem % h, rem // h


def udiv(k, q: Reg, r: Reg, x, d, why: str = "") -> None:
    """Wave-uniform unsigned division ``q = x // d``, ``r = x % d`` (SGPRs or constants; quotients
    below 2**20).  float(x) * rcp(float(d)) is within one of the quotient; two integer corrections
    make it exact."""
    vx = k.vgpr(2, "udiv_tmp", scratch=True)
    k.v_cvt_f32_u32(vx[0], x, comment=f"{why}: x as float")
    k.v_cvt_f32_u32(vx[1], d, comment=f"{why}: d as float")
    k.v_rcp_f32(vx[1], vx[1], comment=f"{why}: 1/d")
    k.v_mul_f32(vx[0], vx[0], vx[1], comment=f"{why}: x/d, within one")
    k.v_cvt_u32_f32(vx[0], vx[0], comment=f"{why}: the estimate as an integer")
    k.v_readfirstlane_b32(q, vx[0], comment=f"{why}: quotient estimate")
    k.free(vx)
    k.s_mul_i32(r, q, d, comment=f"{why}: q * d")
    k.s_sub_i32(r, x, r, comment=f"{why}: remainder of the estimate (-d..2d-1)")
    # (s_add/s_sub write SCC: both candidates before each compare)
    t = k.sgpr(2, "udiv_fix", align=1, scratch=True)
    k.s_add_i32(t[0], r, d, comment=f"{why}: r + d")
    k.s_add_i32(t[1], q, -1, comment=f"{why}: q - 1")
    k.s_cmp_lt_i32(r, 0, comment=f"{why}: estimate one too high?")
    k.s_cselect_b32(r, t[0], r, comment=f"{why}: then r += d")
    k.s_cselect_b32(q, t[1], q, comment=f"{why}: and q -= 1")
    k.s_sub_i32(t[0], r, d, comment=f"{why}: r - d")
    k.s_add_i32(t[1], q, 1, comment=f"{why}: q + 1")
    k.s_cmp_ge_u32(r, d, comment=f"{why}: estimate one too low?")
    k.s_cselect_b32(r, t[0], r, comment=f"{why}: then r -= d")
    k.s_cselect_b32(q, t[1], q, comment=f"{why}: and q += 1")
    k.free(t)


def emit_remap(k, wgid: Reg, tiles_m: Reg, tiles_n: Reg, pid_m: Reg, pid_n: Reg, *, group_m: int,
               chunk: int, xcds: int) -> None:
    """SALU code for ``remap``: workgroup id -> (pid_m, pid_n), all SGPRs."""
    k.comment(f"chiplet-aware tile order (HipKittens): {xcds} XCDs, chunk C={chunk}, group W={group_m}")
    t = k.sgpr(6, "remap_tmp", align=1)
    nwg, lim, loc, q, r, wid = (t[i] for i in range(6))
    block = xcds * chunk
    k.s_mul_i32(nwg, tiles_m, tiles_n, comment="workgroups")
    udiv(k, q, r, nwg, block, "nwg // (X*C)")
    k.s_mul_i32(lim, q, block, comment="limit: ids below it are regrouped per XCD")
    udiv(k, loc, r, wgid, xcds, "wgid // X")           # r = xcd
    k.s_mul_i32(r, r, chunk, comment="xcd * C")
    udiv(k, q, wid, loc, chunk, "local // C")           # q = chunk_idx, wid = pos
    k.s_add_u32(wid, wid, r, comment="xcd*C + pos")
    k.s_mul_i32(q, q, block)
    k.s_add_u32(wid, wid, q, comment="chunk_idx*X*C + xcd*C + pos")
    k.s_cmp_lt_u32(wgid, lim, comment="scc: wgid is below the limit")
    k.s_cselect_b32(wid, wid, wgid, comment="id: regrouped, or the tail unchanged")
    # grouped walk
    k.s_mul_i32(nwg, tiles_n, group_m, comment="grp = W * tiles_n")
    udiv(k, q, r, wid, nwg, "id // grp")                # q = group index, r = id % grp
    k.s_mul_i32(q, q, group_m, comment="first tile-row of the group")
    k.s_sub_u32(lim, tiles_m, q)
    k.s_min_u32(lim, lim, group_m, comment="h = min(tiles_m - first, W)")
    udiv(k, pid_n, loc, r, lim, "(id % grp) // h")      # pid_n, loc = (id % grp) % h
    k.s_add_u32(pid_m, q, loc, comment="pid_m = first + (id % grp) % h")
    k.free(t)
