"""Operand access compiled once per instruction: closures that read a source or write a destination
of a batch of waves (see wave.py for the register-file layout).

Reads return raw bits: ``uint32`` arrays shaped ``[n, 64]`` (VGPRs), ``[n, 1]`` (SGPRs, broadcast over
the lanes) or numpy scalars (constants); 64-bit operands return ``uint64`` the same way.  Typed views
(f32, f16 halves, ...) are taken by the op modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
else:       # numpy, or CuPy while a CUDA launch runs (xp.py)
    from isagen.runtime.emu.xp import np

from isagen.runtime.emu import xp as X
from isagen.runtime.emu.report import UNSUPPORTED
from isagen.runtime.emu.wave import EXEC_LO, VCC_LO, words_to_mask

U32 = np.uint32
U64 = np.uint64

# apertures reported by src_shared_base / src_private_base (the high 32 bits of the 64-bit base)
SHARED_BASE = 0x1000_0000_0000
PRIVATE_BASE = 0x2000_0000_0000
APERTURE_SIZE = 1 << 32

# scalar operand codes of read-only special sources
SRC_SHARED_BASE, SRC_SHARED_LIMIT, SRC_PRIVATE_BASE, SRC_PRIVATE_LIMIT = 235, 236, 237, 238
SRC_POPS_EXITING_WAVE_ID = 239
SRC_VCCZ, SRC_EXECZ, SRC_SCC, SRC_LDS_DIRECT = 251, 252, 253, 254


class CompileError(Exception):
    """An instruction the emulator cannot compile (becomes an ``unsupported`` report when reached)."""

    def __init__(self, message: str, category: str = UNSUPPORTED):
        super().__init__(message)
        self.category = category


class Ctx:
    """What compiling one kernel needs: register-file geometry, target and options."""

    def __init__(self, *, kernel: str, target: str, nregs: int, accum_offset: int, sanitize: bool,
                 lds_dma_inst_offset: bool = True, denorm32: int = 3, denorm16: int = 3,
                 code_base: int = 0, dx10_clamp: bool = True, ieee: bool = True):
        self.kernel, self.target = kernel, target
        self.nregs, self.accum_offset = nregs, accum_offset
        self.sanitize = sanitize
        self.lds_dma_inst_offset = lds_dma_inst_offset
        self.flush32 = denorm32 != 3          # FLOAT_DENORM_MODE_32: 3 = keep in and out
        self.flush16 = denorm16 != 3
        self.code_base = code_base
        self.pc_index: dict[int, int] = {}   # byte address -> instruction index

    # ------------------------------------------------------------------ register indices
    def vindex(self, reg, count: int | None = None) -> int:
        """Unified-file index of a VGPR/AGPR operand; raises CompileError past the allocation."""
        n = reg.count if count is None else count
        if reg.file == "v":
            i = reg.index
            if i + n > self.accum_offset:
                raise CompileError(f"{reg.name} is past the {self.accum_offset} arch VGPRs the descriptor "
                                   f"allocates (accum_offset)", "fault")
            return i
        if reg.file == "a":
            i = self.accum_offset + reg.index
            if i + n > self.nregs:
                raise CompileError(f"{reg.name} is past the {self.nregs - self.accum_offset} AGPRs the "
                                   f"descriptor allocates", "fault")
            return i
        raise CompileError(f"{reg.name} is not a vector register")


def is_vreg(op) -> bool:
    return op is not None and op.kind == "reg" and op.reg.file in ("v", "a")


def is_sreg(op) -> bool:
    return op is not None and op.kind == "reg" and op.reg.file in ("s", "ttmp", "special")


def scode(op) -> int:
    return op.reg.code


# ============================================================================ 32-bit reads
def read32(op, ctx: Ctx, ty: str = "b32", lanes: bool = True):
    """Closure (st, ws) -> raw uint32 bits of a 32-bit source.  ``lanes``: the caller wants a
    per-lane shape (SGPRs come back as [n, 1]); else SGPRs come back as [n]."""
    if op.kind in ("const", "literal"):
        c = U32(op.const_bits(ty) & 0xFFFFFFFF)
        return lambda st, ws: c
    if op.kind == "imm":
        c = U32(op.value & 0xFFFFFFFF)
        return lambda st, ws: c
    if is_vreg(op):
        i = ctx.vindex(op.reg, 1)
        return lambda st, ws: st.V[i, ws]
    code = scode(op)
    if code < 128:
        if lanes:
            return lambda st, ws: st.S[code, ws][:, None]
        return lambda st, ws: st.S[code, ws]
    return _special32(code, lanes)


def _special32(code: int, lanes: bool):
    shape = (lambda a: a[:, None]) if lanes else (lambda a: a)
    if code == SRC_SCC:
        return lambda st, ws: shape(st.SCC[ws])
    if code == SRC_VCCZ:
        return lambda st, ws: shape(((st.S[VCC_LO, ws] | st.S[VCC_LO + 1, ws]) == 0).astype(U32))
    if code == SRC_EXECZ:
        return lambda st, ws: shape(((st.S[EXEC_LO, ws] | st.S[EXEC_LO + 1, ws]) == 0).astype(U32))
    consts = {SRC_SHARED_BASE: SHARED_BASE >> 32, SRC_SHARED_LIMIT: (SHARED_BASE + APERTURE_SIZE - 1) >> 32,
              SRC_PRIVATE_BASE: PRIVATE_BASE >> 32, SRC_PRIVATE_LIMIT: (PRIVATE_BASE + APERTURE_SIZE - 1) >> 32,
              SRC_POPS_EXITING_WAVE_ID: 0, 125: 0}
    if code in consts:
        c = U32(consts[code])
        return lambda st, ws: c
    raise CompileError(f"scalar source code {code} is not modelled")


# ============================================================================ 64-bit reads
def read64(op, ctx: Ctx, ty: str = "b64", lanes: bool = True):
    """Closure (st, ws) -> uint64 of a 64-bit source (VGPR pair, SGPR pair, constant)."""
    if op.kind in ("const", "literal"):
        c = U64(op.const_bits(ty) & 0xFFFFFFFFFFFFFFFF)
        return lambda st, ws: c
    if op.kind == "imm":
        c = U64(op.value & 0xFFFFFFFFFFFFFFFF)
        return lambda st, ws: c
    if is_vreg(op):
        i = ctx.vindex(op.reg, 2)

        def rv(st, ws):
            return st.V[i, ws].astype(U64) | (st.V[i + 1, ws].astype(U64) << U64(32))
        return rv
    code = scode(op)
    if code < 127:
        if lanes:
            def rs(st, ws):
                return (st.S[code, ws].astype(U64) | (st.S[code + 1, ws].astype(U64) << U64(32)))[:, None]
        else:
            def rs(st, ws):
                return st.S[code, ws].astype(U64) | (st.S[code + 1, ws].astype(U64) << U64(32))
        return rs
    if code in (SRC_SHARED_BASE, SRC_PRIVATE_BASE, SRC_SHARED_LIMIT, SRC_PRIVATE_LIMIT):
        lo = _special32(code, False)
        return lambda st, ws: U64(int(lo(st, ws)) << 32)
    f = _special32(code, lanes)
    return lambda st, ws: f(st, ws).astype(U64)


def read_mask(op, ctx: Ctx):
    """Closure (st, ws) -> bool [n, 64] lane mask from an SGPR pair (or a constant)."""
    if op.kind in ("const", "literal", "imm"):
        v = op.const_bits("b64") if op.kind != "imm" else op.value
        m = np.array([(v >> i) & 1 for i in range(64)], np.bool_)
        return lambda st, ws: np.broadcast_to(m, (st.EXEC[ws].shape[0], 64))
    code = scode(op)
    if code >= 127:
        f = read64(op, ctx, lanes=False)

        def rm(st, ws):
            v = np.broadcast_to(np.asarray(f(st, ws), U64), (st.EXEC[ws].shape[0],))
            return words_to_mask((v & U64(0xFFFFFFFF)).astype(U32), (v >> U64(32)).astype(U32))
        return rm
    return lambda st, ws: words_to_mask(st.S[code, ws], st.S[code + 1, ws])


# ============================================================================ writes
def vwrite(st, ws, i: int, val) -> None:
    """Write raw uint32 ``val`` (broadcastable to [n, 64]) to V[i] for the active lanes."""
    if st.exec_all:
        st.V[i, ws] = val
    else:
        m = st.EXEC[ws]
        if isinstance(ws, slice):
            np.copyto(st.V[i], val, where=m, casting="unsafe")
        else:
            st.V[i, ws] = np.where(m, val, st.V[i, ws])


def vwrite_masked(st, ws, i: int, val, m) -> None:
    """Write V[i] where the lane mask ``m`` (already ANDed with EXEC as wanted) is set."""
    if X.active() != "cuda" and m.all():     # (cuda: the masked write costs less than reading m.all() back)
        st.V[i, ws] = val
    elif isinstance(ws, slice):
        np.copyto(st.V[i], val, where=m, casting="unsafe")
    else:
        st.V[i, ws] = np.where(m, val, st.V[i, ws])


def swrite(op, ctx: Ctx):
    """Closure (st, ws, val uint32 [n]) writing a 32-bit scalar destination."""
    code = scode(op)
    if code >= 128:
        return lambda st, ws, val: None
    if code in (EXEC_LO, EXEC_LO + 1):
        def wexec(st, ws, val):
            st.S[code, ws] = val
            st.sync_exec(ws)
        return wexec

    def w(st, ws, val):
        st.S[code, ws] = val
    return w


def swrite64(op, ctx: Ctx):
    """Closure (st, ws, val uint64 [n]) writing a 64-bit scalar destination (SGPR pair)."""
    code = scode(op)
    if code >= 127:
        return lambda st, ws, val: None
    is_exec = code == EXEC_LO

    def w(st, ws, val):
        val = np.asarray(val, U64)
        st.S[code, ws] = (val & U64(0xFFFFFFFF)).astype(U32)
        st.S[code + 1, ws] = (val >> U64(32)).astype(U32)
        if is_exec:
            st.sync_exec(ws)
    return w


def mask_writer(op, ctx: Ctx):
    """Closure (st, ws, m bool [n, 64]) writing a lane mask to an SGPR pair (vcc, exec, s[i:i+1])."""
    code = scode(op)
    if code >= 127:
        return lambda st, ws, m: None
    return lambda st, ws, m: st.write_mask(code, ws, m)
