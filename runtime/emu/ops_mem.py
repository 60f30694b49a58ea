"""Memory instructions other than DS: SMEM (scalar loads/stores), MUBUF (buffer resources), GLOBAL,
FLAT and SCRATCH, including ``buffer_load ... lds`` / ``global_load_lds_*`` (LDS DMA).

Global accesses are checked against the device's allocations on every access: a lane whose access is
not wholly inside one allocation is reported (``oob-global``) and, when reports are collected, reads
0 and has its store dropped.  Buffer instructions first apply the resource's range check
(``num_records``): an out-of-range lane loads 0 and its store is dropped, silently, as on the
hardware.  Bytes moved are counted per active, in-range lane into the launch statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
else:       # numpy, or CuPy while a CUDA launch runs (xp.py)
    from isagen.runtime.emu.xp import np

from isagen.runtime.emu import cuda_kernels
from isagen.runtime.emu import numerics as nx
from isagen.runtime.emu import report as R
from isagen.runtime.emu import xp as X
from isagen.runtime.emu.access import (
    PRIVATE_BASE,
    SHARED_BASE,
    CompileError,
    is_sreg,
    is_vreg,
    read32,
    read64,
    vwrite_masked,
)
from isagen.runtime.emu.ops_ds import _lds_check, lds_bytes_rw
from isagen.runtime.emu.steps import CompiledStep
from isagen.runtime.emu.wave import EXEC_LO, M0
from isagen.targets import get_target

U8, U16, U32, U64 = np.uint8, np.uint16, np.uint32, np.uint64
I64 = np.int64


# ============================================================================ shared helpers

def _oob(st, inst, ws, bad, addr, nbytes, what):
    """Report lanes ``bad`` ([n, 64] or [n]) whose ``nbytes`` access at ``addr`` is out of bounds."""
    mem = st.run.memory
    b = np.asarray(bad)
    row, lanes = R.first_bad(b if b.ndim == 2 else b[:, None])
    a = np.asarray(addr)
    a0 = int(a[row, lanes[0]] if a.ndim == 2 else a[row]) if row is not None else 0
    st.run.fault(R.OOB_GLOBAL, inst, f"{what} of {nbytes} bytes at {a0:#x} is outside every allocation "
                 f"({mem.nearest(a0)})", ws, b, address=a0)


def _ws_count(st, ws):
    return st.W if isinstance(ws, slice) else len(ws)


# ============================================================================ SMEM

def compile_smem(inst, idx, ctx) -> CompiledStep:
    name = inst.name
    ops = {o.role: o for o in inst.operands}
    if name in ("s_dcache_inv", "s_dcache_wb", "s_dcache_inv_vol", "s_dcache_wb_vol", "s_dcache_discard",
                "s_dcache_discard_x2", "s_atc_probe", "s_atc_probe_buffer"):
        return CompiledStep(inst, idx, lambda st, ws: None, "smem")
    if name in ("s_memtime", "s_memrealtime"):
        code = ops["sdata"].reg.code

        def ht(st, ws):
            t = int(st.icount.max()) * 4
            st.S[code, ws] = U32(t & 0xFFFFFFFF)
            st.S[code + 1, ws] = U32(t >> 32)
        s = CompiledStep(inst, idx, ht, "smem", counter="smem", result="smem")
        return s
    is_buffer = name.startswith("s_buffer_")
    load = "_load_" in name
    store = "_store_" in name
    if not (load or store):
        if "_atomic_" in name:
            return _compile_smem_atomic(inst, idx, ops, is_buffer, ctx)
        raise CompileError(f"{name} is not modelled")
    sdata = ops["sdata"]
    ndw = sdata.reg.count
    dcode = sdata.reg.code
    base_op = ops["sbase"]
    imm = ops["offset"].value if "offset" in ops else 0
    soff = read32(ops["soffset"], ctx, lanes=False) if "soffset" in ops else None
    bcode = base_op.reg.code

    def address(st, ws):
        lo = st.S[bcode, ws].astype(U64)
        hi = st.S[bcode + 1, ws].astype(U64) & (U64(0xFFFF) if is_buffer else U64(0xFFFFFFFF))
        off = np.full(lo.shape, imm & 0xFFFFFFFF, U64)
        if soff is not None:
            off = off + np.asarray(soff(st, ws), U32).astype(U64)
        return (lo | (hi << U64(32))), off

    def h(st, ws):
        base, off = address(st, ws)
        addr = (base + off) & ~U64(3)
        n = addr.shape[0]
        nb = 4 * ndw
        inrange = None
        if is_buffer:
            num = st.S[bcode + 2, ws].astype(U64)
            dw = off[:, None] + U64(4) * np.arange(ndw, dtype=U64)
            inrange = dw < num[:, None]            # per dword
        mem = st.run.memory
        if load:
            ok = mem.check(addr, nb)
            if not ok.all():
                if inrange is not None:
                    # only dwords inside the resource are read
                    per = mem.check((addr[:, None] + U64(4) * np.arange(ndw, dtype=U64)).reshape(-1), 4).reshape(n, ndw)
                    bad = inrange & ~per
                    if bad.any():
                        _oob(st, inst, ws, bad.any(axis=1), addr, nb, "scalar load")
                    data = mem.read((addr[:, None] + U64(4) * np.arange(ndw, dtype=U64)).reshape(-1), 4,
                                    (inrange & per).reshape(-1)).reshape(n, ndw)
                else:
                    _oob(st, inst, ws, ~ok, addr, nb, "scalar load")
                    data = mem.read(addr, nb, ok)
            else:
                data = mem.read(addr, nb)
                if inrange is not None:
                    data = np.where(inrange, data, U32(0))
            st.S[dcode:dcode + ndw, ws] = data.T
            if dcode <= EXEC_LO < dcode + ndw or dcode <= EXEC_LO + 1 < dcode + ndw:
                st.sync_exec(ws)
            st.run.scalar_bytes_read += nb * n
        else:
            vals = st.S[dcode:dcode + ndw, ws].T
            ok = mem.check(addr, nb)
            if inrange is not None:
                ok = ok & inrange.all(axis=1)
            if not mem.check(addr, nb).all():
                _oob(st, inst, ws, ~mem.check(addr, nb), addr, nb, "scalar store")
            mem.write(addr, vals, nb, ok)
            st.run.scalar_bytes_written += nb * int(ok.sum())
    s = CompiledStep(inst, idx, h, "smem", counter="smem", result="smem" if load else None)
    s.is_load = load
    return s


def _smem_atomic_op(op: str, x2: bool):
    """``new = f(old, data, cmp)`` of a scalar atomic (the CDNA3 ISA's SMEM atomic table), on Python ints."""
    mask = (1 << 64) - 1 if x2 else 0xFFFFFFFF
    sign = 1 << (63 if x2 else 31)

    def sx(v):
        return v - (sign << 1) if v & sign else v

    table = {
        "swap": lambda o, d, c: d,
        "cmpswap": lambda o, d, c: d if o == c else o,
        "add": lambda o, d, c: (o + d) & mask,
        "sub": lambda o, d, c: (o - d) & mask,
        "smin": lambda o, d, c: o if sx(o) <= sx(d) else d,
        "umin": lambda o, d, c: min(o, d),
        "smax": lambda o, d, c: o if sx(o) >= sx(d) else d,
        "umax": lambda o, d, c: max(o, d),
        "and": lambda o, d, c: o & d,
        "or": lambda o, d, c: o | d,
        "xor": lambda o, d, c: o ^ d,
        "inc": lambda o, d, c: 0 if o >= d else o + 1,
        "dec": lambda o, d, c: d if (o == 0 or o > d) else o - 1,
    }
    return table.get(op)


def _compile_smem_atomic(inst, idx, ops, is_buffer, ctx) -> CompiledStep:
    """``s_atomic_<op>[_x2]`` / ``s_buffer_atomic_<op>[_x2]``: a read-modify-write of one dword (qword) at
    the wave's scalar address; with GLC the old value returns to ``sdata``.  Waves are applied one after
    another in wave order (several waves hitting one counter each see the previous one's result)."""
    name = inst.name
    rest = name.split("_atomic_", 1)[1]
    x2 = rest.endswith("_x2")
    op = rest.removesuffix("_x2")
    fn = _smem_atomic_op(op, x2)
    if fn is None:
        raise CompileError(f"{name} is not modelled")
    nb = 8 if x2 else 4
    ndw = nb // 4
    sdata = ops["sdata"]
    dcode = sdata.reg.code
    bcode = ops["sbase"].reg.code
    imm = ops["offset"].value if "offset" in ops else 0
    soff = read32(ops["soffset"], ctx, lanes=False) if "soffset" in ops else None
    glc = bool(inst.mods.get("glc") or inst.mods.get("sc0"))

    def h(st, ws):
        waves = np.arange(st.W)[ws]
        lo = st.S[bcode, ws].astype(U64)
        hi = st.S[bcode + 1, ws].astype(U64) & (U64(0xFFFF) if is_buffer else U64(0xFFFFFFFF))
        off = np.full(lo.shape, imm & 0xFFFFFFFF, U64)
        if soff is not None:
            off = off + np.asarray(soff(st, ws), U32).astype(U64)
        addr = ((lo | (hi << U64(32))) + off) & ~U64(nb - 1 if nb == 8 else 3)
        inrange = off + U64(nb) <= st.S[bcode + 2, ws].astype(U64) if is_buffer else np.ones(len(waves), bool)
        mem = st.run.memory
        ok = mem.check(addr, nb)
        if (inrange & ~ok).any():
            _oob(st, inst, ws, inrange & ~ok, addr, nb, "scalar atomic")
        ok = ok & inrange
        for i, w in enumerate(waves):
            if not ok[i]:
                old = 0
            else:
                a = addr[i:i + 1]
                old_dw = mem.read(a, nb)[0]
                old = int(old_dw[0]) | (int(old_dw[1]) << 32 if x2 else 0)
                d_dw = [int(st.S[dcode + j, w]) for j in range(2 * ndw if op == "cmpswap" else ndw)]
                data = d_dw[0] | (d_dw[1] << 32 if x2 else 0)
                cmp = 0
                if op == "cmpswap":
                    cmp = d_dw[ndw] | (d_dw[ndw + 1] << 32 if x2 else 0)
                new = fn(old, data, cmp)
                mem.write(a, np.array([[(new >> (32 * j)) & 0xFFFFFFFF for j in range(ndw)]], U32), nb,
                          np.array([True]))
                st.run.scalar_bytes_read += nb
                st.run.scalar_bytes_written += nb
            if glc:
                for j in range(ndw):
                    st.S[dcode + j, w] = U32((old >> (32 * j)) & 0xFFFFFFFF)
    s = CompiledStep(inst, idx, h, "smem", counter="smem", result="smem" if glc else None)
    s.is_load = glc
    return s


# ============================================================================ vector memory

_SIZES = {"ubyte": 1, "sbyte": 1, "ushort": 2, "sshort": 2, "byte": 1, "short": 2, "dword": 4,
          "dwordx2": 8, "dwordx3": 12, "dwordx4": 16}


def parse_vmem(name: str):
    """(kind, size bytes, signed, d16 ('lo'|'hi'|None), atomic op) of a MUBUF/GLOBAL/FLAT/SCRATCH name."""
    parts = name.split("_")
    rest = parts[1:]
    if rest[0] == "atomic":
        op = "_".join(rest[1:])
        wide = op.endswith("_x2") or op.endswith("_f64")
        base = op[:-3] if op.endswith("_x2") else op
        size = 8 if wide else 4
        if base.startswith("pk_add"):
            size = 4
        return "atomic", size, False, None, base
    kind = rest[0]                     # load / store
    lds = False
    if rest[1] == "lds":
        lds = True
        rest = rest[1:]
    if rest[1] == "format":
        raise CompileError(f"{name}: format conversions are not modelled")
    tname = rest[1]
    d16 = None
    if "d16" in rest:
        d16 = "hi" if rest[-1] == "hi" else "lo"
    if tname not in _SIZES:
        raise CompileError(f"{name}: unknown access type")
    size = _SIZES[tname]
    signed = tname in ("sbyte", "sshort")
    return ("load_lds" if lds else kind), size, signed, d16, None


class VMem:
    """Compiled operands of one vector memory instruction."""

    def __init__(self, inst, ctx):
        self.inst = inst
        self.fam = inst.family
        ops = {}
        for o in inst.operands:
            ops.setdefault(o.role, o)
        self.ops = ops
        self.kind, self.size, self.signed, self.d16, self.atomic = parse_vmem(inst.name)
        m = inst.mods
        self.lds = bool(m.get("lds", 0)) or self.kind == "load_lds"
        if self.lds:
            self.kind = "load_lds"
        self.offset = int(m.get("offset", 0))
        self.glc = bool(m.get("sc0", m.get("glc", 0)))
        self.ctx = ctx


def _data_dst(vm: VMem):
    o = vm.ops.get("vdst") or vm.ops.get("vdata")
    return o


def _lane_load_result(vm: VMem, data, old):
    """Combine loaded data ([n,64,ndw] uint32 or [n,64] for sub-dword) into register values."""
    size, signed, d16 = vm.size, vm.signed, vm.d16
    if size >= 4:
        return [data[..., k] for k in range(size // 4)]
    v = data.astype(U32)
    if signed:
        v = (v.astype(U8).view(np.int8) if size == 1 else v.astype(U16).view(np.int16)).astype(np.int32).view(U32)
    if d16 == "lo":
        return [(old & U32(0xFFFF0000)) | (v & U32(0xFFFF))]
    if d16 == "hi":
        return [(old & U32(0xFFFF)) | ((v & U32(0xFFFF)) << U32(16))]
    return [v]


def _store_values(vm: VMem, st, ws, di):
    size = vm.size
    if size >= 4:
        n = size // 4
        return np.stack([st.V[di + k, ws] for k in range(n)], -1)
    v = st.V[di, ws]
    if vm.d16 == "hi":
        v = v >> U32(16)
    return v


_CACHE_OPS = ("buffer_inv", "buffer_wbl2", "buffer_wbinvl1", "buffer_wbinvl1_vol")


def compile_vmem(inst, idx, ctx) -> CompiledStep:
    if inst.name in _CACHE_OPS:
        # cache write-back / invalidate (fences at agent scope): memory here is coherent; they still
        # occupy vmcnt like any vector memory instruction
        return CompiledStep(inst, idx, lambda st, ws: None, "vmem", counter="vm")
    vm = VMem(inst, ctx)
    fam = inst.family
    if fam in ("MUBUF", "MTBUF"):
        if fam == "MTBUF":
            raise CompileError(f"{inst.name}: typed buffer (MTBUF) formats are not modelled")
        addr_fn = _buffer_address(vm, ctx)
    elif fam == "GLOBAL":
        addr_fn = _global_address(vm, ctx)
    elif fam == "FLAT":
        addr_fn = _flat_address(vm, ctx)
    elif fam == "SCRATCH":
        addr_fn = _scratch_address(vm, ctx)
    else:
        raise CompileError(f"{inst.name}: unknown memory family {fam}")
    kind = vm.kind
    if kind == "atomic":
        fn = _atomic_handler(vm, addr_fn, ctx)
        s = CompiledStep(inst, idx, fn, "vmem" if fam != "FLAT" else "flat", counter="vm",
                 result="vm" if vm.glc else None)
        s.is_load = vm.glc
        return s
    if kind == "load_lds":
        fn = _lds_dma_handler(vm, addr_fn, ctx)
        s = CompiledStep(inst, idx, fn, "lds_dma", counter="vm")
        s.lds_write = True
        return s
    if kind == "load":
        fn = _load_handler(vm, addr_fn, ctx)
        s = CompiledStep(inst, idx, fn, "vmem" if fam != "FLAT" else "flat", counter="vm", result="vm")
        s.is_load = True
        if fam == "FLAT":
            s.flags = {"also_lgkm": True}
        return s
    fn = _store_handler(vm, addr_fn, ctx)
    s = CompiledStep(inst, idx, fn, "vmem" if fam != "FLAT" else "flat", counter="vm")
    if fam == "FLAT":
        s.flags = {"also_lgkm": True}
    return s


# ---------------------------------------------------------------------------- address forms
# each address fn: (st, ws) -> (space, addr [n,64] uint64, inrange [n,64,ncomp] bool or None)
# space: "global" | "scratch" | "flat"

def _global_address(vm: VMem, ctx):
    ops = vm.ops
    a = ops["addr"]
    off = vm.offset
    saddr = ops.get("saddr")
    if saddr is not None and saddr.kind == "reg":
        scode = saddr.reg.code
        vi = ctx.vindex(a.reg, 1) if is_vreg(a) else None

        def f(st, ws):
            base = st.S[scode, ws].astype(U64) | (st.S[scode + 1, ws].astype(U64) << U64(32))
            v = st.V[vi, ws].astype(U64) if vi is not None else U64(0)
            return "global", (base[:, None] + v + U64(off & 0xFFFFFFFFFFFFFFFF)), None
        return f
    r = read64(a, ctx)

    def g(st, ws):
        v = np.asarray(r(st, ws), U64)
        return "global", v + U64(off & 0xFFFFFFFFFFFFFFFF), None
    return g


def _flat_address(vm: VMem, ctx):
    r = read64(vm.ops["addr"], ctx)
    off = vm.offset

    def f(st, ws):
        return "flat", np.asarray(r(st, ws), U64) + U64(off & 0xFFFFFFFFFFFFFFFF), None
    return f


def _scratch_address(vm: VMem, ctx):
    ops = vm.ops
    a = ops.get("addr")
    saddr = ops.get("saddr")
    off = vm.offset
    vi = ctx.vindex(a.reg, 1) if (a is not None and is_vreg(a)) else None
    sc = read32(saddr, ctx) if (saddr is not None and saddr.kind == "reg") else None

    def f(st, ws):
        n = _ws_count(st, ws)
        v = st.V[vi, ws].astype(I64) if vi is not None else np.zeros((n, 64), I64)
        if sc is not None:
            v = v + np.asarray(sc(st, ws), U32).astype(I64)
        return "scratch", (v + off).astype(U64), None
    return f


def _buffer_address(vm: VMem, ctx):
    m = vm.inst.mods
    ops = vm.ops
    offen, idxen = bool(m.get("offen", 0)), bool(m.get("idxen", 0))
    rs = ops["srsrc"].reg.code
    soff = read32(ops["soffset"], ctx, lanes=False) if "soffset" in ops else (lambda st, ws: U32(0))
    va = ops.get("vaddr")
    vi = ctx.vindex(va.reg) if (va is not None and va.kind == "reg" and (offen or idxen)) else None
    inst_off = vm.offset & 0xFFF
    size = vm.size
    ncomp = max(size // 4, 1)

    def f(st, ws):
        w0, w1, w2, w3 = (st.S[rs + k, ws] for k in range(4))
        base = w0.astype(U64) | ((w1 & U32(0xFFFF)).astype(U64) << U64(32))
        stride = ((w1 >> U32(16)) & U32(0x3FFF)).astype(U64)
        swizzle = (w1 >> U32(31)) & U32(1)
        add_tid = (w3 >> U32(23)) & U32(1)
        if swizzle.any():
            st.run.fault(R.UNSUPPORTED, vm.inst, "swizzled buffer resources (swizzle_enable) are not modelled",
                         ws, None)
        num = w2.astype(U64)
        n = w0.shape[0]
        lane = np.arange(64, dtype=U64)
        index = np.zeros((n, 64), U64)
        if idxen:
            index = st.V[vi, ws].astype(U64)
        if add_tid.any():
            index = index + np.where(add_tid[:, None] == 1, lane, U64(0))
        voff = np.zeros((n, 64), U64)
        if offen:
            voff = st.V[vi + (1 if idxen else 0), ws].astype(U64)
        offset = voff + U64(inst_off)
        so = np.asarray(soff(st, ws), U32).astype(U64)
        so = np.broadcast_to(so, (n,))
        addr = base[:, None] + so[:, None] + offset + index * stride[:, None]
        # range check (soffset is not part of it); per dword for multi-dword accesses
        # gfx9 (gfx942/gfx950 included): num_records counts bytes unless the instruction uses IDXEN with a
        # non-zero stride (then records): Mesa's si_make_buffer_descriptor/ac_build_buffer_descriptor note
        # on NUM_RECORDS ("GFX9: for VMEM and inst.IDXEN == 0 or STRIDE == 0, it's in byte units").  AITER's
        # GEMMs set stride 4 with offen-only access and a byte-sized num_records.
        byte_off = offset if idxen else offset + index * stride[:, None]
        comp = byte_off[..., None] + U64(4) * np.arange(ncomp, dtype=U64)
        raw = ((stride == 0) | (not idxen))[:, None, None]
        # a component is in range only when all its bytes are (LLVM AMDGPUUsage, "relaxed buffer
        # OOB mode": a dword straddling num_records is out of bounds as a whole)
        inr_raw = comp + U64(min(size, 4)) <= num[:, None, None]
        inr_str = (index < num[:, None])[..., None] & np.ones((1, 1, ncomp), bool)
        inrange = np.where(raw, inr_raw, inr_str)
        return "global", addr, inrange
    so_op = ops.get("soffset")
    if so_op is None or so_op.kind in ("const", "literal", "imm") or (is_sreg(so_op) and so_op.reg.code < 128):
        # the cuda engine's kernel of the same (cuda_kernels.buffer_addr): soffset a constant or an SGPR
        const = 0 if so_op is None or so_op.kind == "reg" else \
            (so_op.value if so_op.kind == "imm" else so_op.const_bits("b32")) & 0xFFFFFFFF
        code = so_op.reg.code if so_op is not None and so_op.kind == "reg" else -1
        f.cuda_buffer = (rs, vi, offen, idxen, inst_off, code, const)      # type: ignore[attr-defined]
    return f


# ---------------------------------------------------------------------------- handlers

def _check_global(st, vm, ws, addr, act, nbytes, what):
    mem = st.run.memory
    ok = mem.check(addr, nbytes)
    bad = act & ~ok
    if bad.any():
        _oob(st, vm.inst, ws, bad, addr, nbytes, what)
    return act & ok


def _check_comps(st, vm, ws, addr, comp_act, what):
    """Per-dword bounds check of a buffer access whose dwords are range-checked one by one."""
    mem = st.run.memory
    n = comp_act.shape[-1]
    ca = addr[..., None] + U64(4) * np.arange(n, dtype=U64)
    ok = mem.check(ca.reshape(-1), 4).reshape(ca.shape)
    bad = comp_act & ~ok
    if bad.any():
        _oob(st, vm.inst, ws, bad.any(-1), addr, 4 * n, what)
    return comp_act & ok


def _flat_split(st, addr):
    hi = (addr >> U64(32))
    lds = hi == U64(SHARED_BASE >> 32)
    priv = hi == U64(PRIVATE_BASE >> 32)
    return lds, priv


def _scratch_rw(st, vm, ws, off, act, nbytes, data=None):
    """Per-lane private memory access: off [n,64] byte offsets into each lane's private segment."""
    sc = st.scratch
    inst = vm.inst
    if sc is None or sc.shape[2] == 0:
        if act.any():
            st.run.fault(R.OOB_GLOBAL, inst, "scratch access but the kernel has no private segment "
                         "(private_segment_fixed_size is 0)", ws, act)
        return None
    size = sc.shape[2]
    o = off.astype(I64)
    ok = (o >= 0) & (o + nbytes <= size)
    bad = act & ~ok
    if bad.any():
        row, lanes = R.first_bad(bad)
        st.run.fault(R.OOB_GLOBAL, inst, f"scratch access of {nbytes} bytes at private offset "
                     f"{int(o[row, lanes[0]])} is past the {size}-byte private segment", ws, bad)
    act = act & ok
    waves = np.arange(st.W)[ws]
    wv = np.broadcast_to(waves[:, None], o.shape)
    ln = np.broadcast_to(np.arange(64)[None, :], o.shape)
    o = np.where(act, o, 0)
    idx = o[..., None] + np.arange(nbytes)
    if data is None:
        b = sc[wv[..., None], ln[..., None], idx]
        b = np.where(act[..., None], b, U8(0))
        return b
    bytes_ = data
    wsel = act
    sc[wv[wsel][:, None], ln[wsel][:, None], idx[wsel]] = bytes_[wsel]
    return None


def _to_bytes(vals, nbytes):
    """uint32 values [...] or [..., ndw] -> bytes [..., nbytes]."""
    v = np.ascontiguousarray(vals, dtype=U32)
    if nbytes >= 4:
        return v.view(U8).reshape(v.shape[:-1] + (nbytes,))
    return v[..., None].view(U8).reshape(v.shape + (4,))[..., :nbytes]


def _from_bytes(b, nbytes):
    b = np.ascontiguousarray(b, dtype=U8)
    if nbytes >= 4:
        return b.view(U32).reshape(b.shape[:-1] + (nbytes // 4,))
    pad = np.zeros(b.shape[:-1] + (4,), U8)
    pad[..., :nbytes] = b
    return pad.view(U32).reshape(b.shape[:-1])


def _lds_flat_rw(st, vm, ws, off, act, nbytes, data=None):
    """FLAT access that falls in the LDS aperture."""
    return lds_bytes_rw(st, vm.inst, ws, off, act, nbytes, data)


def _lane_addresses(addr_fn, st, ws):
    """(space, [n, 64] addresses, in-range mask or None, EXEC) of a vector memory access."""
    space, addr, inrange = addr_fn(st, ws)
    e = st.EXEC[ws]
    return space, np.broadcast_to(addr, (e.shape[0], 64)), inrange, e


def _cuda_addresses(addr_fn, st, ws, size: int, fast: bool = True):
    """_lane_addresses plus the counters of the cuda engine's MUBUF address kernel: a MUBUF access of the
    cuda engine computes its addresses and range checks in one kernel (cuda_kernels.buffer_addr) and
    leaves EXEC (None) to the kernel that follows (``fast``: the caller runs one)."""
    desc = getattr(addr_fn, "cuda_buffer", None)
    if fast and desc is not None and st.san is None and X.active() == "cuda":
        addr, inrange, cnt = cuda_kernels.buffer_addr(st, ws, desc, size)
        return "global", addr, inrange, None, cnt
    return (*_lane_addresses(addr_fn, st, ws), None)


def _load_handler(vm: VMem, addr_fn, ctx):
    dst = _data_dst(vm)
    di = ctx.vindex(dst.reg)
    size = vm.size
    ncomp = max(size // 4, 1)

    def h(st, ws):
        space, addr, inrange, e, cnt = _cuda_addresses(addr_fn, st, ws, size, size >= 4)
        if space == "global" and size >= 4 and st.san is None and X.active() == "cuda":
            bad, got, swz = cuda_kernels.vmem_load(st, ws, di, size, addr, inrange, cnt)      # one kernel
            st.run.global_access(size, got, write=False)
            if swz:                   # the array code reports the swizzled resource
                addr_fn(st, ws)
            if bad:                   # report the accesses out of every allocation (D is written)
                e = st.EXEC[ws]
                if inrange is not None:
                    _check_comps(st, vm, ws, addr, e[..., None] & inrange, "load")
                else:
                    _check_global(st, vm, ws, addr, e, size, "load")
            return
        n = e.shape[0]
        mem = st.run.memory
        if space == "scratch":
            b = _scratch_rw(st, vm, ws, addr, e, size)
            data = _from_bytes(b, size) if b is not None else np.zeros((n, 64, ncomp) if size >= 4 else (n, 64), U32)
        else:
            lds_m = priv_m = None
            glob = e
            if space == "flat":
                lds_m, priv_m = _flat_split(st, addr)
                glob = e & ~lds_m & ~priv_m
            if inrange is not None and size >= 4:
                comp_act = _check_comps(st, vm, ws, addr, glob[..., None] & inrange, "load")
                if comp_act.all(-1).sum() == comp_act.any(-1).sum():
                    okg = comp_act.all(-1)
                    data = mem.read(addr, size, okg)
                else:
                    data = np.stack([mem.read(addr + U64(4 * c), 4, comp_act[..., c])[..., 0]
                                     for c in range(size // 4)], -1)
                st.run.global_access(size, 4 * int(np.count_nonzero(comp_act)), write=False)
            else:
                act = glob if inrange is None else glob & inrange[..., 0]
                okg = _check_global(st, vm, ws, addr, act, size, "load")
                data = mem.read(addr, size, okg)
                st.run.global_access(size, size * int(np.count_nonzero(okg)), write=False)
            if lds_m is not None and (lds_m & e).any():
                b = _lds_flat_rw(st, vm, ws, (addr & U64(0xFFFFFFFF)), lds_m & e, size)
                ld = _from_bytes(b, size)
                data = np.where((lds_m & e)[..., None] if size >= 4 else (lds_m & e), ld, data)
            if priv_m is not None and (priv_m & e).any():
                b = _scratch_rw(st, vm, ws, (addr & U64(0xFFFFFFFF)), priv_m & e, size)
                if b is not None:
                    pd = _from_bytes(b, size)
                    data = np.where((priv_m & e)[..., None] if size >= 4 else (priv_m & e), pd, data)
        old = st.V[di, ws] if size < 4 else None
        vals = _lane_load_result(vm, data, old)
        for k, v in enumerate(vals):
            vwrite_masked(st, ws, di + k, v, e)
    return h


def _store_handler(vm: VMem, addr_fn, ctx):
    src = vm.ops.get("data") or vm.ops.get("vdata")
    di = ctx.vindex(src.reg)
    size = vm.size

    def h(st, ws):
        space, addr, inrange, e = _lane_addresses(addr_fn, st, ws)
        vals = _store_values(vm, st, ws, di)
        mem = st.run.memory
        if space == "scratch":
            _scratch_rw(st, vm, ws, addr, e, size, _to_bytes(vals, size))
            return
        lds_m = priv_m = None
        glob = e
        if space == "flat":
            lds_m, priv_m = _flat_split(st, addr)
            glob = e & ~lds_m & ~priv_m
        if inrange is not None and size >= 4 and inrange.shape[-1] > 1:
            # per-dword range check: store the in-range dwords one by one
            comp_act = _check_comps(st, vm, ws, addr, glob[..., None] & inrange, "store")
            for k in range(size // 4):
                mk = comp_act[..., k]
                mem.write(addr + U64(4 * k), vals[..., k:k + 1], 4, mk)
                st.run.global_access(size, 4 * int(np.count_nonzero(mk)), write=True)
        else:
            act = glob if inrange is None else glob & inrange[..., 0]
            okg = _check_global(st, vm, ws, addr, act, size, "store")
            mem.write(addr, vals, size, okg)
            st.run.global_access(size, size * int(np.count_nonzero(okg)), write=True)
        if lds_m is not None and (lds_m & e).any():
            _lds_flat_rw(st, vm, ws, addr & U64(0xFFFFFFFF), lds_m & e, size, _to_bytes(vals, size))
        if priv_m is not None and (priv_m & e).any():
            _scratch_rw(st, vm, ws, addr & U64(0xFFFFFFFF), priv_m & e, size, _to_bytes(vals, size))
    return h


def _lds_dma_handler(vm: VMem, addr_fn, ctx):
    """buffer_load_* lds / global_load_lds_*: memory -> LDS at M0 base + lane stride, no VGPR write."""
    size = vm.size
    if size not in ctx_lds_widths(ctx):
        raise CompileError(f"{vm.inst.name}: {size}-byte LDS DMA is not available on {ctx.target}")
    stride = 4 if size <= 4 else 16
    add_off = vm.offset & 0xFFF if ctx.lds_dma_inst_offset else 0
    inst = vm.inst

    def h(st, ws):
        space, addr, inrange, e, cnt = _cuda_addresses(addr_fn, st, ws, size)
        if st.san is None and X.active() == "cuda":        # one kernel (cuda_kernels.py)
            g_bad, l_bad, got, put, swz = cuda_kernels.lds_dma(st, ws, size, addr, inrange, add_off, stride, cnt)
            st.run.global_access(size, got, write=False)
            st.run.lds_bytes_written += put
            if swz:           # the array code reports the swizzled resource
                addr_fn(st, ws)
            if g_bad or l_bad:          # report what the kernel found (its data is written)
                e = st.EXEC[ws]
            if g_bad:
                _check_global(st, vm, ws, addr, e if inrange is None else e & inrange.any(-1), size, "LDS-DMA load")
            if l_bad:
                m0 = (st.S[M0, ws] & U32(0x3FFFF)).astype(np.int64)
                _lds_check(st, inst, ws, m0[:, None] + add_off + stride * np.arange(64)[None, :], e, size)
            return
        mem = st.run.memory
        act = e if inrange is None else e & inrange.any(-1)
        okg = _check_global(st, vm, ws, addr, act, size, "LDS-DMA load")
        data = mem.read(addr, size, okg)
        if inrange is not None and size >= 4:
            data = np.where(inrange & okg[..., None], data, U32(0))
        st.run.global_access(size, size * int(np.count_nonzero(okg)), write=False)
        m0 = (st.S[M0, ws] & U32(0x3FFFF)).astype(np.int64)
        lds_addr = m0[:, None] + add_off + stride * np.arange(64)[None, :]
        # lanes the range check dropped write zeros (the DMA still writes its slot) [verify]
        lds_bytes_rw(st, inst, ws, lds_addr, e, size, _to_bytes(data, size), dma=True)
    return h


def ctx_lds_widths(ctx):
    return get_target(ctx.target).lds_dma_widths


# ---------------------------------------------------------------------------- atomics

_ATOMIC = {
    "swap": lambda old, d: d, "add": lambda old, d: old + d, "sub": lambda old, d: old - d,
    "smin": lambda old, d: np.minimum(old.view(_signed(old)), d.view(_signed(d))).view(old.dtype),
    "smax": lambda old, d: np.maximum(old.view(_signed(old)), d.view(_signed(d))).view(old.dtype),
    "umin": np.minimum, "umax": np.maximum,
    "and": lambda old, d: old & d, "or": lambda old, d: old | d, "xor": lambda old, d: old ^ d,
    "inc": lambda old, d: np.where(old >= d, old.dtype.type(0), old + old.dtype.type(1)),
    "dec": lambda old, d: np.where((old == 0) | (old > d), d, old - old.dtype.type(1)),
    "add_f32": lambda old, d: (old.view(np.float32) + d.view(np.float32)).view(U32),
    "add_f64": lambda old, d: (old.view(np.float64) + d.view(np.float64)).view(U64),
    "min_f64": lambda old, d: np.fmin(old.view(np.float64), d.view(np.float64)).view(U64),
    "max_f64": lambda old, d: np.fmax(old.view(np.float64), d.view(np.float64)).view(U64),
    "pk_add_f16": lambda old, d: _pk_add(old, d, "f16"),
    "pk_add_bf16": lambda old, d: _pk_add(old, d, "bf16"),
}


def _signed(a):
    return np.int64 if a.dtype == U64 else np.int32


def _pk_add(old, d, kind):
    if kind == "f16":
        lo = nx.f32_to_f16(nx.f16_to_f32(old) + nx.f16_to_f32(d))
        hi = nx.f32_to_f16(nx.f16_to_f32(old >> U32(16)) + nx.f16_to_f32(d >> U32(16)))
    else:
        lo = nx.f32_to_bf16(nx.bf16_to_f32(old) + nx.bf16_to_f32(d))
        hi = nx.f32_to_bf16(nx.bf16_to_f32(old >> U32(16)) + nx.bf16_to_f32(d >> U32(16)))
    return nx.pack16(lo, hi)


def _atomic_handler(vm: VMem, addr_fn, ctx):
    op = vm.atomic
    size = vm.size
    wide = size == 8
    dt = U64 if wide else U32
    data_op = vm.ops.get("data") or vm.ops.get("vdata")
    di = ctx.vindex(data_op.reg)
    cmpswap = op == "cmpswap"
    if not cmpswap and op not in _ATOMIC:
        raise CompileError(f"{vm.inst.name} is not modelled")
    fn = _ATOMIC.get(op)
    ret = vm.glc
    dst = vm.ops.get("vdst") if vm.fam != "MUBUF" else data_op
    dsti = ctx.vindex(dst.reg) if (ret and dst is not None) else None

    def h(st, ws):
        space, addr, inrange = addr_fn(st, ws)
        if space != "global":
            lds_m, priv_m = _flat_split(st, addr)
            if (lds_m | priv_m).any():
                st.run.fault(R.UNSUPPORTED, vm.inst, "flat atomics on LDS or scratch are not modelled", ws,
                             lds_m | priv_m)
        e = st.EXEC[ws]
        n = e.shape[0]
        addr = np.broadcast_to(addr, (n, 64))
        act = e if inrange is None else e & inrange[..., 0]
        okg = _check_global(st, vm, ws, addr, act, size, "atomic")
        mem = st.run.memory

        def reg(i, k):
            return st.V[i + k, ws]
        if wide:
            data = reg(di, 0).astype(U64) | (reg(di, 1).astype(U64) << U64(32))
            cmp = (reg(di, 2).astype(U64) | (reg(di, 3).astype(U64) << U64(32))) if cmpswap else None
        else:
            data = reg(di, 0).copy()
            cmp = reg(di, 1).copy() if cmpswap else None
        flat_a = addr[okg]
        dvals = data[okg]
        cvals = cmp[okg] if cmp is not None else None
        olds = np.zeros(flat_a.shape, dt)
        # apply in lane order; lanes hitting the same address are serialised round by round
        remaining = np.arange(flat_a.size)
        while remaining.size:
            a = flat_a[remaining]
            _, first = np.unique(a, return_index=True)
            sel = remaining[first]
            aa = flat_a[sel]
            cur = mem.read(aa, size)
            cur = cur[..., 0] if not wide else (cur[..., 0].astype(U64) | (cur[..., 1].astype(U64) << U64(32)))
            cur = cur.astype(dt)
            olds[sel] = cur
            if cmpswap:
                new = np.where(cur == cvals[sel], dvals[sel], cur).astype(dt)
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    new = np.asarray(fn(cur, dvals[sel].astype(dt))).astype(dt)
            if wide:
                words = np.stack([(new & U64(0xFFFFFFFF)).astype(U32), (new >> U64(32)).astype(U32)], -1)
            else:
                words = new[:, None]
            mem.write(aa, words, size, np.ones(aa.shape, bool))
            remaining = np.delete(remaining, first)
        st.run.global_access(size, size * int(okg.sum()), write=False)
        st.run.global_access(size, size * int(okg.sum()), write=True)
        if dsti is not None:
            res = np.zeros((n, 64), dt)
            res[okg] = olds
            if wide:
                vwrite_masked(st, ws, dsti, (res & U64(0xFFFFFFFF)).astype(U32), e)
                vwrite_masked(st, ws, dsti + 1, (res >> U64(32)).astype(U32), e)
            else:
                vwrite_masked(st, ws, dsti, res.astype(U32), e)
    return h

