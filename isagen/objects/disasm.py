"""Disassembly of an AMDGPU code object with isagen's decoder (``isagen disasm FILE.co [--kernel NAME]``
on the command line: cli.py).

:func:`disassemble` gives, per kernel, the target and the descriptor/metadata summary as comments, then one line per
instruction in ``llvm-objdump -d`` layout: the LLVM text, then ``// ADDRESS: WORDS`` (and the branch
target as ``<kernel+0xOFF>``).  The instruction text matches ``llvm-objdump-19 -d`` exactly for
gfx942 (see tests/objects/test_disasm_vs_objdump.py); gfx950 is decoded with the table built by
tools/gen_opcodes.py from zig clang's assembler.
"""

from __future__ import annotations

from isagen.objects.codeobject import CodeObject, CodeObjectKernel


def kernel_header(co: CodeObject, k: CodeObjectKernel, n_instructions: int) -> list[str]:
    kd = k.descriptor
    md = k.metadata
    wg = "".join(c for c, on in zip("xyz", kd.workgroup_id_enabled) if on) or "-"
    lines = [
        f"; kernel {k.name}: {co.target_id}, code 0x{k.code_address:x}..0x"
        f"{k.code_address + len(k.code):x} ({len(k.code)} bytes, {n_instructions} instructions)",
        f";   descriptor: vgprs {kd.vgpr_count} (accum_offset {kd.accum_offset}), sgprs "
        f"{kd.sgpr_count}, lds {kd.group_segment_fixed_size} B, scratch "
        f"{kd.private_segment_fixed_size} B, kernarg {kd.kernarg_size} B, user sgprs "
        f"{kd.user_sgpr_count}, workgroup ids {wg}, workitem id vgprs x"
        f"{'yz'[:kd.workitem_id_vgprs]}",
    ]
    if kd.kernarg_preload_length:
        lines.append(f";   kernarg preload: {kd.kernarg_preload_length} sgprs from offset "
                     f"{kd.kernarg_preload_offset}")
    if md:
        keys = (".vgpr_count", ".agpr_count", ".sgpr_count", ".kernarg_segment_size",
                ".group_segment_fixed_size", ".max_flat_workgroup_size", ".wavefront_size")
        lines.append(";   metadata: " + ", ".join(f"{x[1:]} {md[x]}" for x in keys if x in md))
        args = md.get(".args", [])
        if args:
            parts = []
            for a in args:
                nm = a.get(".name", "")
                parts.append(f"{nm or '?'}@{a.get('.offset')}:{a.get('.size')}"
                             f"({a.get('.value_kind', '')})")
            lines.append(";   args: " + " ".join(parts))
    return lines


def format_instruction(ins, kernel: CodeObjectKernel) -> str:
    words = " ".join(f"{w:08X}" for w in ins.words)
    line = f"\t{ins.text:<58} // {ins.pc:012X}: {words}"
    tgt = ins.branch_target
    if tgt is not None:
        line += f" <{kernel.name}+0x{tgt - kernel.code_address:x}>"
    return line


def disassemble(co: CodeObject, kernel: str | None = None) -> str:
    names = [kernel] if kernel else list(co.kernels)
    if kernel:
        co.kernel(kernel)  # raises KernelNotFound with the list of names
    out = [f"; {co.source}: {co.target_id}, code object v{co.code_object_version}, "
           f"{len(co.kernels)} kernel(s)"]
    for name in names:
        k = co.kernels[name]
        insts = k.decode()
        out.append("")
        out.extend(kernel_header(co, k, len(insts)))
        out.append(f"{k.name}:")
        out.extend(format_instruction(i, k) for i in insts)
    return "\n".join(out) + "\n"
