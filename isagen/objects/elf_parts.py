"""Pieces of a code object packed without an assembler (the in-process code-object writer of
issue 17; ``isagen.objects.elf_writer`` writes the file around them).

* ``kernel_descriptor(program, code_entry_offset)``: the 64-byte kernel descriptor.  It packs the
  fields ``isagen.objects.emit`` writes as ``.amdhsa_*`` directives the way LLVM's assembler packs them
  (AMDGPUUsage "Kernel Descriptor"; ``AMDHSAKernelDescriptor.h``): the segment sizes,
  ``compute_pgm_rsrc1/2/3`` (register granules, float modes, user and system SGPRs, work-item ids,
  accum_offset) and ``kernel_code_properties``.  The one field that depends on the ELF layout, the
  code's byte offset from the descriptor, is the caller's.
* ``metadata_note(program, target_id)``: the ``NT_AMDGPU_METADATA`` note, the msgpack document
  LLVM makes of the YAML that ``emit`` writes in ``.amdgpu_metadata`` (maps in key order).

tests/objects/test_encoder_text.py compares both, for every bundled kernel on both targets, with
what LLVM wrote.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import msgpack

if TYPE_CHECKING:     # (the builders load numpy: only code-object writers need them, and they have them)
    from isagen.builders.program import Program

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
    from isagen.objects.emit import next_free_sgpr
    assert next_free_sgpr(program) <= program.sgpr_count          # the count the granule is of
    data = struct.pack("<IIIIq20xIIIHH4x", program.lds_bytes, 0, program.args.segment_size, 0,
                       code_entry_offset, rsrc3, rsrc1, rsrc2, props, 0)
    assert len(data) == KD_SIZE
    return data


#: the note type and owner of the code-object metadata (AMDGPUUsage "Code Object V3+ Note Records")
NT_AMDGPU_METADATA = 32
NOTE_NAME = b"AMDGPU\0"


def _key_order(value):
    """``value`` with every map's keys in order, as LLVM's msgpack document keeps them."""
    if isinstance(value, dict):
        return {k: _key_order(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_key_order(x) for x in value]
    return value


def metadata_msgpack(program: Program, target_id: str | None = None) -> bytes:
    """The metadata note's descriptor: the msgpack of ``emit.metadata_document``."""
    from isagen.objects.emit import metadata_document
    doc = metadata_document(program, target_id or program.target.target_id)
    data: bytes = msgpack.packb(_key_order(doc))
    return data


def metadata_note(program: Program, target_id: str | None = None) -> bytes:
    """The whole note record: name size, descriptor size, type, the name and the descriptor, each
    padded to 4 bytes."""
    desc = metadata_msgpack(program, target_id)
    pad = lambda b: b + b"\0" * (-len(b) % 4)         # noqa: E731
    return struct.pack("<III", len(NOTE_NAME), len(desc), NT_AMDGPU_METADATA) + pad(NOTE_NAME) + pad(desc)
