"""Scalar ALU (SOP1, SOP2, SOPC, SOPK) and program control (SOPP) semantics.

Scalar values of a group of waves are numpy arrays ``[n]`` (uint32, or uint64 for the 64-bit
forms); SCC is ``st.SCC`` (uint32 0/1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:       # numpy, or CuPy while a CUDA launch runs (xp.py)
    from isagen.runtime.emu.xp import np

from isagen.runtime.emu import report as R
from isagen.runtime.emu.access import CompileError, read32, read64, swrite, swrite64
from isagen.runtime.emu.steps import CompiledStep
from isagen.runtime.emu.wave import BARRIER, DONE, EXEC_LO, M0, VCC_LO
from isagen.runtime.emu.xp import from_host, to_host

U32, U64, I32, I64 = np.uint32, np.uint64, np.int32, np.int64
M32 = 0xFFFFFFFF


def _ops(inst):
    d = next((o for o in inst.operands if o.role == "sdst"), None)
    srcs = [o for o in inst.operands if o.role in ("ssrc0", "ssrc1")]
    return d, srcs


def _sx(x):
    """uint32 -> int64 (sign-extended)."""
    return np.asarray(x, U32).astype(U32).view(I32).astype(I64)


def _popcount32(x):
    return np.bitwise_count(np.asarray(x, U32)).astype(U32)


def _popcount64(x):
    return np.bitwise_count(np.asarray(x, U64)).astype(U32)


def _msb(x, bits):
    """Index (from bit 0) of the highest set bit of each value, -1 for 0."""
    x0 = np.asarray(x).astype(U64)
    x = x0.copy()
    r = np.zeros(x.shape, I64)
    for s in (32, 16, 8, 4, 2, 1):
        if s >= bits:
            continue
        m = x >= (U64(1) << U64(s))
        r = np.where(m, r + s, r)
        x = np.where(m, x >> U64(s), x)
    return np.where(x0 == 0, -1, r)


def _ff1(x, bits):
    """Index of the lowest set bit, or -1 (0xffffffff)."""
    x = np.asarray(x).astype(U64)
    if bits == 32:
        x = x & U64(M32)
    low = x & (~x + U64(1))
    return _msb(low, bits).astype(U32)


def _flbit(x, bits):
    """Position of the highest set bit counted from the MSB, or -1."""
    m = _msb(x, bits)
    return np.where(m < 0, -1, (bits - 1) - m).astype(I64).astype(U32)


def _brev32(x):
    x = np.asarray(x, U32).astype(U32)
    b = np.unpackbits(np.atleast_1d(x).view(np.uint8), bitorder="little").reshape(-1, 32)[:, ::-1]
    return np.packbits(b, axis=-1, bitorder="little").view(U32).reshape(np.shape(x))


def _brev64(x):
    x = np.asarray(x, U64).astype(U64)
    b = np.unpackbits(np.atleast_1d(x).view(np.uint8), bitorder="little").reshape(-1, 64)[:, ::-1]
    return np.packbits(b, axis=-1, bitorder="little").view(U64).reshape(np.shape(x))


# ============================================================================ SOP2 / SOP1 / SOPC tables
# each: fn(a, b, scc) -> (result or None, scc or None); a, b uint32 (or uint64 for 64-bit forms)

def _carry32(r):
    return (r >> U64(32)).astype(U32) & U32(1)


SOP2_32 = {
    "s_add_u32": lambda a, b, c: ((a.astype(U64) + b).astype(U32), _carry32(a.astype(U64) + b)),
    "s_sub_u32": lambda a, b, c: ((a - b).astype(U32), (a < b).astype(U32)),
    "s_add_i32": lambda a, b, c: _addsub_i32(a, b, 1),
    "s_sub_i32": lambda a, b, c: _addsub_i32(a, b, -1),
    "s_addc_u32": lambda a, b, c: ((a.astype(U64) + b + c).astype(U32), _carry32(a.astype(U64) + b + c)),
    "s_subb_u32": lambda a, b, c: ((a.astype(I64) - b - c).astype(U32),
                                   (a.astype(I64) - b.astype(I64) - c.astype(I64) < 0).astype(U32)),
    "s_min_i32": lambda a, b, c: (np.where(_sx(a) < _sx(b), a, b), (_sx(a) < _sx(b)).astype(U32)),
    "s_min_u32": lambda a, b, c: (np.where(a < b, a, b), (a < b).astype(U32)),
    "s_max_i32": lambda a, b, c: (np.where(_sx(a) > _sx(b), a, b), (_sx(a) > _sx(b)).astype(U32)),
    "s_max_u32": lambda a, b, c: (np.where(a > b, a, b), (a > b).astype(U32)),
    "s_cselect_b32": lambda a, b, c: (np.where(c != 0, a, b), None),
    "s_and_b32": lambda a, b, c: _nz(a & b),
    "s_or_b32": lambda a, b, c: _nz(a | b),
    "s_xor_b32": lambda a, b, c: _nz(a ^ b),
    "s_andn2_b32": lambda a, b, c: _nz(a & ~b),
    "s_orn2_b32": lambda a, b, c: _nz(a | ~b),
    "s_nand_b32": lambda a, b, c: _nz(~(a & b)),
    "s_nor_b32": lambda a, b, c: _nz(~(a | b)),
    "s_xnor_b32": lambda a, b, c: _nz(~(a ^ b)),
    "s_lshl_b32": lambda a, b, c: _nz(a << (b & U32(31))),
    "s_lshr_b32": lambda a, b, c: _nz(a >> (b & U32(31))),
    "s_ashr_i32": lambda a, b, c: _nz((_sx(a) >> (b & U32(31)).astype(I64)).astype(U32)),
    "s_bfm_b32": lambda a, b, c: ((((U64(1) << (a & U32(31)).astype(U64)) - U64(1)) << (b & U32(31)).astype(U64))
                                  .astype(U32), None),
    "s_mul_i32": lambda a, b, c: ((a.astype(U64) * b).astype(U32), None),
    "s_bfe_u32": lambda a, b, c: _nz(_bfe_u(a, b & U32(31), (b >> U32(16)) & U32(0x7F), 32)),
    "s_bfe_i32": lambda a, b, c: _nz(_bfe_i(a, b & U32(31), (b >> U32(16)) & U32(0x7F), 32)),
    "s_absdiff_i32": lambda a, b, c: _nz(np.abs(_sx(a) - _sx(b)).astype(U32)),
    "s_mul_hi_u32": lambda a, b, c: (((a.astype(U64) * b) >> U64(32)).astype(U32), None),
    "s_mul_hi_i32": lambda a, b, c: (((_sx(a) * _sx(b)) >> 32).astype(U32), None),
    "s_lshl1_add_u32": lambda a, b, c: _lshl_add(a, b, 1),
    "s_lshl2_add_u32": lambda a, b, c: _lshl_add(a, b, 2),
    "s_lshl3_add_u32": lambda a, b, c: _lshl_add(a, b, 3),
    "s_lshl4_add_u32": lambda a, b, c: _lshl_add(a, b, 4),
    "s_pack_ll_b32_b16": lambda a, b, c: ((a & U32(0xFFFF)) | (b << U32(16)), None),
    "s_pack_lh_b32_b16": lambda a, b, c: ((a & U32(0xFFFF)) | (b & U32(0xFFFF0000)), None),
    "s_pack_hh_b32_b16": lambda a, b, c: ((a >> U32(16)) | (b & U32(0xFFFF0000)), None),
}

SOP2_64 = {
    "s_cselect_b64": lambda a, b, c: (np.where(c != 0, a, b), None),
    "s_and_b64": lambda a, b, c: _nz(a & b),
    "s_or_b64": lambda a, b, c: _nz(a | b),
    "s_xor_b64": lambda a, b, c: _nz(a ^ b),
    "s_andn2_b64": lambda a, b, c: _nz(a & ~b),
    "s_orn2_b64": lambda a, b, c: _nz(a | ~b),
    "s_nand_b64": lambda a, b, c: _nz(~(a & b)),
    "s_nor_b64": lambda a, b, c: _nz(~(a | b)),
    "s_xnor_b64": lambda a, b, c: _nz(~(a ^ b)),
    "s_lshl_b64": lambda a, b, c: _nz(a << (b & U64(63))),
    "s_lshr_b64": lambda a, b, c: _nz(a >> (b & U64(63))),
    "s_ashr_i64": lambda a, b, c: _nz((a.view(I64) >> (b & U64(63)).astype(I64)).view(U64)),
    "s_bfm_b64": lambda a, b, c: ((((U64(1) << (a & U64(63))) - U64(1)) << (b & U64(63))), None),
    "s_bfe_u64": lambda a, b, c: _nz(_bfe_u(a, b & U64(63), (b >> U64(16)) & U64(0x7F), 64)),
    "s_bfe_i64": lambda a, b, c: _nz(_bfe_i(a, b & U64(63), (b >> U64(16)) & U64(0x7F), 64)),
}
# second operand of these 64-bit ops is a 32-bit value
SOP2_64_B32 = {"s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfm_b64", "s_bfe_u64", "s_bfe_i64"}
SOP2_64_A32 = {"s_bfm_b64"}


def _nz(r):
    return r, (r != 0).astype(U32)


def _addsub_i32(a, b, sign):
    r = _sx(a) + sign * _sx(b)
    ovf = (r > 0x7FFFFFFF) | (r < -0x80000000)
    return r.astype(U32), ovf.astype(U32)


def _lshl_add(a, b, n):
    r = (a.astype(U64) << U64(n)) + b
    return r.astype(U32), ((r >> U64(32)) != 0).astype(U32)


def _bfe_u(a, off, width, bits):
    dt = U64 if bits == 64 else U32
    a = np.asarray(a, dt)
    off = np.asarray(off).astype(U64)
    width = np.asarray(width).astype(U64)
    mask = np.where(width >= 64, ~U64(0), (U64(1) << np.minimum(width, U64(63))) - U64(1))
    return ((a.astype(U64) >> off) & mask).astype(dt)


def _bfe_i(a, off, width, bits):
    dt = U64 if bits == 64 else U32
    u = _bfe_u(a, off, width, bits).astype(U64)
    width = np.asarray(width).astype(I64)
    sh = np.clip(64 - width, 0, 64).astype(U64)
    s = np.where(width == 0, I64(0), ((u << np.minimum(sh, U64(63))).view(I64) >> np.minimum(sh, U64(63)).astype(I64)))
    s = np.where(sh == 64, I64(0), s)
    return s.astype(I64).view(U64).astype(dt) if bits == 64 else s.astype(I64).astype(U32)


SOPC = {
    "s_cmp_eq_i32": lambda a, b: a == b, "s_cmp_eq_u32": lambda a, b: a == b,
    "s_cmp_lg_i32": lambda a, b: a != b, "s_cmp_lg_u32": lambda a, b: a != b,
    "s_cmp_gt_i32": lambda a, b: _sx(a) > _sx(b), "s_cmp_ge_i32": lambda a, b: _sx(a) >= _sx(b),
    "s_cmp_lt_i32": lambda a, b: _sx(a) < _sx(b), "s_cmp_le_i32": lambda a, b: _sx(a) <= _sx(b),
    "s_cmp_gt_u32": lambda a, b: a > b, "s_cmp_ge_u32": lambda a, b: a >= b,
    "s_cmp_lt_u32": lambda a, b: a < b, "s_cmp_le_u32": lambda a, b: a <= b,
    "s_bitcmp0_b32": lambda a, b: ((a >> (b & U32(31))) & U32(1)) == 0,
    "s_bitcmp1_b32": lambda a, b: ((a >> (b & U32(31))) & U32(1)) == 1,
}
SOPC_64 = {
    "s_cmp_eq_u64": lambda a, b: a == b, "s_cmp_lg_u64": lambda a, b: a != b,
    "s_bitcmp0_b64": lambda a, b: ((a >> (b & U64(63))) & U64(1)) == 0,
    "s_bitcmp1_b64": lambda a, b: ((a >> (b & U64(63))) & U64(1)) == 1,
}

SOP1_32 = {
    "s_mov_b32": lambda a: (a, None),
    "s_not_b32": lambda a: _nz(~a),
    "s_wqm_b32": lambda a: _nz(_wqm(a, 32)),
    "s_brev_b32": lambda a: (_brev32(a), None),
    "s_bcnt0_i32_b32": lambda a: _nz(U32(32) - _popcount32(a)),
    "s_bcnt1_i32_b32": lambda a: _nz(_popcount32(a)),
    "s_ff0_i32_b32": lambda a: (_ff1(~a, 32), None),
    "s_ff1_i32_b32": lambda a: (_ff1(a, 32), None),
    "s_flbit_i32_b32": lambda a: (_flbit(a, 32), None),
    "s_flbit_i32": lambda a: (_flbit_signed(a), None),
    "s_sext_i32_i8": lambda a: ((a & U32(0xFF)).astype(np.uint8).view(np.int8).astype(I32).view(U32), None),
    "s_sext_i32_i16": lambda a: ((a & U32(0xFFFF)).astype(np.uint16).view(np.int16).astype(I32).view(U32), None),
    "s_abs_i32": lambda a: _nz(np.abs(_sx(a)).astype(U32)),
    "s_quadmask_b32": lambda a: _nz(_quadmask(a, 32)),
}
SOP1_64 = {
    "s_mov_b64": lambda a: (a, None),
    "s_not_b64": lambda a: _nz(~a),
    "s_wqm_b64": lambda a: _nz(_wqm(a, 64)),
    "s_brev_b64": lambda a: (_brev64(a), None),
    "s_quadmask_b64": lambda a: _nz(_quadmask(a, 64)),
}
SOP1_64_TO_32 = {
    "s_bcnt0_i32_b64": lambda a: _nz(U32(64) - _popcount64(a)),
    "s_bcnt1_i32_b64": lambda a: _nz(_popcount64(a)),
    "s_ff0_i32_b64": lambda a: (_ff1(~a, 64), None),
    "s_ff1_i32_b64": lambda a: (_ff1(a, 64), None),
    "s_flbit_i32_b64": lambda a: (_flbit(a, 64), None),
}

# saveexec: D = EXEC (old); EXEC = f(S0, EXEC); SCC = EXEC != 0.  wrexec: EXEC = f(...); D = EXEC (new)
SAVEEXEC = {
    "s_and_saveexec_b64": lambda s, e: s & e, "s_or_saveexec_b64": lambda s, e: s | e,
    "s_xor_saveexec_b64": lambda s, e: s ^ e, "s_andn2_saveexec_b64": lambda s, e: s & ~e,
    "s_orn2_saveexec_b64": lambda s, e: s | ~e, "s_nand_saveexec_b64": lambda s, e: ~(s & e),
    "s_nor_saveexec_b64": lambda s, e: ~(s | e), "s_xnor_saveexec_b64": lambda s, e: ~(s ^ e),
    "s_andn1_saveexec_b64": lambda s, e: ~s & e, "s_orn1_saveexec_b64": lambda s, e: ~s | e,
}
WREXEC = {"s_andn1_wrexec_b64": lambda s, e: ~s & e, "s_andn2_wrexec_b64": lambda s, e: s & ~e}


def _flbit_signed(a):
    x = _sx(a)
    y = np.where(x < 0, ~x, x).astype(U32)
    r = _flbit(y, 32).astype(I64)
    return np.where((x == 0) | (x == -1), -1, r).astype(I64).astype(U32)


def _wqm(a, bits):
    dt = U64 if bits == 64 else U32
    a = np.asarray(a, dt)
    out = np.zeros_like(a)
    for q in range(bits // 4):
        nib = (a >> dt(4 * q)) & dt(0xF)
        out = out | np.where(nib != 0, dt(0xF) << dt(4 * q), dt(0))
    return out


def _quadmask(a, bits):
    dt = U64 if bits == 64 else U32
    a = np.asarray(a, dt)
    out = np.zeros_like(a)
    for q in range(bits // 4):
        out = out | np.where(((a >> dt(4 * q)) & dt(0xF)) != 0, dt(1) << dt(q), dt(0))
    return out


# ============================================================================ compile

def compile_salu(inst, idx, ctx) -> CompiledStep:
    fam, name = inst.family, inst.name
    if fam == "SOPP":
        return _compile_sopp(inst, idx, ctx)
    if fam == "SOPK":
        return _compile_sopk(inst, idx, ctx)
    d, srcs = _ops(inst)
    fn: Callable[..., Any]     # the semantics from whichever table has the instruction (their arities differ)

    if name in ("s_set_gpr_idx_on", "s_set_gpr_idx_idx"):
        # VGPR index mode (gfx9): M0[7:0] is the index; _on also sets the enable mask M0[15:12] from its
        # 4-bit immediate (VSRC0, VSRC1, VSRC2, VDST).  The executor applies the index to the VALU
        # instructions that follow in the block (executor.CompiledCode.block_at).
        ra = read32(srcs[0], ctx, lanes=False)
        keep = U32(0xFFFF0F00) if name == "s_set_gpr_idx_on" else U32(0xFFFFFF00)
        mode = U32((srcs[1].value & 0xF) << 12) if name == "s_set_gpr_idx_on" else U32(0)

        def h(st, ws):
            st.S[M0, ws] = (st.S[M0, ws] & keep) | (np.asarray(ra(st, ws), U32) & U32(0xFF)) | mode
        return CompiledStep(inst, idx, h, "salu")

    if fam == "SOPC":
        if name in SOPC_64:
            fn = SOPC_64[name]
            b32 = name.startswith("s_bitcmp")
            ra = read64(srcs[0], ctx, lanes=False)
            rb = read32(srcs[1], ctx, lanes=False) if b32 else read64(srcs[1], ctx, lanes=False)
            conv = (lambda x: np.asarray(x, U64)) if b32 else (lambda x: x)

            def h(st, ws):
                st.SCC[ws] = fn(ra(st, ws), conv(rb(st, ws)))
            return CompiledStep(inst, idx, h, "salu")
        if name in SOPC:
            fn = SOPC[name]
            ra, rb = read32(srcs[0], ctx, lanes=False), read32(srcs[1], ctx, lanes=False)

            def h(st, ws):
                st.SCC[ws] = fn(ra(st, ws), rb(st, ws))
            return CompiledStep(inst, idx, h, "salu")
        raise CompileError(f"{name} is not modelled")

    if fam == "SOP2":
        if name in SOP2_32:
            fn = SOP2_32[name]
            ra, rb = read32(srcs[0], ctx, lanes=False), read32(srcs[1], ctx, lanes=False)
            w = swrite(d, ctx)

            def h(st, ws):
                a = np.asarray(ra(st, ws), U32)
                r, c = fn(a, np.asarray(rb(st, ws), U32), st.SCC[ws])
                w(st, ws, r)
                if c is not None:
                    st.SCC[ws] = c
            return CompiledStep(inst, idx, h, "salu")
        if name in SOP2_64:
            fn = SOP2_64[name]
            ra = read32(srcs[0], ctx, lanes=False) if name in SOP2_64_A32 else read64(srcs[0], ctx, lanes=False)
            rb = read32(srcs[1], ctx, lanes=False) if name in SOP2_64_B32 else read64(srcs[1], ctx, lanes=False)
            w = swrite64(d, ctx)

            def h(st, ws):
                r, c = fn(np.asarray(ra(st, ws), U64), np.asarray(rb(st, ws), U64), st.SCC[ws])
                w(st, ws, r)
                if c is not None:
                    st.SCC[ws] = c
            return CompiledStep(inst, idx, h, "salu")
        raise CompileError(f"{name} is not modelled")

    # SOP1
    if name in SAVEEXEC or name in WREXEC:
        save = name in SAVEEXEC
        fn = SAVEEXEC.get(name) or WREXEC[name]
        ra = read64(srcs[0], ctx, lanes=False)
        w = swrite64(d, ctx)
        wexec = _exec_writer()

        def h(st, ws):
            e = st.S[EXEC_LO, ws].astype(U64) | (st.S[EXEC_LO + 1, ws].astype(U64) << U64(32))
            new = np.asarray(fn(np.asarray(ra(st, ws), U64), e), U64)
            new = np.broadcast_to(new, e.shape)
            if save:
                w(st, ws, e)
            wexec(st, ws, new)
            if not save:
                w(st, ws, new)
            st.SCC[ws] = (new != 0).astype(U32)
        return CompiledStep(inst, idx, h, "salu")
    if name in SOP1_32:
        fn = SOP1_32[name]
        ra = read32(srcs[0], ctx, lanes=False)
        w = swrite(d, ctx)

        def h(st, ws):
            r, c = fn(np.asarray(ra(st, ws), U32))
            w(st, ws, r)
            if c is not None:
                st.SCC[ws] = c
        return CompiledStep(inst, idx, h, "salu")
    if name in SOP1_64 or name in SOP1_64_TO_32:
        fn = SOP1_64.get(name) or SOP1_64_TO_32[name]
        ra = read64(srcs[0], ctx, lanes=False)
        w = swrite64(d, ctx) if name in SOP1_64 else swrite(d, ctx)

        def h(st, ws):
            r, c = fn(np.asarray(ra(st, ws), U64))
            w(st, ws, r)
            if c is not None:
                st.SCC[ws] = c
        return CompiledStep(inst, idx, h, "salu")
    if name in ("s_cmov_b32", "s_cmov_b64"):
        is64 = name.endswith("64")
        ra = (read64 if is64 else read32)(srcs[0], ctx, lanes=False)
        code = d.reg.code

        def h(st, ws):
            c = st.SCC[ws] != 0
            v = np.asarray(ra(st, ws), U64 if is64 else U32)
            if is64:
                v = np.broadcast_to(v, c.shape)
                st.S[code, ws] = np.where(c, (v & U64(M32)).astype(U32), st.S[code, ws])
                st.S[code + 1, ws] = np.where(c, (v >> U64(32)).astype(U32), st.S[code + 1, ws])
            else:
                st.S[code, ws] = np.where(c, v, st.S[code, ws])
            if code in (EXEC_LO, EXEC_LO + 1):
                st.sync_exec(ws)
        return CompiledStep(inst, idx, h, "salu")
    if name in ("s_bitset0_b32", "s_bitset1_b32", "s_bitset0_b64", "s_bitset1_b64"):
        is64, one = name.endswith("64"), "bitset1" in name
        ra = read32(srcs[0], ctx, lanes=False)
        code = d.reg.code

        def h(st, ws):
            b = np.asarray(ra(st, ws), U32) & U32(63 if is64 else 31)
            reg = code + (b >> U32(5)).astype(np.int64) if is64 else np.full(np.shape(b), code)
            bit = U32(1) << (b & U32(31))
            cols = np.arange(st.W)[ws]
            cur = st.S[reg, cols]
            st.S[reg, cols] = (cur | bit) if one else (cur & ~bit)
        return CompiledStep(inst, idx, h, "salu")
    if name == "s_getpc_b64":
        w = swrite64(d, ctx)
        nxt = U64(inst.pc + inst.size)
        return CompiledStep(inst, idx, lambda st, ws: w(st, ws, np.full(st.SCC[ws].shape, nxt, U64)), "salu")
    if name in ("s_setpc_b64", "s_swappc_b64"):
        ra = read64(srcs[0], ctx, lanes=False)
        w = swrite64(d, ctx) if d is not None else None
        nxt = U64(inst.pc + inst.size)

        def h(st, ws):
            tgt = np.asarray(ra(st, ws), U64)
            if w is not None:
                w(st, ws, np.full(st.SCC[ws].shape, nxt, U64))
            _jump_to_addresses(st, ws, tgt, inst, ctx)
        s = CompiledStep(inst, idx, h, "branch", term=True)
        return s
    if name in ("s_movrels_b32", "s_movrels_b64", "s_movreld_b32", "s_movreld_b64"):
        return _compile_movrel(inst, idx, ctx, d, srcs)
    if name == "s_bitreplicate_b64_b32":
        ra = read32(srcs[0], ctx, lanes=False)
        w = swrite64(d, ctx)

        def h(st, ws):
            a = np.asarray(ra(st, ws), U32).astype(U64)
            out = np.zeros(np.shape(a), U64)
            for i in range(32):
                bit = (a >> U64(i)) & U64(1)
                out = out | (bit << U64(2 * i)) | (bit << U64(2 * i + 1))
            w(st, ws, out)
        return CompiledStep(inst, idx, h, "salu")
    raise CompileError(f"{name} is not modelled")


def _exec_writer():
    def wexec(st, ws, v):
        v = np.asarray(v, U64)
        st.S[EXEC_LO, ws] = (v & U64(M32)).astype(U32)
        st.S[EXEC_LO + 1, ws] = (v >> U64(32)).astype(U32)
        st.sync_exec(ws)
    return wexec


def _jump_to_addresses(st, ws, tgt, inst, ctx):
    tgt = np.broadcast_to(np.asarray(tgt, U64), st.SCC[ws].shape)
    out = np.empty(tgt.shape, np.int64)
    for i, t in enumerate(tgt.tolist()):
        j = ctx.pc_index.get(int(t))
        if j is None:
            st.run.fault(R.FAULT, inst, f"jump to {int(t):#x}, which is not an instruction of this kernel",
                         ws, None)
            j = len(ctx.pc_index)
        out[i] = j
    st.pc[ws] = out


def _compile_movrel(inst, idx, ctx, d, srcs):
    name = inst.name
    n = 2 if name.endswith("64") else 1
    src_rel = name.startswith("s_movrels")
    sreg = srcs[0].reg.code if srcs[0].kind == "reg" else None
    dcode = d.reg.code
    if src_rel and sreg is None:
        raise CompileError(f"{name} with a constant source is not modelled")

    def h(st, ws):
        m0 = st.S[M0, ws].astype(np.int64)
        cols = np.arange(st.W)[ws]
        for k in range(n):
            if src_rel:
                st.S[dcode + k, ws] = st.S[sreg + m0 + k, cols]
            else:
                val = read32(srcs[0], ctx, lanes=False)(st, ws) if sreg is None else st.S[sreg + k, ws]
                st.S[dcode + m0 + k, cols] = val
    return CompiledStep(inst, idx, h, "salu")


# ============================================================================ SOPK

def _compile_sopk(inst, idx, ctx) -> CompiledStep:
    name = inst.name
    imm = inst.mods.get("simm16", 0) & 0xFFFF
    simm = imm - 0x10000 if imm & 0x8000 else imm
    # None only for s_setreg_imm32_b32 (no sdst field); the instructions that name a register in it have one
    d = next((o for o in inst.operands if o.role == "sdst"), None)
    if name == "s_movk_i32":
        w = swrite(d, ctx)
        v = U32(simm & M32)
        return CompiledStep(inst, idx, lambda st, ws: w(st, ws, np.full(st.SCC[ws].shape, v, U32)), "salu")
    if name == "s_cmovk_i32":
        assert d is not None
        code = d.reg.code
        v = U32(simm & M32)

        def h(st, ws):
            st.S[code, ws] = np.where(st.SCC[ws] != 0, v, st.S[code, ws])
        return CompiledStep(inst, idx, h, "salu")
    if name.startswith("s_cmpk_"):
        op = name.split("_")[2]
        signed = name.endswith("i32")
        k = simm if signed else imm
        assert d is not None
        code = d.reg.code
        cmp = {"eq": np.equal, "lg": np.not_equal, "gt": np.greater, "ge": np.greater_equal,
               "lt": np.less, "le": np.less_equal}[op]

        def h(st, ws):
            a = _sx(st.S[code, ws]) if signed else st.S[code, ws].astype(I64)
            st.SCC[ws] = cmp(a, k).astype(U32)
        return CompiledStep(inst, idx, h, "salu")
    if name == "s_addk_i32":
        assert d is not None
        code = d.reg.code

        def h(st, ws):
            r = _sx(st.S[code, ws]) + simm
            st.SCC[ws] = ((r > 0x7FFFFFFF) | (r < -0x80000000)).astype(U32)
            st.S[code, ws] = r.astype(U32)
        return CompiledStep(inst, idx, h, "salu")
    if name == "s_mulk_i32":
        assert d is not None
        code = d.reg.code

        def h(st, ws):
            st.S[code, ws] = (_sx(st.S[code, ws]) * simm).astype(U32)
        return CompiledStep(inst, idx, h, "salu")
    if name == "s_getreg_b32":
        hw_id, offset, size = imm & 0x3F, (imm >> 6) & 0x1F, ((imm >> 11) & 0x1F) + 1
        w = swrite(d, ctx)

        def h(st, ws):
            v = _hwreg_value(st, ws, hw_id)
            mask = (1 << size) - 1
            w(st, ws, ((v >> U64(offset)) & U64(mask)).astype(U32))
        return CompiledStep(inst, idx, h, "salu")
    if name in ("s_setreg_b32", "s_setreg_imm32_b32"):
        hw_id, offset, size = imm & 0x3F, (imm >> 6) & 0x1F, ((imm >> 11) & 0x1F) + 1
        src = d if name == "s_setreg_b32" else next(o for o in inst.operands if o.role == "k")
        ra = read32(src, ctx, lanes=False)
        mask = ((1 << size) - 1) << offset

        def h(st, ws):
            if hw_id == 1:  # HW_REG_MODE
                v = np.asarray(ra(st, ws), U32)
                st.mode[ws] = (st.mode[ws] & U32(~mask & M32)) | ((v << U32(offset)) & U32(mask))
        return CompiledStep(inst, idx, h, "salu")
    if name == "s_call_b64":
        w = swrite64(d, ctx)
        nxt = U64(inst.pc + inst.size)
        tgt = inst.branch_target
        if tgt is None:
            tgt = inst.pc + 4 + 4 * simm
        j = ctx.pc_index.get(tgt)
        if j is None:
            raise CompileError(f"call target {tgt:#x} is not an instruction of this kernel", R.FAULT)

        def h(st, ws):
            w(st, ws, np.full(st.SCC[ws].shape, nxt, U64))
            st.pc[ws] = j
        return CompiledStep(inst, idx, h, "branch", term=True)
    raise CompileError(f"{name} is not modelled")


def _hwreg_value(st, ws, hw_id):
    n = st.SCC[ws].shape
    if hw_id == 1:
        return st.mode[ws].astype(U64)
    if hw_id == 4:  # HW_ID: wave id [3:0], simd [5:4], ... cu [11:8]; a plausible stable value
        return from_host((st.wave_in_wg[ws] & 0xF).astype(U64))
    if hw_id == 6:  # LDS_ALLOC
        return np.full(n, U64((st.lds_bytes + 511) // 512 << 12))
    return np.zeros(n, U64)


# ============================================================================ SOPP

def _compile_sopp(inst, idx, ctx) -> CompiledStep:
    name = inst.name
    imm = inst.mods.get("simm16", 0)
    if name == "s_nop":
        s = CompiledStep(inst, idx, _noop, "nop")
        s.nop_slots = (imm & 0xF) + 1
        return s
    if name in ("s_endpgm", "s_endpgm_saved", "s_endpgm_ordered_ps_done"):
        def h(st, ws):
            st.status[ws] = DONE
        return CompiledStep(inst, idx, h, "branch", term=True)
    if name == "s_barrier":
        nxt = idx + 1

        def h(st, ws):
            st.status[ws] = BARRIER
            st.pc[ws] = nxt
        return CompiledStep(inst, idx, h, "barrier", term=True)
    if name == "s_waitcnt":
        s = CompiledStep(inst, idx, _noop, "waitcnt")
        s.flags = {"vmcnt": inst.mods.get("vmcnt", 63), "lgkmcnt": inst.mods.get("lgkmcnt", 15),
                   "expcnt": inst.mods.get("expcnt", 7)}
        return s
    if name == "s_branch" or name.startswith("s_cbranch_"):
        tgt = inst.branch_target
        j = ctx.pc_index.get(tgt)
        if j is None:
            raise CompileError(f"branch target {tgt:#x} is not an instruction of this kernel", R.FAULT)
        nxt = idx + 1
        cond = name[len("s_cbranch_"):] if name != "s_branch" else None
        if cond is None:
            def h(st, ws):
                st.pc[ws] = j
        else:
            test = _branch_cond(cond, inst)

            def h(st, ws):
                st.pc[ws] = to_host(np.where(test(st, ws), j, nxt))
        return CompiledStep(inst, idx, h, "branch", term=True)
    if name in ("s_sleep", "s_setprio", "s_icache_inv", "s_incperflevel", "s_decperflevel",
                "s_ttracedata", "s_wakeup", "s_setkill", "s_set_gpr_idx_off", "s_sendmsghalt"):
        return CompiledStep(inst, idx, _noop, "other")
    if name == "s_set_gpr_idx_mode":
        mode = U32((imm & 0xF) << 12)

        def h(st, ws):
            st.S[M0, ws] = (st.S[M0, ws] & U32(0xFFFF0FFF)) | mode
        return CompiledStep(inst, idx, h, "other")
    if name == "s_sendmsg":
        return CompiledStep(inst, idx, _noop, "other")
    if name == "s_trap":
        def h(st, ws):
            st.run.fault(R.FAULT, inst, f"s_trap {imm} executed (the hardware would enter the trap handler)",
                         ws, None)
        return CompiledStep(inst, idx, h, "other")
    if name == "s_sethalt":
        def h(st, ws):
            if imm & 1:
                st.run.fault(R.FAULT, inst, "s_sethalt 1 halts the wave", ws, None)
        return CompiledStep(inst, idx, h, "other")
    raise CompileError(f"{name} is not modelled")


def _noop(st, ws):
    return None


def _branch_cond(cond, inst):
    if cond == "scc0":
        return lambda st, ws: st.SCC[ws] == 0
    if cond == "scc1":
        return lambda st, ws: st.SCC[ws] != 0
    if cond == "vccz":
        return lambda st, ws: (st.S[VCC_LO, ws] | st.S[VCC_LO + 1, ws]) == 0
    if cond == "vccnz":
        return lambda st, ws: (st.S[VCC_LO, ws] | st.S[VCC_LO + 1, ws]) != 0
    if cond == "execz":
        return lambda st, ws: (st.S[EXEC_LO, ws] | st.S[EXEC_LO + 1, ws]) == 0
    if cond == "execnz":
        return lambda st, ws: (st.S[EXEC_LO, ws] | st.S[EXEC_LO + 1, ws]) != 0
    raise CompileError(f"s_cbranch_{cond} is not modelled (debugger branches)")
