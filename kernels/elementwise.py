"""Elementwise kernels over n elements: axpy, scale, add, mul in fp32, bf16 and fp16, any n.

One workgroup handles one tile of ``block * vec * unroll`` elements.  Lane ``t`` of workgroup ``g``
handles, for each chunk ``u < unroll``, the ``vec`` consecutive elements starting at
``(g*unroll + u)*block*vec + t*vec``: every load and store instruction is coalesced (16 bytes per lane
with ``vec*element size = 16``: ``buffer_load_dwordx4``).

Tensors are read and written through buffer resources (V#) whose ``num_records`` is the tensor's size
in bytes, so lanes past the end load 0 and their stores are dropped by the hardware: the tail needs no
branch.  Two rules keep that exact on every CDNA part:

* the whole byte offset is in the VGPR (``offen``; soffset 0, no instruction offset), since whether
  soffset takes part in the range check differs between chips;
* multi-dword accesses are range-checked per dword, and whether a dword that straddles
  ``num_records`` is in or out is chip-dependent, so for 2-byte types ``num_records`` is rounded
  down to whole dwords and, when n is odd, the last element is handled by one lane with a 2-byte
  ``buffer_load_ushort``/``buffer_store_short`` through an exact-size resource (the "tail").

bf16 results are rounded to nearest even from fp32: ``v_cvt_pk_bf16_f32`` on gfx950; on gfx942
(which lacks it) with integer ops (add 0x7fff + the lsb, NaN -> 0x7fc0, as torch does).

Launch contract: grid ``cdiv(n, block*vec*unroll)`` workgroups of ``block`` lanes; arguments are the
tensor pointers, then ``alpha`` (f32, axpy/scale only), then ``n`` (u32).
"""

from __future__ import annotations

from dataclasses import dataclass

from isagen.builders.contract import LaunchInfo, ScalarParam, TensorParam
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator
from isagen.isa.operands import VCC
from isagen.prims.convert import ELEMENT_BYTES, Converter
from isagen.prims.occupancy import occupancy_floor
from isagen.tiles.buffer import BUFFER_DWORD3, OOB_INLINE

MAX_BYTES = 1 << 32         # num_records and offsets are 32-bit


@dataclass(frozen=True)
class ElementwiseOp:
    """One elementwise operation: its tensors, whether it takes alpha, and the torch reference."""

    inputs: tuple[str, ...]
    output: str
    alpha: bool             # takes the f32 scalar alpha
    formula: str
    reference: str          # torch expression over the tensor and scalar names


OPS = {
    "axpy": ElementwiseOp(("x", "y"), "y", True, "y = alpha*x + y", "alpha * x + y"),
    "scale": ElementwiseOp(("x",), "y", True, "y = alpha*x", "alpha * x"),
    "add": ElementwiseOp(("x", "y"), "z", False, "z = x + y", "x + y"),
    "mul": ElementwiseOp(("x", "y"), "z", False, "z = x * y", "x * y"),
}

PARAMS = {
    "op": Param("str", "axpy", "the operation: " + "; ".join(f"{k}: {o.formula}" for k, o in OPS.items()),
                choices=tuple(OPS)),
    "dtype": Param("str", "f32", "element type of every tensor (math in fp32, rounded to nearest even)",
                   choices=tuple(ELEMENT_BYTES)),
    "block": Param("int", 256, "work-items per workgroup", pow2=True, min=64, max=1024),
    "vec": Param("int", 4, "elements per lane per access; vec x element size must be 4, 8 or 16 bytes "
                           "(buffer_load_dword, _dwordx2, _dwordx4)", choices=(1, 2, 4, 8)),
    "unroll": Param("int", 1, "vectors per lane, all loaded before any is computed (bytes in flight)",
                    min=1, max=16),
    "min_occupancy": Param("int", 1, "reject the kernel when fewer waves than this fit on a SIMD",
                           min=1, max=8),
}


def _tensors(op: ElementwiseOp) -> list[str]:
    return list(op.inputs) + ([op.output] if op.output not in op.inputs else [])


def _role(op: ElementwiseOp, t: str) -> str:
    if t in op.inputs:
        return "inout" if t == op.output else "in"
    return "out"


