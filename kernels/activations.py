"""Activations: SiLU, GeLU (exact and tanh forms), ReLU, Tanh, and the gated silu_and_mul / gelu_and_mul.

fp32 math (``isagen.prims.math``; accuracy in docs/kernels.md) on bf16, f16 or fp32 tensors, each result
rounded to nearest even once.  fp32 tensors get the precise exp (an exactly split exponent: ~1 ulp at
any argument); 16-bit ones the fast exp, whose error (|a| 2^-24 relative) is far below their rounding.

* ``activation``: ``x [n] -> out [n]``, out = act(x), any n.  Workgroup ``g`` takes the
  ``block * vec * unroll`` elements from ``g * block * vec * unroll``; lane ``t``, chunk ``u`` the 16
  bytes at ``(u * block + t) * 16`` of that tile.  The buffer window starts at the tile with
  ``num_records`` = its whole dwords, so the last tile needs no branch; for 16-bit types an odd ``n``
  leaves one element alone in a dword, done by lane 0 of the last workgroup with 2-byte accesses
  through an exact-size window.
* ``gated_activation``: ``x [rows, 2, d] -> out [rows, d]`` (the ``[rows, 2d]`` tensor of vLLM's and
  AITER's ``silu_and_mul`` viewed as ``[rows, 2, d]``: gate first, then up), out = act(gate) * up.
  Workgroup ``(r, c)`` takes columns ``c * block * vec * unroll ..`` of row ``r``: three windows (gate,
  up, out) aimed at the row with ``num_records`` = the columns left, so ``d`` need not be a multiple of
  anything (but even for 16-bit types: rows are range-checked per dword).

Every byte is read once and written once, 16 bytes per lane.

Launch contract: ``activation``: grid ``cdiv(n, tile)``; ``gated_activation``: grid
``(rows, cdiv(d, tile), 1)``, ``rows < 2^31``, ``d <= 65535 * tile``; ``tile = block * vec * unroll``,
workgroups of ``block`` work-items.
"""

from __future__ import annotations

from isagen.builders.contract import LaunchInfo, TensorParam
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator
from isagen.isa.operands import VCC
from isagen.prims.convert import ELEMENT_BYTES, Converter
from isagen.prims.math import ACTIVATIONS
from isagen.prims.occupancy import occupancy_floor
from isagen.prims.rows import LANE_ACCESS_BYTES, Pending, RowWindow, even_length_requires, log2
from isagen.tiles.buffer import OOB_INLINE

PARAMS = {
    "op": Param("str", "silu", "; ".join(f"{k}: {a.doc}" for k, a in ACTIVATIONS.items()), choices=tuple(ACTIVATIONS)),
    "dtype": Param("str", "bf16", "element type of x and out (math in fp32, rounded to nearest even once)",
                   choices=("f32", "bf16", "f16")),
    "block": Param("int", 256, "work-items per workgroup", pow2=True, min=64, max=1024),
    "unroll": Param("int", 2, "16-byte vectors per lane, all loaded before any is computed", min=1, max=8),
    "min_occupancy": Param("int", 1, "reject the kernel when fewer waves than this fit on a SIMD", min=1, max=8),
}


def _vec(p) -> int:
    return LANE_ACCESS_BYTES // ELEMENT_BYTES[p.dtype]


def _tile(p) -> int:
    """Elements per workgroup (per row for gated kernels)."""
    return p.block * _vec(p) * p.unroll


def check(p, target, program):
    return occupancy_floor(program, p.min_occupancy, "lower unroll")


def launch(p, target) -> LaunchInfo:
    return LaunchInfo(
        tensors=(TensorParam("x", p.dtype, ("n",), "in"), TensorParam("out", p.dtype, ("n",), "out")),
        grid=(f"cdiv(n, {_tile(p)})", 1, 1), block=(p.block, 1, 1))


def launch_gated(p, target) -> LaunchInfo:
    tile = _tile(p)
    requires = [("rows < 2147483648", "rows must be below 2^31"),
                (f"d <= {65535 * tile}", f"d is too large for the grid's y dimension (tile {tile})")]
    requires += even_length_requires("d", p.dtype)
    return LaunchInfo(
        tensors=(TensorParam("x", p.dtype, ("rows", 2, "d"), "in"),
                 TensorParam("out", p.dtype, ("rows", "d"), "out")),
        grid=("rows", f"cdiv(d, {tile})", 1), block=(p.block, 1, 1), requires=tuple(requires))


@generator("activation", params=PARAMS, check=check, launch=launch, shapes={"n": "elements (any number)"},
           doc="out = act(x) over n elements: silu, gelu, gelu_tanh, relu, tanh; 16 bytes per lane")
def activation(p, target) -> KernelBuilder:
    return _Activation(p, target, gated=False).build()


