"""Test helpers over code-object bytes: find and replace the AMDGPU metadata note.

The replacement is written in place of the old note's descriptor (its size field updated, the rest
of the section zero-filled) when it fits; a larger one is appended to the file as a note of its own,
and the note section's header is pointed at it (a reader of sections, as isagen's is, sees only it).
"""

from __future__ import annotations

import copy
import struct

import msgpack

NT_AMDGPU_METADATA = 32


def metadata_note(data: bytes) -> tuple[int, int, int]:
    """(file offset of the note header, file offset of its descriptor, the bytes available for a
    descriptor up to the end of its section, the file offset of the section's header) of the
    NT_AMDGPU_METADATA note, read with pyelftools (an ELF reader independent of isagen's)."""
    import io

    from elftools.elf.elffile import ELFFile
    elf = ELFFile(io.BytesIO(data))
    for i, sec in enumerate(elf.iter_sections()):
        sec_hdr = elf["e_shoff"] + i * elf["e_shentsize"]
        if sec["sh_type"] != "SHT_NOTE":
            continue
        end, p = sec["sh_offset"] + sec["sh_size"], sec["sh_offset"]
        while p + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", data, p)
            dp = p + 12 + ((namesz + 3) & ~3)
            if ntype == NT_AMDGPU_METADATA and data[p + 12:p + 12 + namesz].rstrip(b"\0") == b"AMDGPU":
                return p, dp, end - dp, sec_hdr
            p = dp + ((descsz + 3) & ~3)
    raise AssertionError("no AMDGPU metadata note")


def read_metadata(data: bytes):
    p, dp, _, _ = metadata_note(data)
    descsz = struct.unpack_from("<I", data, p + 4)[0]
    return msgpack.unpackb(data[dp:dp + descsz], raw=False, strict_map_key=False)


def with_metadata(data: bytes, doc=None, *, packed: bytes | None = None) -> bytes:
    """``data`` with its metadata note's descriptor replaced by ``packed`` (or msgpack of ``doc``)."""
    raw = msgpack.packb(doc, use_bin_type=True) if packed is None else packed
    p, dp, room, hdr = metadata_note(data)
    if len(raw) > room:
        out = bytearray(data) + bytes(-len(data) % 8)
        note = struct.pack("<III", 7, len(raw), NT_AMDGPU_METADATA) + b"AMDGPU\0\0" + raw
        struct.pack_into("<QQ", out, hdr + 24, len(out), len(note))     # sh_offset, sh_size
        return bytes(out + note)
    out = bytearray(data)
    struct.pack_into("<I", out, p + 4, len(raw))
    out[dp:dp + room] = raw + bytes(room - len(raw))
    return bytes(out)


def edited(doc, path, value):
    """A copy of ``doc`` (nested dicts and lists: code-object metadata, a cache entry's JSON) with the
    field at ``path`` (keys and list indices) replaced by ``value``; ``...`` deletes it, and an empty
    path replaces the whole document."""
    if not path:
        return value
    doc = copy.deepcopy(doc)
    node = doc
    for k in path[:-1]:
        node = node[k]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc
