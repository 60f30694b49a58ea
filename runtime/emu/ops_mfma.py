"""Matrix instructions (MFMA): operand gathering around ``mfma.mfma()`` (helper-7's lane layouts and
arithmetic).  MFMAs ignore EXEC: every lane's registers take part and every lane of D is written."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
else:       # numpy, or CuPy while a CUDA launch runs (xp.py)
    from isagen.runtime.emu.xp import np

from isagen.runtime.emu import cuda_kernels
from isagen.runtime.emu import mfma as M
from isagen.runtime.emu import xp as X
from isagen.runtime.emu.access import CompileError, is_vreg, read32
from isagen.runtime.emu.steps import CompiledStep
from isagen.runtime.emu.wave import ALL

U32 = np.uint32


def compile_mfma(inst, idx, ctx) -> CompiledStep:
    name = inst.name
    if name.startswith("v_smfmac"):
        raise CompileError(f"{name}: sparse MFMA (SMFMAC) is not modelled")
    m = inst.mods
    cbsz, abid, blgp = m.get("cbsz", 0), m.get("abid", 0), m.get("blgp", 0)
    if "scale_byte" in m and abid == 1:
        abid = 0        # the MFMA word of a v_mfma_scale_* has abid 1, set by the assembler (decoder.py)
    try:
        spec = M.validate(name, ctx.target, cbsz, abid, blgp)
    except Exception as e:                     # MfmaError: unknown / wrong target / bad modifier
        raise CompileError(str(e)) from None
    ops = {o.role: o for o in inst.operands}
    d, a, b, c = ops["vdst"], ops["src0"], ops["src1"], ops["src2"]
    na, nb = M.operand_regs(spec, cbsz, blgp)      # f8f6f4: the widths of the selected formats
    nc = spec.c_regs
    di = ctx.vindex(d.reg, nc)
    ai = ctx.vindex(a.reg, na)
    bi = ctx.vindex(b.reg, nb)
    if is_vreg(c):
        ci = ctx.vindex(c.reg, nc)
        read_c = lambda st, ws: st.V[ci:ci + nc, ws]
    else:
        cbits = U32(c.const_bits("f64" if spec.out_type == "f64" else ("i32" if spec.out_type == "i32" else "f32"))
                    & 0xFFFFFFFF)
        if spec.out_type == "f64":
            v = c.const_bits("f64")
            pair = np.array([v & 0xFFFFFFFF, v >> 32], U32)
            const = np.tile(pair, nc // 2)[:, None, None]
        else:
            const = np.full((nc, 1, 1), cbits, U32)
        read_c = lambda st, ws: const
    target = ctx.target
    scale_kw = {}
    read_sa = read_sb = None
    if spec.scaled:
        # the two E8M0 scale sources (VGPR, SGPR or constant) and the byte each takes its scales
        # from (decoder: scale_byte = op_sel[i] | op_sel_hi[i] << 1)
        read_sa, read_sb = read32(ops["scale0"], ctx), read32(ops["scale1"], ctx)
        opsel_a, opsel_b = m.get("scale_byte", (0, 0))
        scale_kw = {"opsel_a": opsel_a, "opsel_b": opsel_b}

    # D may be written in place (it may be C, but must not overlap A or B)
    in_place = not (di < ai + na and ai < di + nc) and not (di < bi + nb and bi < di + nc)

    # ws: every wave (ALL), a contiguous range of them (a chunk of a fused MFMA run, executor.py) or
    # an index array (a group of waves that branched apart; the fancy-indexed operands are copies)
    # the cuda engine: one kernel in place in the register file (cuda_kernels.mfma_rows), also for a
    # group of waves that branched apart (no gathered copies of the operands)
    kinds = M._check_modifiers(spec, cbsz, abid, blgp)
    cuda_fast = in_place and not spec.scaled and M._native_ok(spec, kinds[0], kinds[1])
    # the f8f6f4 MFMAs (block-scaled or not): one kernel in place too (cuda_kernels.mfma_mx)
    cuda_mx = in_place and spec.layout == "f8f6f4" and spec.out_type == "f32"
    mx_bits = (M.F8F6F4_FORMATS[kinds[2]][1], M.F8F6F4_FORMATS[kinds[4]][1]) if cuda_mx else (0, 0)
    ci = ctx.vindex(c.reg, nc) if is_vreg(c) else None
    cconst = None if ci is not None else const

    def h(st, ws):
        if cuda_fast and X.active() == "cuda":
            cuda_kernels.mfma_rows(st, ws, spec, target, kinds, ai, bi, ci, cconst, di, M.layout)
            return
        if cuda_mx and X.active() == "cuda":
            idx, n = cuda_kernels._rows(st, ws)
            V = st.V
            scales = None
            if read_sa is not None and read_sb is not None:
                scales = M._scale_operands(spec, read_sa(st, ws), read_sb(st, ws), scale_kw["opsel_a"],
                                           scale_kw["opsel_b"])
            cuda_kernels.mfma_mx(spec, target, kinds, mx_bits, V[ai:ai + na], V[bi:bi + nb],
                                 V[ci:ci + nc] if ci is not None else cconst, V[di:di + nc], scales, idx, n,
                                 M.layout, M._decode_table)
            return
        A = st.V[ai:ai + na, ws]
        B = st.V[bi:bi + nb, ws]
        C = read_c(st, ws)
        kw = scale_kw
        if read_sa is not None and read_sb is not None:
            kw = dict(scale_kw, scale_a=read_sa(st, ws), scale_b=read_sb(st, ws))
        if in_place and isinstance(ws, slice):
            M.mfma(name, target, A, B, C, cbsz=cbsz, abid=abid, blgp=blgp, out=st.V[di:di + nc, ws], **kw)
            return
        D = M.mfma(name, target, A, B, C, cbsz=cbsz, abid=abid, blgp=blgp, **kw)
        st.V[di:di + nc, ws] = D

    def native_call(st):
        """The native kernel's call over every wave of the batch (for a fused MFMA run), or None."""
        if not in_place:
            return None
        return M.native_call(name, target, st.V[ai:ai + na], st.V[bi:bi + nb], read_c(st, ALL), st.V[di:di + nc],
                             cbsz=cbsz, abid=abid, blgp=blgp)
    step = CompiledStep(inst, idx, h, "mfma")
    # only where the native kernel can take it (known when compiling: fused runs and the block engine
    # leave the others to ``h``)
    step.native_call = native_call if cuda_fast else None
    return step
