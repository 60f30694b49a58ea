"""Instruction -> CompiledStep: dispatch on the decoder's encoding family to the semantics modules."""

from __future__ import annotations

from isagen.runtime.emu.access import CompileError
from isagen.runtime.emu.ops_ds import compile_ds
from isagen.runtime.emu.ops_mem import compile_smem, compile_vmem
from isagen.runtime.emu.ops_mfma import compile_mfma
from isagen.runtime.emu.ops_salu import compile_salu
from isagen.runtime.emu.ops_valu import compile_valu
from isagen.runtime.emu.steps import CompiledStep

_SALU = ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP")
_VALU = ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P")
_VMEM = ("MUBUF", "MTBUF", "GLOBAL", "FLAT", "SCRATCH")


def compile_step(inst, idx: int, ctx) -> CompiledStep:
    fam = inst.family
    if fam in _SALU:
        return compile_salu(inst, idx, ctx)
    if fam in _VALU:
        if inst.mai and inst.name.startswith(("v_mfma", "v_smfmac")):
            return compile_mfma(inst, idx, ctx)
        return compile_valu(inst, idx, ctx)
    if fam == "SMEM":
        return compile_smem(inst, idx, ctx)
    if fam in _VMEM:
        return compile_vmem(inst, idx, ctx)
    if fam == "DS":
        return compile_ds(inst, idx, ctx)
    raise CompileError(f"{inst.mnemonic}: encoding family {fam} is not modelled")