@generator("gated_activation", params=PARAMS, check=check, launch=launch_gated,
           shapes={"rows": "rows (any number)", "d": "output columns (x has 2d)"},
           doc="out = act(gate) * up over x [rows, 2, d] (silu_and_mul, gelu_and_mul); 16 bytes per lane")
def gated_activation(p, target) -> KernelBuilder:
    return _Activation(p, target, gated=True).build()


class _Activation:
    def __init__(self, p, target, gated: bool):
        self.p = p
        self.gated = gated
        self.act = ACTIVATIONS[p.op]
        self.esize = ELEMENT_BYTES[p.dtype]
        self.vec = _vec(p)
        self.tile = _tile(p)
        self.k = KernelBuilder(p.name, target, workgroup_size=p.block,
                               workgroup_ids="xy" if gated else "x")

    def build(self) -> KernelBuilder:
        k, p = self.k, self.p
        what = f"{p.op}(gate) * up over x [rows, 2, d]" if self.gated else f"{p.op}(x) over x [n]"
        k.comment(f"{what}, {p.dtype}: workgroups of {p.block} lanes, {p.unroll} x 16 bytes per lane "
                  f"({self.tile} elements per workgroup)")
        k.args.pointer("x", p.dtype, "read_only")
        k.args.pointer("out", p.dtype, "write_only")
        sizes = ("rows", "d") if self.gated else ("n",)
        for s in sizes:
            k.args.value(s, "u32")
        names = ("gate", "up", "out") if self.gated else ("x", "out")
        self.win = {t: RowWindow(k, t, k.args["out" if t == "out" else "x"].offset) for t in names}
        self.s = {s: k.sgpr(1, s, kernel=True) for s in sizes}
        for s in sizes:
            k.s_load_dword(self.s[s], k.kernarg_ptr, k.args[s].offset, comment=s)
        self.offsets = k.vgpr(p.unroll, "offset", align=1, kernel=True)
        k.v_lshlrev_b32(self.offsets[0], log2(LANE_ACCESS_BYTES), k.tid, comment="lane x 16 bytes: chunk 0")
        for u in range(1, p.unroll):
            k.v_add_u32(self.offsets[u], u * p.block * LANE_ACCESS_BYTES, self.offsets[0],
                        comment=f"chunk {u}: {u * p.block * LANE_ACCESS_BYTES} bytes further")
        k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")
        if self.gated:
            self.windows_gated()
        else:
            self.windows_flat()
        self.conv = Converter(k, p.dtype)
        self.body()
        if not self.gated and self.esize == 2:
            self.odd_tail()
        else:
            k.free(k.tid)
        self.conv.release()
        return k

    # ------------------------------------------------------------------ windows
    def windows_flat(self):
        k = self.k
        n = self.s["n"]
        self.rem = k.sgpr(1, "tile_elements", kernel=True)
        records = k.sgpr(1, "records", kernel=True)
        wg = k.workgroup_id["x"]
        with k.temps(first="s1") as t:
            k.s_mul_i32(t.first, wg, self.tile, comment="the workgroup's first element")
            k.s_sub_u32(self.rem, n, t.first, comment="elements from there to the end (> 0)")
        k.s_min_u32(self.rem, self.rem, self.tile, comment="this workgroup's elements")
        k.s_lshl_b32(records, self.rem, log2(self.esize), comment=f"x {self.esize} bytes")
        if self.esize == 2:
            k.s_and_b32(records, records, -4, comment="whole dwords: an odd last element is the tail's")
        for name in ("x", "out"):
            self.win[name].start(wg, self.tile * self.esize, records)
        self.records = records

    def windows_gated(self):
        k, es = self.k, self.esize
        d = self.s["d"]
        row, cb = k.workgroup_id["x"], k.workgroup_id["y"]
        records = k.sgpr(1, "records", kernel=True)
        with k.temps(first="s1", rowb="s1") as t:
            k.s_mul_i32(t.first, cb, self.tile, comment="the workgroup's first column")
            k.s_sub_u32(records, d, t.first, comment="columns from there to the row's end (> 0)")
            k.s_min_u32(records, records, self.tile, comment="this workgroup's columns")
            k.s_lshl_b32(records, records, log2(es), comment=f"x {es} bytes")
            k.s_mul_i32(t.first, t.first, es, comment="the first column's byte offset")
            k.s_lshl_b32(t.rowb, d, log2(2 * es), comment=f"d x 2 x {es}: bytes per row of x")
            self.win["gate"].start(row, t.rowb, records, extra=t.first)
            self.win["up"].start(row, t.rowb, records, extra=t.first)
            k.s_lshl_b32(t.rowb, d, log2(es), comment=f"d x {es}: bytes of one half, and per row of out")
            self.win["up"].rsrc.add_base(t.rowb, "up: the second half of the row")
            self.win["out"].start(row, t.rowb, records, extra=t.first)
        k.free(records)

    # ------------------------------------------------------------------ loads, math, stores
    def body(self):
        k, p, act = self.k, self.p, self.act
        ins = ("gate", "up") if self.gated else ("x",)
        data = {t: k.vgpr(4 * p.unroll, t, kernel=True) for t in ins}
        pending = Pending(k)
        for u in range(p.unroll):
            for t in ins:
                k.buffer_load_dwordx4(data[t][4 * u:4 * u + 4], self.offsets[u], self.win[t].regs, 0, offen=True,
                                      comment=f"{t}, chunk {u}")
                pending.issue(f"{t}{u}")
        nval = self.vec
        vals = [k.vgpr(1, f"v{i}", kernel=True) for i in range(nval)] if self.conv.wide else None
        ups = [k.vgpr(1, f"up{i}", kernel=True) for i in range(nval)] if (self.conv.wide and self.gated) else None
        self.precise = p.dtype == "f32"       # 16-bit outputs cannot see the fast exp's error (docs/kernels.md)
        ntemps = act.precise_temps if self.precise else act.temps
        temps = [[k.vgpr(1, f"t{i}_{j}", kernel=True) for j in range(ntemps)] for i in range(nval)]
        masks = [VCC] + [k.sgpr(2, f"mask{i}", kernel=True) for i in range(1, nval)] if act.masks else None
        src = data["gate" if self.gated else "x"]
        for u in range(p.unroll):
            pending.wait_for(f"{ins[-1]}{u}", f"chunk {u} has landed")
            X = src[4 * u:4 * u + 4]
            k.comment(f"chunk {u}: {p.op}" + (" * up" if self.gated else ""))
            if self.conv.wide:
                for d in range(4):
                    self.conv.unpack(vals[2 * d], vals[2 * d + 1], X[d], f"dword {d}")
                xs = vals
            else:
                xs = [X[d] for d in range(4)]
            act.emit(k, xs, xs, temps, masks, precise=self.precise)
            if self.gated:
                U = data["up"][4 * u:4 * u + 4]
                if self.conv.wide:
                    for d in range(4):
                        self.conv.unpack(ups[2 * d], ups[2 * d + 1], U[d], f"up dword {d}")
                    us = ups
                else:
                    us = [U[d] for d in range(4)]
                for i, (x, up) in enumerate(zip(xs, us)):
                    k.v_mul_f32(x, x, up, comment="* up" if i == 0 else None)
            if self.conv.wide:
                for d in range(4):
                    self.conv.pack(X[d], vals[2 * d], vals[2 * d + 1])
            k.buffer_store_dwordx4(X, self.offsets[u], self.win["out"].regs, 0, offen=True,
                                   comment=f"out, chunk {u} (past the end: dropped)")
        self.vals, self.temps, self.masks = vals, temps, masks

    def odd_tail(self):
        """n odd (16-bit): lane 0 of the workgroup holding element n-1 does it with 2-byte accesses."""
        k, act = self.k, self.act
        k.comment("tail: an odd n leaves element n-1 alone in a dword; lane 0 of its workgroup does it with "
                  "2-byte accesses through an exact-size window, every other lane's offset is out of range")
        with k.temps(soff="s1", odd="s1", voff="v1", val="v1") as t:
            k.v_cmp_eq_u32(VCC, 0, k.tid, comment="vcc: lane 0 (the scalar work below covers its 2 wait states)")
            k.free(k.tid)
            k.s_lshl_b32(t.soff, self.rem, 1, comment="the workgroup's bytes, exact")
            for name in ("x", "out"):
                self.win[name].set_records(t.soff)
            k.s_sub_u32(t.soff, t.soff, 2, comment="byte offset of its last element")
            k.s_and_b32(t.odd, self.rem, 1, comment="scc: an odd element count (only the last workgroup)")
            k.s_cselect_b32(t.soff, t.soff, OOB_INLINE, comment="even: nothing to do")
            k.v_mov_b32(t.voff, t.soff)
            k.v_cndmask_b32(t.voff, OOB_INLINE, t.voff, VCC, comment="only lane 0")
            k.buffer_load_ushort(t.val, t.voff, self.win["x"].regs, 0, offen=True, comment="x[n-1]")
            k.wait(vmcnt=0, why="the tail element has landed")
            x = self.vals[0]
            self.conv.unpack_low(x, t.val, "x[n-1]")
            act.emit(k, [x], [x], self.temps[:1], self.masks[:1] if self.masks else None, precise=self.precise)
            self.conv.pack_low(t.val, x)
            k.buffer_store_short(t.val, t.voff, self.win["out"].regs, 0, offen=True, comment="out[n-1]")
