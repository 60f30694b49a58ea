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
* ``packb(value)``: MessagePack of a document, the bytes ``msgpack.packb`` writes (its defaults:
  the smallest integer form, UTF-8 strings with str8, float64), written here so that a build does
  not load the msgpack package (~3.5 ms of a process, issue 17).  tests/objects/test_packb.py
  compares the two on every bundled kernel's document and on generated ones.

tests/objects/test_encoder_text.py compares both, for every bundled kernel on both targets, with
what LLVM wrote.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

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
    return packb(_key_order(doc))


def metadata_note(program: Program, target_id: str | None = None) -> bytes:
    """The whole note record: name size, descriptor size, type, the name and the descriptor, each
    padded to 4 bytes."""
    desc = metadata_msgpack(program, target_id)
    pad = lambda b: b + b"\0" * (-len(b) % 4)         # noqa: E731
    return struct.pack("<III", len(NOTE_NAME), len(desc), NT_AMDGPU_METADATA) + pad(NOTE_NAME) + pad(desc)


_DOUBLE = struct.Struct(">d")


def packb(value: Any) -> bytes:
    """``value`` (None, bools, ints of 64 bits, floats, str, bytes, lists, tuples and dicts of them)
    as MessagePack, byte for byte what ``msgpack.packb(value)`` writes; another type is a
    ``TypeError``, an integer out of range an ``OverflowError``, as there."""
    out = bytearray()
    _pack(value, out)
    return bytes(out)


def _head(out: bytearray, n: int, fix: int, fix_limit: int, codes: bytes) -> None:
    """A str/bin/array/map header: the fix form below ``fix_limit`` (fix < 0: none), else the first of
    the 8/16/32-bit forms ``codes`` lists (0: that width unused) that holds ``n``."""
    if fix >= 0 and n < fix_limit:
        out.append(fix | n)
    elif codes[0] and n < 0x100:
        out += bytes((codes[0], n))
    elif n < 0x10000:
        out.append(codes[1])
        out += n.to_bytes(2, "big")
    elif n < 0x100000000:
        out.append(codes[2])
        out += n.to_bytes(4, "big")
    else:
        raise ValueError(f"{n} items or bytes are more than MessagePack holds")


def _pack(v: Any, out: bytearray) -> None:
    t = type(v)
    if t is str:                                   # the document's common cases first
        data = v.encode("utf-8")
        n = len(data)
        if n < 32:
            out.append(0xA0 | n)
        else:
            _head(out, n, 0xA0, 32, b"\xd9\xda\xdb")
        out += data
        return
    if t is int and -0x20 <= v < 0x80:
        out += v.to_bytes(1, "big", signed=True)
        return
    if v is None:
        out.append(0xC0)
    elif v is True or v is False:
        out.append(0xC3 if v else 0xC2)
    elif isinstance(v, int):
        if -0x20 <= v < 0x80:                      # positive and negative fixint
            out += v.to_bytes(1, "big", signed=True)
        elif v >= 0:
            for code, size in ((0xCC, 1), (0xCD, 2), (0xCE, 4), (0xCF, 8)):
                if v < 1 << 8 * size:
                    out.append(code)
                    out += v.to_bytes(size, "big")
                    break
            else:
                raise OverflowError("Integer value out of range")
        else:
            for code, size in ((0xD0, 1), (0xD1, 2), (0xD2, 4), (0xD3, 8)):
                if v >= -(1 << (8 * size - 1)):
                    out.append(code)
                    out += v.to_bytes(size, "big", signed=True)
                    break
            else:
                raise OverflowError("Integer value out of range")
    elif isinstance(v, float):
        out.append(0xCB)
        out += _DOUBLE.pack(v)
    elif isinstance(v, (bytes, bytearray)):
        _head(out, len(v), -1, 0, b"\xc4\xc5\xc6")
        out += v
    elif isinstance(v, str):
        data = v.encode("utf-8")
        _head(out, len(data), 0xA0, 32, b"\xd9\xda\xdb")
        out += data
    elif isinstance(v, dict):
        _head(out, len(v), 0x80, 16, b"\x00\xde\xdf")
        for k, x in v.items():
            _pack(k, out)
            _pack(x, out)
    elif isinstance(v, (list, tuple)):
        _head(out, len(v), 0x90, 16, b"\x00\xdc\xdd")
        for x in v:
            _pack(x, out)
    else:
        raise TypeError(f"can not serialize {type(v).__name__!r} object")