def _tile(p) -> tuple[int, int, int]:
    """(bytes per lane per access, bytes per chunk, bytes per workgroup tile)."""
    lane = p.vec * ELEMENT_BYTES[p.dtype]
    return lane, lane * p.block, lane * p.block * p.unroll


def validate(p, target):
    lane = p.vec * ELEMENT_BYTES[p.dtype]
    if lane not in (4, 8, 16):
        ok = [v for v in PARAMS["vec"].choices if v * ELEMENT_BYTES[p.dtype] in (4, 8, 16)]
        return [("vec", f"vec={p.vec} with {p.dtype} is {lane} bytes per lane; buffer loads move 4, 8 or "
                        f"16 bytes (vec {', '.join(map(str, ok))} for {p.dtype})")]
    return []


def check(p, target, program):
    return occupancy_floor(program, p.min_occupancy, "lower unroll or vec")


def launch(p, target) -> LaunchInfo:
    op = OPS[p.op]
    esize = ELEMENT_BYTES[p.dtype]
    _, _, tile_bytes = _tile(p)
    tile = tile_bytes // esize
    return LaunchInfo(
        tensors=tuple(TensorParam(t, p.dtype, ("n",), _role(op, t)) for t in _tensors(op)),
        scalars=(ScalarParam("alpha", "f32"),) if op.alpha else (),
        grid=(f"cdiv(n, {tile})", 1, 1),
        block=(p.block, 1, 1),
        requires=((f"n * {esize} + {tile_bytes} <= {MAX_BYTES - 4}",
                   f"n is too large: buffer offsets are 32-bit (n*{esize} bytes must stay at or below "
                   f"{MAX_BYTES - 4 - tile_bytes})"),),
    )


@generator("elementwise", params=PARAMS, shapes={"n": "elements of every tensor"},
           validate=validate, check=check, launch=launch,
           doc="y = f(x, ...) over n elements (axpy, scale, add, mul; f32, bf16, f16); any n, no tail branch")
