"""The 64-byte kernel descriptor of a ``Program``, without an assembler (a piece of the in-process
code-object writer of issue 17; LLVM still writes the code objects isagen ships).

``kernel_descriptor(program, code_entry_offset)`` packs the fields ``isagen.objects.emit`` writes as
``.amdhsa_*`` directives the way LLVM's assembler packs them (AMDGPUUsage "Kernel Descriptor";
``AMDHSAKernelDescriptor.h``): the segment sizes, ``compute_pgm_rsrc1/2/3`` (register granules, float
modes, user and system SGPRs, work-item ids, accum_offset) and ``kernel_code_properties``.  The one
field that depends on the ELF layout, the code's byte offset from the descriptor, is the caller's.
tests/objects/test_encoder_text.py compares every bundled kernel's descriptor, on both targets, with
the one LLVM wrote.
"""

from __future__ import annotations

import struct

from isagen.builders.program import Program
from isagen.objects.emit import next_free_sgpr

KD_SIZE = 64


def _granules(n: int, granule: int) -> int:
    """LLVM's ``GRANULATED_*_COUNT`` encoding: (n rounded up to the granule) / granule - 1."""
    return (max(n, 1) + granule - 1) // granule - 1


def kernel_descriptor(program: Program, code_entry_offset: int = 0) -> bytes:
    """The descriptor bytes for ``program``; ``code_entry_offset``: the kernel's first instruction's
    address minus the descriptor's."""
    t = program.target
    ids = program.workgroup_ids
    # rsrc1: unified VGPRs in granules of 8 (gfx90a+), SGPRs (VCC/FLAT_SCRATCH/XNACK_MASK reserved
    # included) in LLVM's SGPR encoding granule of 8 (getSGPREncodingGranule; the hardware then
    # allocates in 16s); denormals on for fp32 and fp16/64 (mode 3), DX10 clamp and IEEE mode on
    # (LLVM's defaults)
    vgpr_gran = _granules(program.next_free_vgpr, t.vgpr_alloc_granule)
    sgpr_gran = _granules(program.sgpr_count, 8)
    rsrc1 = vgpr_gran | sgpr_gran << 6 | 3 << 16 | 3 << 18 | 1 << 21 | 1 << 23
    # rsrc2: user SGPRs, the workgroup ids asked for, work-item ids in v0 (0: x, 1: x,y, 2: x,y,z)
    rsrc2 = (program.user_sgprs << 1 | int("x" in ids) << 7 | int("y" in ids) << 8 | int("z" in ids) << 9
             | (program.workitem_id_dims - 1) << 11)
    # rsrc3 (gfx90a+): ACCUM_OFFSET = accum_offset / 4 - 1; TG_SPLIT off
    rsrc3 = program.accum_offset // 4 - 1
    # kernel_code_properties: only the kernarg segment pointer (s[0:1]) is set up
    props = 1 << 3
    assert next_free_sgpr(program) <= program.sgpr_count          # the count the granule is of
    data = struct.pack("<IIIIq20xIIIHH4x", program.lds_bytes, 0, program.args.segment_size, 0,
                       code_entry_offset, rsrc3, rsrc1, rsrc2, props, 0)
    assert len(data) == KD_SIZE
    return data
