"""Tile primitives on their own: the VALU/SALU code the lane-expression emitter writes (run in the
emulator, compared with the numpy value of the same expression), the chiplet-aware order (numpy model
against HipKittens' published formula; the SALU code in the emulator against the model), the bf16
epilogue rounding against torch (ties, NaN, infinities, subnormals), and the vectorised bank check
against ``isagen.checks.lds_banks.analyse``."""

import numpy as np
import pytest
import torch

from isagen.builders.program import KernelBuilder
from isagen.checks import lds_banks
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble
from isagen.runtime.emu import Device
from isagen.targets import get_target
from isagen.tiles import lanexpr as lx
from isagen.tiles.buffer import BufferResource
from isagen.tiles.epilogue import Bf16Packer, store_quad
from isagen.tiles.lds_layout import Coords, LdsLayout, choose_swizzle, conflict_free, swizzle_candidates
from isagen.tiles.order import emit_remap, remap


def store_kernel(target, name, nout, body, nargs=0):
    """A one-workgroup kernel: ``body(k, lane, uniforms) -> [VGPR]``, each stored as out[i*64 + lane]."""
    k = KernelBuilder(name, target, workgroup_size=64)
    k.args.pointer("out", "u32", "write_only")
    for i in range(nargs):
        k.args.value(f"u{i}", "u32")
    out = BufferResource(k, "out")
    out.load_pointer(k.args["out"].offset)
    us = [k.sgpr(1, f"u{i}", kernel=True) for i in range(nargs)]
    for i, s in enumerate(us):
        k.s_load_dword(s, k.kernarg_ptr, k.args[f"u{i}"].offset)
    lane = k.vgpr(1, "lane", kernel=True)
    k.v_and_b32(lane, 63, k.tid)
    k.free(k.tid)
    k.wait(lgkmcnt=0, why="arguments")
    out.finish(nout * 256)
    regs = body(k, lane, us)
    off = k.vgpr(1, "off")
    for i, r in enumerate(regs):
        k.v_lshlrev_b32(off, 2, lane)
        k.v_add_u32(off, i * 256, off)
        k.buffer_store_dword(r, off, out.regs, 0, offen=True)
    k.free(off)
    return k.finish()


def run(target, program, nout, args=(), grid=(1, 1, 1)):
    co = assemble(render_assembly(program), target, name=program.name)
    dev = Device(target)
    mod = dev.load_module(co)
    buf = dev.to_device(np.zeros(nout * 64 * grid[0], np.uint32))
    mod.launch(program.name, grid=grid, block=(64, 1, 1), args=[buf] + [np.uint32(a) for a in args])
    return dev.from_device(buf, (nout * grid[0], 64), np.uint32)


# ------------------------------------------------------------------------------ lane expressions
def random_expr(rng, uniforms, depth=0):
    L = lx.lane()
    leaves = [L, L, lx.const(int(rng.integers(0, 200))), lx.const(int(rng.integers(0, 1 << 20)))] + uniforms
    if depth > 3 or rng.random() < 0.2:
        return leaves[int(rng.integers(len(leaves)))]
    op = rng.choice(["add", "mul", "and", "or", "xor", "shl", "shr", "sel", "mod", "div"])
    a = random_expr(rng, uniforms, depth + 1)
    if op == "shl":
        return a << int(rng.integers(0, 12))
    if op == "shr":
        return a >> int(rng.integers(0, 8))
    if op == "mod":
        return a % int(2 ** rng.integers(1, 8))
    if op == "div":
        return a // int(2 ** rng.integers(1, 5))
    b = random_expr(rng, uniforms, depth + 1)
    if op == "sel":
        return lx.where_lt(a, b, random_expr(rng, uniforms, depth + 2), random_expr(rng, uniforms, depth + 2))
    return {"add": a + b, "mul": a * b, "and": a & b, "or": a | b, "xor": a ^ b}[op]


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_emitted_lane_expressions_compute_their_numpy_value(target):
    rng = np.random.default_rng(11)
    values = [7, 1234567, 0x80000001]
    exprs = []
    while len(exprs) < 24:
        e = random_expr(rng, [lx.uniform(f"u{i}", v) for i, v in enumerate(values)])
        if not e.uniform:
            exprs.append(e)
    exprs += [lx.lane() * 3000 * 7000, lx.where_lt(lx.lane(), 20, 0x80000000, lx.lane() + 5)]

    def body(k, lane, us):
        em = lx.Emitter(k, lane, max_temps=8)
        bound = [lx.bind(e, {f"u{i}": s for i, s in enumerate(us)}) for e in exprs]
        regs = [k.vgpr(1, f"r{i}", kernel=True) for i in range(len(bound))]
        for e, r in zip(bound, regs):
            em.emit(e, dst=r)
        em.free()
        return regs
    prog = store_kernel(target, "lanexpr", len(exprs), body, nargs=len(values))
    got = run(target, prog, len(exprs), values)
    env = {f"u{i}": v for i, v in enumerate(values)}
    for i, e in enumerate(exprs):
        want = lx.evaluate(e, env).astype(np.uint32)
        assert (got[i] == want).all(), f"{e!r}: lanes {np.flatnonzero(got[i] != want)[:8]}"