def elementwise(p, target) -> KernelBuilder:
    op = OPS[p.op]
    esize = ELEMENT_BYTES[p.dtype]
    lane_bytes, chunk_bytes, tile_bytes = _tile(p)
    dwords = lane_bytes // 4                   # per lane per access: 1, 2 or 4
    half = esize == 2
    tensors = _tensors(op)
    alu = _Alu(p, target, op)

    k = KernelBuilder(p.name, target, workgroup_size=p.block)
    k.comment(f"{op.formula} over n {p.dtype} elements; workgroup g, lane t, chunk u < {p.unroll} handle "
              f"{p.vec} elements at (g*{p.unroll} + u)*{p.block * p.vec} + t*{p.vec}")
    for t in tensors:
        access = {"in": "read_only", "inout": "read_write", "out": "write_only"}[_role(op, t)]
        k.args.pointer(t, p.dtype, access)
    if op.alpha:
        k.args.value("alpha", "f32")
    k.args.value("n", "u32")

    # ---------------------------------------------------------------- arguments and buffer resources
    k.comment("kernel arguments: each pointer lands in words 0-1 of its buffer resource (V#)")
    rsrc = {t: k.sgpr(4, f"{t}_rsrc", kernel=True) for t in tensors}
    for t in tensors:
        k.s_load_dwordx2(rsrc[t][0:2], k.kernarg_ptr, k.args[t].offset, comment=f"{t}: base address")
    alpha = None
    if op.alpha:
        alpha = k.sgpr(1, "alpha", kernel=True)
        k.s_load_dword(alpha, k.kernarg_ptr, k.args["alpha"].offset, comment="alpha (f32)")
    n = k.sgpr(1, "n", kernel=True)
    k.s_load_dword(n, k.kernarg_ptr, k.args["n"].offset, comment="n: elements per tensor")

    k.comment(f"byte offset of this lane's first vector: g*{tile_bytes} + t*{lane_bytes} (while the loads fly)")
    offsets = k.vgpr(p.unroll, "offset", align=1, kernel=True)   # used one at a time: no pair alignment
    wg_base = k.sgpr(1, "wg_base")
    k.s_mul_i32(wg_base, k.workgroup_id["x"], tile_bytes, comment="workgroup's first byte")
    k.v_lshlrev_b32(offsets[0], _log2(lane_bytes), k.tid, comment="lane's first byte within the chunk")
    k.v_add_u32(offsets[0], wg_base, offsets[0], comment="chunk 0")
    k.free(wg_base)
    for u in range(1, p.unroll):
        k.v_add_u32(offsets[u], u * chunk_bytes, offsets[0], comment=f"chunk {u}: {u} x {chunk_bytes} bytes further")

    k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")
    k.comment("V# words 1-3: raw buffer (stride 0) of num_records bytes; dword 3 selects 32-bit data (gfx9)")
    nbytes = k.sgpr(1, "num_records", kernel=True)
    k.s_lshl_b32(nbytes, n, _log2(esize), comment=f"n*{esize}: the tensor's bytes")
    if half:
        k.s_and_b32(nbytes, nbytes, -4, comment="whole dwords only: an odd last element goes through the tail")
    for t in tensors:
        k.s_and_b32(rsrc[t][1], rsrc[t][1], 0xFFFF, comment=f"{t}: base bits 47:32; stride 0, no swizzle")
        k.s_mov_b32(rsrc[t][2], nbytes, comment=f"{t}: num_records; lanes past it load 0, store nothing")
        k.s_mov_b32(rsrc[t][3], BUFFER_DWORD3, comment=f"{t}: DATA_FORMAT 32, NUM_FORMAT 0")

    # ---------------------------------------------------------------- loads
    load = {1: k.buffer_load_dword, 2: k.buffer_load_dwordx2, 4: k.buffer_load_dwordx4}[dwords]
    store = {1: k.buffer_store_dword, 2: k.buffer_store_dwordx2, 4: k.buffer_store_dwordx4}[dwords]
    data = {t: k.vgpr(dwords * p.unroll, t, kernel=True) for t in op.inputs}
    k.comment(f"load: {len(op.inputs)} x {p.unroll} vectors of {lane_bytes} bytes per lane, all in flight at once")
    for u in range(p.unroll):
        for t in op.inputs:
            load(data[t][u * dwords:(u + 1) * dwords], offsets[u], rsrc[t], 0, offen=True,
                 comment=f"{t}, chunk {u}")

    # ---------------------------------------------------------------- compute, in place
    result = data[op.output] if op.output in data else data[op.inputs[0]]
    held = len(op.inputs)
    alu.begin(k)
    for u in range(p.unroll):
        later = (p.unroll - 1 - u) * held
        k.wait(vmcnt=min(later, target.max_vmcnt),
               why=f"chunk {u} has landed" + (f" ({later} later load{'s' * (later > 1)} may still be in flight)"
                                               if later else ""))
        k.comment(f"compute chunk {u}: {op.formula}" + (" in fp32" if half else ""))
        for j in range(u * dwords, (u + 1) * dwords):
            alu.dword(k, result[j], {t: data[t][j] for t in op.inputs}, alpha)

    # ---------------------------------------------------------------- stores
    k.comment(f"store {op.output}: lanes past num_records are dropped by the buffer range check")
    for u in range(p.unroll):
        store(result[u * dwords:(u + 1) * dwords], offsets[u], rsrc[op.output], 0, offen=True,
              comment=f"{op.output}, chunk {u}")

    if half:
        _tail(k, op, alu, rsrc, n, nbytes, alpha)
    else:
        k.free(k.tid)
    alu.end(k)
    return k


