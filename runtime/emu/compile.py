"""Instruction -> Step: dispatch on the decoder's encoding family to the semantics modules."""

from __future__ import annotations

from isagen.runtime.emu.access import CompileError
from isagen.runtime.emu.executor import Step

_SALU = ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP")
_VALU = ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P")
_VMEM = ("MUBUF", "MTBUF", "GLOBAL", "FLAT", "SCRATCH")


def compile_step(inst, idx: int, ctx) -> Step:
    fam = inst.family
    if fam in _SALU:
        from isagen.runtime.emu.ops_salu import compile_salu
        return compile_salu(inst, idx, ctx)
    if fam in _VALU:
        if inst.mai and inst.name.startswith(("v_mfma", "v_smfmac")):
            from isagen.runtime.emu.ops_mfma import compile_mfma
            return compile_mfma(inst, idx, ctx)
        from isagen.runtime.emu.ops_valu import compile_valu
        return compile_valu(inst, idx, ctx)
    if fam == "SMEM":
        from isagen.runtime.emu.ops_mem import compile_smem
        return compile_smem(inst, idx, ctx)
    if fam in _VMEM:
        from isagen.runtime.emu.ops_mem import compile_vmem
        return compile_vmem(inst, idx, ctx)
    if fam == "DS":
        from isagen.runtime.emu.ops_ds import compile_ds
        return compile_ds(inst, idx, ctx)
    raise CompileError(f"{inst.mnemonic}: encoding family {fam} is not modelled")