# ------------------------------------------------------------------------------ chiplet-aware order
def hk_remap(wgid, tiles_m, tiles_n, W, C, X=8):
    """HipKittens' util.cuh remap as the reference notes print it (with the tail test as >= limit)."""
    nwg = tiles_m * tiles_n
    xcd = wgid % X
    block = X * C
    limit = (nwg // block) * block
    if wgid >= limit:
        wid = wgid
    else:
        local = wgid // X
        wid = (local // C) * block + xcd * C + local % C
    grp = W * tiles_n
    first = (wid // grp) * W
    h = min(tiles_m - first, W)
    return first + (wid % grp) % h, (wid % grp) // h


SHAPES = [(4, 4, 2, 2), (16, 16, 8, 64), (7, 5, 4, 16), (3, 11, 8, 4), (1, 1, 8, 64), (33, 2, 4, 16)]


@pytest.mark.parametrize("tm,tn,W,C", SHAPES)
def test_remap_model_is_hipkittens_and_a_bijection(tm, tn, W, C):
    ids = np.arange(tm * tn)
    pm, pn = remap(ids, tm, tn, W, C)
    for i in ids:
        assert (pm[i], pn[i]) == hk_remap(int(i), tm, tn, W, C)
    assert len(set(zip(pm.tolist(), pn.tolist()))) == tm * tn
    assert pm.min() >= 0 and pm.max() < tm and pn.min() >= 0 and pn.max() < tn


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_emitted_remap_matches_the_model(target):
    cases = SHAPES

    def body(k, lane, us):
        regs = []
        for ci, (tm, tn, W, C) in enumerate(cases):
            sm, sn = k.sgpr(1, "tm"), k.sgpr(1, "tn")
            k.s_mov_b32(sm, tm)
            k.s_mov_b32(sn, tn)
            pm, pn = k.sgpr(1, "pm"), k.sgpr(1, "pn")
            emit_remap(k, k.workgroup_id["x"], sm, sn, pm, pn, group_m=W, chunk=C, xcds=8)
            r = k.vgpr(1, f"r{ci}", kernel=True)
            k.v_mov_b32(r, pn)
            k.v_lshl_or_b32(r, pm, 16, r)
            k.free(sm, sn, pm, pn)
            regs.append(r)
        return regs

    # one launch of max(tm*tn) workgroups; workgroup g writes its own row block
    grid = max(tm * tn for tm, tn, _, _ in cases)
    k_prog = _per_workgroup_kernel(target, body, len(cases))
    got = run(target, k_prog, len(cases), grid=(grid, 1, 1)).reshape(grid, len(cases), 64)[:, :, 0]
    for ci, (tm, tn, W, C) in enumerate(cases):
        ids = np.arange(tm * tn)
        pm, pn = remap(ids, tm, tn, W, C)
        assert (got[ids, ci] >> 16 == pm).all() and (got[ids, ci] & 0xFFFF == pn).all(), (tm, tn, W, C)


def _per_workgroup_kernel(target, body, nout):
    k = KernelBuilder("remap", target, workgroup_size=64)
    k.args.pointer("out", "u32", "write_only")
    out = BufferResource(k, "out")
    out.load_pointer(k.args["out"].offset)
    lane = k.vgpr(1, "lane", kernel=True)
    k.v_and_b32(lane, 63, k.tid)
    k.free(k.tid)
    k.wait(lgkmcnt=0, why="arguments")
    out.finish(1 << 30)
    regs = body(k, lane, [])
    off = k.vgpr(1, "off")
    base = k.sgpr(1, "base")
    k.s_mul_i32(base, k.workgroup_id["x"], nout * 256)
    for i, r in enumerate(regs):
        k.v_lshlrev_b32(off, 2, lane)
        k.v_add_u32(off, base, off)
        k.v_add_u32(off, i * 256, off)
        k.buffer_store_dword(r, off, out.regs, 0, offen=True)
    k.free(off, base)
    return k.finish()


# ------------------------------------------------------------------------------ bf16 rounding
SPECIALS = np.array([0.0, -0.0, 1.0, -1.5, 3.1415927, 1e-40, -1e-41, 3.4e38, -3.4e38, np.inf, -np.inf, np.nan,
                     1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -9, 65504.0, 2.0 ** -126, 1.00390625],
                    np.float32)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_bf16_packer_rounds_like_torch(target):
    rng = np.random.default_rng(3)
    vals = np.concatenate([SPECIALS, (rng.standard_normal(128 - SPECIALS.size) * 10).astype(np.float32)])
    vals[-20:] = (np.arange(20, dtype=np.uint32) * 0x8000 + 0x3F808000).view(np.float32)   # exact ties
    bits = vals.view(np.uint32)

    prog = _bf16_kernel(target)
    co = assemble(render_assembly(prog), target, name=prog.name)
    dev = Device(target)
    mod = dev.load_module(co)
    src = dev.to_device(bits)
    dst = dev.to_device(np.zeros(64, np.uint32))
    mod.launch(prog.name, grid=(1, 1, 1), block=(64, 1, 1), args=[src, dst])
    got = dev.from_device(dst, (64,), np.uint32)
    want = torch.from_numpy(vals.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    lo, hi = (got & 0xFFFF).astype(np.uint16), (got >> 16).astype(np.uint16)
    for half, w in ((lo, want[0::2]), (hi, want[1::2])):
        nan = np.isnan(vals[0::2] if half is lo else vals[1::2])
        assert (half[~nan] == w[~nan]).all(), (half[~nan] ^ w[~nan]).nonzero()
        assert ((half[nan] & 0x7F80) == 0x7F80).all() and ((half[nan] & 0x7F) != 0).all()   # still NaN


def _bf16_kernel(target):
    k = KernelBuilder("bf16pack", target, workgroup_size=64)
    k.args.pointer("src", "u32", "read_only")
    k.args.pointer("dst", "u32", "write_only")
    src, dst = BufferResource(k, "src"), BufferResource(k, "dst")
    src.load_pointer(k.args["src"].offset)
    dst.load_pointer(k.args["dst"].offset)
    off = k.vgpr(1, "off")
    k.v_lshlrev_b32(off, 3, k.tid, comment="8 bytes per lane: two fp32")
    k.wait(lgkmcnt=0, why="arguments")
    src.finish(512)
    dst.finish(256)
    v = k.vgpr(2, "v")
    k.buffer_load_dwordx2(v, off, src.regs, 0, offen=True)
    pk = Bf16Packer(k)
    k.wait(vmcnt=0, why="values")
    res = k.vgpr(1, "res")
    pk.pack(res, v[0], v[1])
    k.v_lshlrev_b32(off, 2, k.tid)
    k.buffer_store_dword(res, off, dst.regs, 0, offen=True)
    pk.release()
    k.free(v, res, off, k.tid)
    return k.finish()


def test_bf16_store_without_a_packer_says_so():
    """A bf16 ``store_quad`` needs the packer that rounds to bf16: without one it names what is missing
    (it used to fail with an AttributeError on None)."""
    k = KernelBuilder("store_no_packer", "gfx942", workgroup_size=64)
    rsrc = BufferResource(k, "C")
    acc, voff, tmp = k.agpr(4, "acc"), k.vgpr(1, "voff"), k.vgpr(4, "tmp")
    with pytest.raises(ValueError, match="bf16 output needs a Bf16Packer"):
        store_quad(k, rsrc, acc, voff, "bf16", tmp, None, "C")


# ------------------------------------------------------------------------------ bank check
@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("width,op", [(16, "read"), (16, "write"), (8, "read"), (4, "read"), (2, "read")])
def test_vectorised_bank_check_agrees_with_lds_banks(target, width, op):
    rng = np.random.default_rng(width)
    addrs = []
    for _ in range(200):
        kind = rng.integers(3)
        if kind == 0:
            a = rng.integers(0, 4096, 64) // width * width
        elif kind == 1:
            a = np.arange(64) * width * int(rng.choice([1, 2, 4, 8]))
        else:
            a = (np.arange(64) % 8) * 256 + (np.arange(64) // 8) * width
        addrs.append(a)
    for shift in range(20):      # lanes of each phase on consecutive addresses: conflict-free by construction
        a = np.zeros(64, np.int64)
        for p, group in enumerate(lds_banks.phases(target, width, op)):
            for i, lane in enumerate(group):
                a[lane] = p * 4096 + shift * 64 + i * width
        addrs.append(a)
    addrs = np.array(addrs)
    fast = conflict_free(addrs, width, op, target)
    slow = np.array([lds_banks.analyse(a, width, target, op).conflict_free for a in addrs])
    assert (fast == slow).all()
    assert fast.any() and (~fast).any()


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_choose_swizzle_takes_the_first_candidate_the_bank_model_finds_conflict_free(target):
    # choose_swizzle searches in pure Python (the generators call it without numpy); the reference is
    # the vectorised numpy check (itself checked against lds_banks above) over the whole candidate list
    rng = np.random.default_rng(5)
    bank = get_target(target).lds_banks * 4
    outcomes = set()
    for case in range(10):
        rows, row_bytes, unit = [(64, 128, 16), (128, 64, 8), (32, 256, 16)][case % 3] if case < 8 else (64, 64, 16)
        layout = LdsLayout(rows, row_bytes, unit)
        coords = []
        for _ in range(int(rng.integers(1, 5))):
            width = int(rng.choice([8, 16]))
            op = str(rng.choice(["read", "write"]))
            lane = np.arange(64)
            if case < 8:      # MFMA-like: 16 or 32 rows of a few k-columns each
                m = int(rng.choice([16, 32]))
                r = (lane % m + int(rng.integers(0, rows // m)) * m) % rows
                b = ((lane // m) * width + int(rng.integers(0, 4)) * 64) % row_bytes
            else:             # scattered: often no key frees them all
                r = rng.integers(0, rows, 64)
                b = rng.integers(0, row_bytes // width, 64) * width
            coords.append(Coords(tuple(r.tolist()), tuple(b.tolist()), 0, width, op))
        chosen, bad = choose_swizzle(layout, coords, target, bank)

        def conflicting(cand, layout=layout, coords=coords):
            lay = layout.with_swizzle(cand)
            return [i for i, c in enumerate(coords) if not conflict_free(
                lay.offset(np.array(c.rows), np.array(c.bytes))[None, :], c.width, c.op, target)[0]]
        cands = swizzle_candidates(layout, bank)
        free = next((c for c in cands if not conflicting(c)), None)
        if free is not None:
            assert chosen.swizzle == free and bad == []
        else:
            counts = [conflicting(c) for c in cands]
            best = min(range(len(cands)), key=lambda i: len(counts[i]))       # the first of the fewest
            assert chosen.swizzle == cands[best]
            assert sorted(i for i, _ in bad) == counts[best]
            assert all(not rep.conflict_free for _, rep in bad)
        outcomes.add(free is not None)
    assert outcomes == {True, False}