def _tail(k, op, alu, rsrc, n, nbytes, alpha):
    """n odd: element n-1 sits alone in a dword the main pass left out; lane 0 of workgroup 0 does it
    with 2-byte accesses, every other lane gets an out-of-range offset (no branch)."""
    k.comment("tail: if n is odd, lane 0 of workgroup 0 handles element n-1 with 2-byte accesses; "
              "every other lane's offset is out of range")
    k.v_cmp_eq_u32(VCC, 0, k.tid, comment="vcc: lane 0 (compared early: read below, not next)")
    soff = k.sgpr(1, "tail_offset")
    odd = k.sgpr(1, "n_odd")
    k.s_lshl_b32(soff, n, 1, comment="n*2")
    k.s_sub_u32(soff, soff, 2, comment="byte offset of element n-1")
    k.s_and_b32(odd, n, 1, comment="scc: n is odd")
    k.s_cselect_b32(soff, soff, OOB_INLINE, comment="even n: nothing to do")
    k.s_cmp_eq_u32(k.workgroup_id["x"], 0, comment="scc: workgroup 0")
    k.s_cselect_b32(soff, soff, OOB_INLINE, comment="only workgroup 0")
    k.free(odd)
    voff = k.vgpr(1, "tail_offset")
    k.v_mov_b32(voff, soff)
    k.v_cndmask_b32(voff, OOB_INLINE, voff, VCC, comment="only lane 0")
    k.free(k.tid, soff)
    k.s_lshl_b32(nbytes, n, 1, comment="exact size n*2: element n-1 is in range for 2-byte accesses")
    for t in rsrc:
        k.s_mov_b32(rsrc[t][2], nbytes, comment=f"{t}: exact num_records")
    vals = {t: k.vgpr(1, f"{t}_tail") for t in op.inputs}
    for t in op.inputs:
        k.buffer_load_ushort(vals[t], voff, rsrc[t], 0, offen=True, comment=f"{t}[n-1]")
    k.wait(vmcnt=0, why="the tail elements have landed")
    out = vals[op.output] if op.output in vals else vals[op.inputs[0]]
    alu.single(k, out, vals, alpha)
    k.buffer_store_short(out, voff, rsrc[op.output], 0, offen=True, comment=f"{op.output}[n-1]")
    k.free(voff, *vals.values())


class _Alu:
    """The arithmetic: fp32 ops, and unpack/round/pack for 16-bit types."""

    def __init__(self, p, target, op: ElementwiseOp):
        self.p, self.target, self.op = p, target, op
        self.dtype = p.dtype

    def begin(self, k):
        if self.dtype == "f32":
            return
        self.f32 = {t: k.vgpr(2, f"{t}_f32") for t in self.op.inputs}   # [0]: low element, [1]: high
        self.conv = Converter(k, self.dtype)        # unpack / round to nearest even / pack (isagen.prims)

    def end(self, k):
        if self.dtype == "f32":
            return
        k.free(*self.f32.values())
        self.conv.release()

    # ------------------------------------------------------------------ fp32 math
    def math(self, k, dst, src: dict, alpha):
        name = self.p.op
        if name == "axpy":
            k.v_fma_f32(dst, alpha, src["x"], src["y"], comment="alpha*x + y (one rounding)")
        elif name == "scale":
            k.v_mul_f32(dst, alpha, src["x"], comment="alpha*x")
        elif name == "add":
            k.v_add_f32(dst, src["x"], src["y"], comment="x + y")
        elif name == "mul":
            k.v_mul_f32(dst, src["x"], src["y"], comment="x * y")
        else:
            raise AssertionError(name)

    # ------------------------------------------------------------------ one dword of each input
    def dword(self, k, dst, src: dict, alpha):
        if self.dtype == "f32":
            self.math(k, dst, src, alpha)
            return
        for t, reg in src.items():
            self.unpack(k, self.f32[t], reg, t)
        lo = {t: r[0] for t, r in self.f32.items()}
        hi = {t: r[1] for t, r in self.f32.items()}
        first = self.op.inputs[0]
        self.math(k, lo[first], lo, alpha)
        self.math(k, hi[first], hi, alpha)
        self.pack(k, dst, lo[first], hi[first])

    def unpack(self, k, pair, reg, name):
        self.conv.unpack(pair[0], pair[1], reg, name)

    def pack(self, k, dst, lo, hi):
        self.conv.pack(dst, lo, hi)

    # ------------------------------------------------------------------ the tail's single element
    def single(self, k, dst, src: dict, alpha):
        lo = {t: self.f32[t][0] for t in src}
        for t, reg in src.items():
            self.conv.unpack_low(lo[t], reg, t)
        first = self.op.inputs[0]
        self.math(k, lo[first], lo, alpha)
        self.conv.pack_low(dst, lo[first])


def _log2(x: int) -> int:
    assert x > 0 and x & (x - 1) == 0, x
    return x.bit_length() - 1
