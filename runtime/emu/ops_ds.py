"""LDS (DS) instructions: reads, writes, read2/write2, atomics, swizzle/permute, gfx950 transpose reads.

Each workgroup of a batch has its own LDS (``st.lds[g]``).  Addresses are checked against the
workgroup's allocation (static ``group_segment_fixed_size`` + dynamic ``shared_bytes``): an access past
it is reported (``oob-lds``); the hardware reads 0 there and drops the write, and so does the emulator
when reports are collected.  With the sanitizer on, every access also goes through its LDS race
shadow (words a wave writes / reads, per barrier generation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
else:       # numpy, or CuPy while a CUDA launch runs (xp.py)
    from isagen.runtime.emu.xp import np

from isagen.runtime.emu import cuda_kernels, wide
from isagen.runtime.emu import report as R
from isagen.runtime.emu import xp as X
from isagen.runtime.emu.access import CompileError, vwrite_masked
from isagen.runtime.emu.steps import CompiledStep
from isagen.runtime.emu.wave import M0

U8, U16, U32, U64 = np.uint8, np.uint16, np.uint32, np.uint64
I64 = np.int64


def _lds_check(st, inst, ws, addr, act, nbytes):
    """Lanes of ``act`` whose access lies inside the LDS allocation; reports the others."""
    if addr.size and addr.min() >= 0 and addr.max() + nbytes <= st.lds_bytes:
        return act                      # every lane in range (the common case): two reductions
    ok = (addr >= 0) & (addr + nbytes <= st.lds_bytes)
    bad = act & ~ok
    if bad.any():
        row, lanes = R.first_bad(bad)
        a0 = int(addr[row, lanes[0]])
        st.run.fault(R.OOB_LDS, inst, f"LDS access of {nbytes} bytes at LDS address {a0:#x} is past the "
                     f"workgroup's {st.lds_bytes}-byte LDS allocation", ws, bad, address=a0)
    return act & ok


def lds_bytes_rw(st, inst, ws, addr, act, nbytes, data=None, dma=False):
    """Generic byte-granular LDS access (FLAT to LDS, LDS DMA).  ``addr`` [n,64] byte addresses.
    Reads return uint8 [n,64,nbytes]; writes take ``data`` uint8 [n,64,nbytes]."""
    addr = np.asarray(addr).astype(I64)
    act = _lds_check(st, inst, ws, addr, act, nbytes)
    g = st.wg_x[ws]
    L = st.lds.shape[1]
    flat = st.lds.reshape(-1)
    base = (g * L)[:, None] + np.where(act, addr, 0)
    idx = base[..., None] + np.arange(nbytes)
    if st.san is not None:
        st.san.lds_access(st, ws, inst, addr, act, nbytes, write=data is not None, dma=dma,
                          data=None if data is None else np.asarray(data, U8))
    if data is None:
        b = flat[idx]
        st.run.lds_bytes_read += nbytes * int(act.sum())
        return np.where(act[..., None], b, U8(0))
    flat[idx[act]] = np.asarray(data, U8)[act]
    st.run.lds_bytes_written += nbytes * int(act.sum())
    return None


class DsAddressing:
    """Precomputed per-instruction LDS addressing."""

    def __init__(self, inst, ctx):
        self.inst = inst
        ops = {}
        for o in inst.operands:
            ops.setdefault(o.role, o)
        self.ops = ops
        m = inst.mods
        self.offset = int(m.get("offset", (m.get("offset0", 0) | (m.get("offset1", 0) << 8))))
        self.offset0 = int(m.get("offset0", 0))
        self.offset1 = int(m.get("offset1", 0))
        a = ops.get("addr")
        self.ai = ctx.vindex(a.reg, 1) if (a is not None and a.kind == "reg") else None


def _gather(st, ws, addr, act, nbytes):
    """Read nbytes per lane at byte addresses addr [n,64] -> uint32 [n,64,ndw] (nbytes>=4) or [n,64]."""
    L = st.lds.shape[1]
    g = st.wg_x[ws]
    full = bool(act.all())
    a = addr if full else np.where(act, addr, 0)
    if wide.wide_size(nbytes) and wide.aligned(a, nbytes):     # L is a multiple of 16
        out = wide.gather(st.lds.reshape(-1), a + (g * L)[:, None], nbytes)
        return out if full else np.where(act[..., None], out, U32(0))
    if nbytes >= 4 and not (a & 3).any():
        ndw = nbytes // 4
        w = st.lds.reshape(-1).view(U32)
        wi = (a >> 2) + (g * (L // 4))[:, None]
        if ndw == 1:
            out = np.take(w, wi)[..., None]
        else:
            out = np.take(w, wi[..., None] + np.arange(ndw))
        return out if full else np.where(act[..., None], out, U32(0))
    flat = st.lds.reshape(-1)
    idx = ((g * L)[:, None] + a)[..., None] + np.arange(nbytes)
    b = np.take(flat, idx)
    if not full:
        b = np.where(act[..., None], b, U8(0))
    if nbytes >= 4:
        return np.ascontiguousarray(b).view(U32).reshape(b.shape[:-1] + (nbytes // 4,))
    v = b[..., 0].astype(U32)
    if nbytes == 2:
        v = v | (b[..., 1].astype(U32) << U32(8))
    return v


def _bytes(vals, nbytes):
    """uint32 [..., ndw] (or [...] for sub-dword sizes) -> the nbytes bytes each lane writes."""
    v = np.ascontiguousarray(np.asarray(vals, U32))
    if nbytes >= 4:
        return v.view(U8).reshape(v.shape[:-1] + (nbytes,))
    return v[..., None].view(U8).reshape(v.shape + (4,))[..., :nbytes]


def _scatter(st, ws, addr, act, nbytes, vals):
    """Write vals ([n,64,ndw] uint32 or [n,64] low bytes) at addr where act."""
    L = st.lds.shape[1]
    g = st.wg_x[ws]
    full = bool(act.all())
    if not full and not act.any():
        return
    a = addr if full else np.where(act, addr, 0)
    if wide.wide_size(nbytes) and wide.aligned(a, nbytes):
        off = a + (g * L)[:, None]
        v = np.asarray(vals, U32).reshape(off.shape + (nbytes // 4,))
        if full:
            wide.scatter(st.lds.reshape(-1), off.reshape(-1), v.reshape(-1, nbytes // 4), nbytes)
        else:
            wide.scatter(st.lds.reshape(-1), off[act], v[act], nbytes)
        return
    if nbytes >= 4 and not (a & 3).any():
        ndw = nbytes // 4
        w = st.lds.reshape(-1).view(U32)
        wi = (a >> 2) + (g * (L // 4))[:, None]
        v = np.asarray(vals, U32)
        if ndw == 1:
            v = v.reshape(wi.shape)
            if full:
                w[wi] = v
            else:
                w[wi[act]] = v[act]
            return
        idx = wi[..., None] + np.arange(ndw)
        if full:
            w[idx] = v
        else:
            w[idx[act]] = v[act]
        return
    flat = st.lds.reshape(-1)
    idx = ((g * L)[:, None] + a)[..., None] + np.arange(nbytes)
    v = np.ascontiguousarray(np.asarray(vals, U32))
    if nbytes >= 4:
        b = v.view(U8).reshape(v.shape[:-1] + (nbytes,))
    else:
        b = v[..., None].view(U8).reshape(v.shape + (4,))[..., :nbytes]
    if full:
        flat[idx] = b
    else:
        flat[idx[act]] = b[act]


def compile_ds(inst, idx, ctx) -> CompiledStep:
    name = inst.name
    la = DsAddressing(inst, ctx)
    if name in ("ds_nop",):
        return CompiledStep(inst, idx, lambda st, ws: None, "ds", counter="lgkm")
    if name in ("ds_swizzle_b32", "ds_permute_b32", "ds_bpermute_b32"):
        return _compile_cross_lane(inst, idx, ctx, la)
    if name.startswith("ds_read") or name.startswith("ds_load"):
        s = _compile_read(inst, idx, ctx, la)
        s.is_load = True
        return s
    if name.startswith("ds_write") and "xchg" not in name:
        s = _compile_write(inst, idx, ctx, la)
        s.lds_write = True
        return s
    s = _compile_atomic(inst, idx, ctx, la)
    return s


# ---------------------------------------------------------------------------- reads

def _pair_layout(name, la: DsAddressing):
    """(element bytes, byte offset of element 0, of element 1) of a ds_read2* / ds_write2*:
    offset0/offset1 count elements, or 64-element strides with st64."""
    size = 8 if name.endswith("b64") else 4
    scale = size * (64 if "st64" in name else 1)
    return size, la.offset0 * scale, la.offset1 * scale


def _pair_addresses(st, inst, ws, ai, o0, o1, e, size):
    """The two LDS addresses of a ds_read2* / ds_write2* and their in-range active lanes."""
    base = st.V[ai, ws].astype(I64)
    a0, a1 = base + o0, base + o1
    return a0, a1, _lds_check(st, inst, ws, a0, e, size), _lds_check(st, inst, ws, a1, e, size)


def _addtid_addresses(st, ws, off):
    """ds_*_addtid_b32: M0[15:0] + offset + 4 * lane id."""
    base = (st.S[M0, ws] & U32(0xFFFF)).astype(I64)
    return base[:, None] + off + 4 * np.arange(64)[None, :]


_READ = {"b32": 4, "b64": 8, "b96": 12, "b128": 16, "u8": 1, "i8": 1, "u16": 2, "i16": 2}


def _compile_read(inst, idx, ctx, la: DsAddressing) -> CompiledStep:
    name = inst.name
    dst = la.ops["vdst"]
    di = ctx.vindex(dst.reg)
    if name.startswith("ds_read2"):
        size, o0, o1 = _pair_layout(name, la)
        ai = la.ai
        ndw = size // 4

        # the cuda engine: one kernel (cuda_kernels.py) when the destinations leave the address alone
        fast = ai is not None and not di <= ai < di + 2 * ndw

        def h2(st, ws):
            if fast and st.san is None and X.active() == "cuda":
                if cuda_kernels.ds_read2(st, ws, ai, di, o0, o1, size):     # out of range: report them
                    _pair_addresses(st, inst, ws, ai, o0, o1, st.EXEC[ws], size)
                return
            e = st.EXEC[ws]
            a0, a1, m0, m1 = _pair_addresses(st, inst, ws, ai, o0, o1, e, size)
            done0 = done1 = False
            if st.san is not None:      # (it may make the reads too: see Sanitizer.lds_access)
                done0 = st.san.lds_access(st, ws, inst, a0, m0, size, write=False, vgpr=di)
                done1 = st.san.lds_access(st, ws, inst, a1, m1, size, write=False, vgpr=di + ndw)
            if not done0:
                d0 = _gather(st, ws, a0, m0, size)
            if not done1:
                d1 = _gather(st, ws, a1, m1, size)
            for k in range(ndw):
                if not done0:
                    vwrite_masked(st, ws, di + k, d0[..., k], e)
                if not done1:
                    vwrite_masked(st, ws, di + ndw + k, d1[..., k], e)
            st.run.lds_bytes_read += size * int(m0.sum() + m1.sum())
        return CompiledStep(inst, idx, h2, "ds", counter="lgkm", result="lds")
    if name == "ds_read_addtid_b32":
        off = la.offset

        def ha(st, ws):
            e = st.EXEC[ws]
            a = _addtid_addresses(st, ws, off)
            m = _lds_check(st, inst, ws, a, e, 4)
            if st.san is not None:
                st.san.lds_access(st, ws, inst, a, m, 4, write=False)
            vwrite_masked(st, ws, di, _gather(st, ws, a, m, 4)[..., 0], e)
        return CompiledStep(inst, idx, ha, "ds", counter="lgkm", result="lds")
    if "_tr_" in name:
        return _compile_read_tr(inst, idx, ctx, la, di)
    parts = name.split("_")     # ds read TYPE [d16 [hi]]
    ty = parts[2]
    size = _READ.get(ty)
    if size is None:
        raise CompileError(f"{name} is not modelled")
    d16 = None
    if "d16" in parts:
        d16 = "hi" if parts[-1] == "hi" else "lo"
    signed = ty.startswith("i")
    ai, off = la.ai, la.offset
    ndw = max(size // 4, 1)

    # the cuda engine: one kernel (cuda_kernels.py) when the destination leaves the address alone (whole
    # dwords; bytes and halves, sign-extended or not, into the whole register or one half of it)
    fast = (size >= 4 and d16 is None or size < 4) and ai is not None and not di <= ai < di + ndw

    def h(st, ws):
        if fast and st.san is None and X.active() == "cuda":
            if cuda_kernels.ds_read2(st, ws, ai, di, off, 0, size, npair=1, sgn=signed, d16=d16):
                # out of range: report them
                _lds_check(st, inst, ws, st.V[ai, ws].astype(I64) + off, st.EXEC[ws], size)
            return
        e = st.EXEC[ws]
        a = st.V[ai, ws].astype(I64) + off
        m = _lds_check(st, inst, ws, a, e, size)
        whole = size >= 4 and d16 is None
        if st.san is not None and st.san.lds_access(st, ws, inst, a, m, size, write=False,
                                                    vgpr=di if whole else -1):
            st.run.lds_bytes_read += size * int(m.sum())      # (the sanitizer's C path made the read)
            return
        d = _gather(st, ws, a, m, size)
        st.run.lds_bytes_read += size * int(m.sum())
        if size >= 4:
            for k in range(ndw):
                vwrite_masked(st, ws, di + k, d[..., k], e)
            return
        v = d
        if signed:
            v = (v.astype(U8).view(np.int8) if size == 1 else v.astype(U16).view(np.int16)).astype(np.int32).view(U32)
        if d16 == "lo":
            v = (st.V[di, ws] & U32(0xFFFF0000)) | (v & U32(0xFFFF))
        elif d16 == "hi":
            v = (st.V[di, ws] & U32(0xFFFF)) | ((v & U32(0xFFFF)) << U32(16))
        vwrite_masked(st, ws, di, v, e)
    return CompiledStep(inst, idx, h, "ds", counter="lgkm", result="lds")


def _tr_sources(bits: int):
    """Transpose reads: (source lane [64, E], element index [64]) with E = 64 // bits elements."""
    E = 64 // bits
    L = np.arange(64)
    src = np.stack([16 * (L // 16) + (16 // E) * e + (L % 16) // E for e in range(E)], -1)
    return src, L % E


def _compile_read_tr(inst, idx, ctx, la, di) -> CompiledStep:
    """gfx950 ds_read_b64_tr_b16 / _b8 / _b4: each lane supplies the address of 64 bits of E elements
    (4 x 16, 8 x 8 or 16 x 4 bits); within each block of 16 lanes the data comes back transposed: lane
    L's element e is element L % E of the value at the address of lane
    16*(L // 16) + (16 // E)*e + (L % 16) // E.  For b16 this is the 4x4 transpose ROCm's FlyDSL
    kernels describe; Triton's gfx950 bf16 and fp8 matmuls, which read their operands this way, compute
    exactly with it (and not with the neighbouring candidate rules).  b4 follows the same rule by
    analogy [verify on hardware]."""
    name = inst.name
    bits = {"ds_read_b64_tr_b16": 16, "ds_read_b64_tr_b8": 8, "ds_read_b64_tr_b4": 4}.get(name)
    if bits is None:
        raise CompileError(f"{name} is not modelled (of the transpose reads only ds_read_b64_tr_b16/b8/b4)")
    ai, off = la.ai, la.offset
    src, part = _tr_sources(bits)
    E = 64 // bits

    def h(st, ws):
        e = st.EXEC[ws]
        a = st.V[ai, ws].astype(I64) + off
        m = _lds_check(st, inst, ws, a, e, 8)
        if st.san is not None:
            st.san.lds_access(st, ws, inst, a, m, 8, write=False)
        d = _gather(st, ws, a, m, 8)                     # [n,64,2] uint32 = E elements per lane
        n = d.shape[0]
        if bits >= 8:
            dt = U16 if bits == 16 else U8
            elems = np.ascontiguousarray(d).view(dt).reshape(n, 64, E)
            out = elems[:, src, part[:, None]]          # [n,64,E]
            words = np.ascontiguousarray(out).view(U32).reshape(n, 64, 2)
        else:
            q = (d[..., 0].astype(U64) | (d[..., 1].astype(U64) << U64(32)))      # [n,64] 16 nibbles
            nib = ((q[..., None] >> (U64(4) * np.arange(16, dtype=U64))) & U64(0xF))  # [n,64,16]
            out = nib[:, src, part[:, None]]                                        # [n,64,16]
            v = (out << (U64(4) * np.arange(16, dtype=U64))).sum(-1, dtype=U64)
            words = np.stack([(v & U64(0xFFFFFFFF)).astype(U32), (v >> U64(32)).astype(U32)], -1)
        vwrite_masked(st, ws, di, words[..., 0], e)
        vwrite_masked(st, ws, di + 1, words[..., 1], e)
        st.run.lds_bytes_read += 8 * int(m.sum())
    return CompiledStep(inst, idx, h, "ds", counter="lgkm", result="lds")


# ---------------------------------------------------------------------------- writes

_WRITE = {"b8": 1, "b16": 2, "b32": 4, "b64": 8, "b96": 12, "b128": 16}


def _compile_write(inst, idx, ctx, la: DsAddressing) -> CompiledStep:
    name = inst.name
    if name.startswith("ds_write2"):
        size, o0, o1 = _pair_layout(name, la)
        ai = la.ai
        d0i = ctx.vindex(la.ops["data0"].reg)
        d1i = ctx.vindex(la.ops["data1"].reg)
        ndw = size // 4

        def h2(st, ws):
            if ai is not None and st.san is None and X.active() == "cuda":     # one kernel (cuda_kernels.py)
                if cuda_kernels.ds_write(st, ws, ai, d0i, d1i, o0, o1, size, npair=2):    # out of range: report
                    _pair_addresses(st, inst, ws, ai, o0, o1, st.EXEC[ws], size)
                return
            e = st.EXEC[ws]
            a0, a1, m0, m1 = _pair_addresses(st, inst, ws, ai, o0, o1, e, size)
            v0 = np.stack([st.V[d0i + k, ws] for k in range(ndw)], -1)
            v1 = np.stack([st.V[d1i + k, ws] for k in range(ndw)], -1)
            if st.san is not None:
                st.san.lds_access(st, ws, inst, a0, m0, size, write=True, data=_bytes(v0, size))
                st.san.lds_access(st, ws, inst, a1, m1, size, write=True, data=_bytes(v1, size))
            _scatter(st, ws, a0, m0, size, v0)
            _scatter(st, ws, a1, m1, size, v1)
            st.run.lds_bytes_written += size * int(m0.sum() + m1.sum())
        return CompiledStep(inst, idx, h2, "ds", counter="lgkm")
    if name == "ds_write_addtid_b32":
        off = la.offset
        d0i = ctx.vindex(la.ops["data0"].reg)

        def ha(st, ws):
            e = st.EXEC[ws]
            a = _addtid_addresses(st, ws, off)
            m = _lds_check(st, inst, ws, a, e, 4)
            v = st.V[d0i, ws][..., None]
            if st.san is not None:
                st.san.lds_access(st, ws, inst, a, m, 4, write=True, data=_bytes(v, 4))
            _scatter(st, ws, a, m, 4, v)
        return CompiledStep(inst, idx, ha, "ds", counter="lgkm")
    parts = name.split("_")
    size = _WRITE.get(parts[2])
    if size is None:
        raise CompileError(f"{name} is not modelled")
    hi = name.endswith("d16_hi")
    ai, off = la.ai, la.offset
    d0i = ctx.vindex(la.ops["data0"].reg)
    ndw = max(size // 4, 1)

    def h(st, ws):
        if ai is not None and st.san is None and X.active() == "cuda":     # one kernel (cuda_kernels.py)
            if cuda_kernels.ds_write(st, ws, ai, d0i, d0i, off, 0, size, shift=16 if hi else 0):
                _lds_check(st, inst, ws, st.V[ai, ws].astype(I64) + off, st.EXEC[ws], size)   # report them
            return
        e = st.EXEC[ws]
        a = st.V[ai, ws].astype(I64) + off
        m = _lds_check(st, inst, ws, a, e, size)
        if size >= 4:
            v = np.stack([st.V[d0i + k, ws] for k in range(ndw)], -1)
        else:
            v = st.V[d0i, ws]
            if hi:
                v = v >> U32(16)
        st.run.lds_bytes_written += size * int(m.sum())
        if st.san is not None and st.san.lds_access(st, ws, inst, a, m, size, write=True, data=_bytes(v, size),
                                                    vgpr=d0i if size >= 4 else -1):
            return                  # (the sanitizer's C path made the write)
        _scatter(st, ws, a, m, size, v)
    return CompiledStep(inst, idx, h, "ds", counter="lgkm")


# ---------------------------------------------------------------------------- atomics

def _fmin32(a, b):
    return np.fmin(a.view(np.float32), b.view(np.float32)).view(U32)


def _fmax32(a, b):
    return np.fmax(a.view(np.float32), b.view(np.float32)).view(U32)


_DS_ATOMIC = {
    "add": lambda o, d, c: o + d, "sub": lambda o, d, c: o - d, "rsub": lambda o, d, c: d - o,
    "inc": lambda o, d, c: np.where(o >= d, o.dtype.type(0), o + o.dtype.type(1)),
    "dec": lambda o, d, c: np.where((o == 0) | (o > d), d, o - o.dtype.type(1)),
    "min_i32": lambda o, d, c: np.minimum(o.view(np.int32), d.view(np.int32)).view(U32),
    "max_i32": lambda o, d, c: np.maximum(o.view(np.int32), d.view(np.int32)).view(U32),
    "min_u32": lambda o, d, c: np.minimum(o, d), "max_u32": lambda o, d, c: np.maximum(o, d),
    "min_i64": lambda o, d, c: np.minimum(o.view(np.int64), d.view(np.int64)).view(U64),
    "max_i64": lambda o, d, c: np.maximum(o.view(np.int64), d.view(np.int64)).view(U64),
    "min_u64": lambda o, d, c: np.minimum(o, d), "max_u64": lambda o, d, c: np.maximum(o, d),
    "and": lambda o, d, c: o & d, "or": lambda o, d, c: o | d, "xor": lambda o, d, c: o ^ d,
    "mskor": lambda o, d, c: (o & ~d) | c,
    "wrxchg": lambda o, d, c: d,
    "cmpst": lambda o, d, c: np.where(o == d, c, o),     # data0 = compare, data1 = source
    "add_f32": lambda o, d, c: (o.view(np.float32) + d.view(np.float32)).view(U32),
    "min_f32": lambda o, d, c: _fmin32(o, d), "max_f32": lambda o, d, c: _fmax32(o, d),
    "add_f64": lambda o, d, c: (o.view(np.float64) + d.view(np.float64)).view(U64),
}


def _compile_atomic(inst, idx, ctx, la: DsAddressing) -> CompiledStep:
    name = inst.name
    body = name[3:]
    rtn = "_rtn_" in name
    body = body.replace("rtn_", "")
    # body like add_u32, add_f32, min_i32, cmpst_b32, wrxchg_b64, pk_add_f16
    if body.startswith(("wrxchg2", "condxchg", "append", "consume", "wrap", "pk_add")):
        raise CompileError(f"{name} is not modelled")
    parts = body.split("_")
    wide = parts[-1].endswith("64")
    key = parts[0]
    if key in ("min", "max"):
        key = f"{parts[0]}_{parts[1]}"
    if key in ("add", "min", "max") and parts[-1].startswith("f"):
        key = f"{parts[0]}_{parts[-1]}"
    fn = _DS_ATOMIC.get(key)
    if fn is None:
        raise CompileError(f"{name} is not modelled")
    size = 8 if wide else 4
    dt = U64 if wide else U32
    ai, off = la.ai, la.offset
    d0 = la.ops.get("data0")
    d1 = la.ops.get("data1")
    d0i = ctx.vindex(d0.reg) if d0 is not None else None
    d1i = ctx.vindex(d1.reg) if d1 is not None else None
    dst = la.ops.get("vdst")
    dsti = ctx.vindex(dst.reg) if (rtn and dst is not None) else None

    def reg(st, ws, i):
        if i is None:
            return None
        if wide:
            return st.V[i, ws].astype(U64) | (st.V[i + 1, ws].astype(U64) << U64(32))
        return st.V[i, ws]

    def h(st, ws):
        e = st.EXEC[ws]
        a = st.V[ai, ws].astype(I64) + off
        m = _lds_check(st, inst, ws, a, e, size)
        if st.san is not None:
            st.san.lds_access(st, ws, inst, a, m, size, write=True, atomic=True)
        L = st.lds.shape[1]
        g = st.wg_x[ws]
        flat_idx = ((g * L)[:, None] + np.where(m, a, 0))
        fi = flat_idx[m]
        dv = reg(st, ws, d0i)
        cv = reg(st, ws, d1i)
        dv = dv[m] if dv is not None else None
        cv = cv[m] if cv is not None else None
        olds = np.zeros(fi.shape, dt)
        flat = st.lds.reshape(-1)
        remaining = np.arange(fi.size)
        while remaining.size:
            _, first = np.unique(fi[remaining], return_index=True)
            sel = remaining[first]
            bi = fi[sel][:, None] + np.arange(size)
            cur = np.ascontiguousarray(flat[bi]).view(dt).reshape(-1)
            olds[sel] = cur
            with np.errstate(over="ignore", invalid="ignore"):
                new = np.asarray(fn(cur, dv[sel] if dv is not None else None,
                                    cv[sel] if cv is not None else None)).astype(dt)
            flat[bi] = np.ascontiguousarray(new).view(U8).reshape(-1, size)
            remaining = np.delete(remaining, first)
        if dsti is not None:
            res = np.zeros(a.shape, dt)
            res[m] = olds
            if wide:
                vwrite_masked(st, ws, dsti, (res & U64(0xFFFFFFFF)).astype(U32), e)
                vwrite_masked(st, ws, dsti + 1, (res >> U64(32)).astype(U32), e)
            else:
                vwrite_masked(st, ws, dsti, res, e)
    s = CompiledStep(inst, idx, h, "ds", counter="lgkm", result="lds" if rtn else None)
    s.lds_write = True
    s.is_load = rtn
    return s


# ---------------------------------------------------------------------------- cross-lane

def _swizzle_lanes(offset: int):
    lane = np.arange(64)
    if offset & 0x8000:
        # quad permute: within each group of 4 lanes, lane i takes lane sel[i]
        sel = [(offset >> (2 * i)) & 3 for i in range(4)]
        return (lane & ~3) | np.array(sel)[lane & 3]
    and_mask, or_mask, xor_mask = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
    return (lane & 0x20) | ((((lane & 0x1F) & and_mask) | or_mask) ^ xor_mask)


def _compile_cross_lane(inst, idx, ctx, la: DsAddressing) -> CompiledStep:
    name = inst.name
    di = ctx.vindex(la.ops["vdst"].reg)
    if name == "ds_swizzle_b32":
        src = _swizzle_lanes(la.offset)
        si = la.ai

        def hs(st, ws):
            e = st.EXEC[ws]
            v = st.V[si, ws]
            ok = e[:, src]
            vwrite_masked(st, ws, di, np.where(ok, v[:, src], U32(0)), e)
        return CompiledStep(inst, idx, hs, "ds", counter="lgkm", result="lds")
    ai, off = la.ai, la.offset
    dat = ctx.vindex(la.ops["data0"].reg)
    back = name == "ds_bpermute_b32"

    def hp(st, ws):
        e = st.EXEC[ws]
        n = e.shape[0]
        sel = ((st.V[ai, ws].astype(I64) + off) >> 2) & 63
        v = st.V[dat, ws]
        rows = np.arange(n)[:, None]
        if back:
            ok = e[rows, sel]
            out = np.where(ok, v[rows, sel], U32(0))
        else:
            out = np.zeros((n, 64), U32)
            lanes = np.broadcast_to(np.arange(64), (n, 64))
            # forward permute: lane L writes its data to lane sel[L]; the highest lane wins on ties
            order = np.argsort(np.where(e, lanes, -1), axis=1, kind="stable")
            rr = np.broadcast_to(rows, (n, 64))
            s_sorted = np.take_along_axis(sel, order, 1)
            v_sorted = np.take_along_axis(v, order, 1)
            e_sorted = np.take_along_axis(e, order, 1)
            out[rr[e_sorted], s_sorted[e_sorted]] = v_sorted[e_sorted]
        vwrite_masked(st, ws, di, out, e)
    return CompiledStep(inst, idx, hp, "ds", counter="lgkm", result="lds")
