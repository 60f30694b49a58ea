"""isagen's own encoder against LLVM over whole kernels: the ``.text`` of every bundled spec's code
object, on both targets, is the bytes ``isagen.isa.encoder.encode_items`` gives for the program's
items (labels placed, branch offsets computed), byte for byte; its kernel descriptor is the one
``isagen.objects.elf_parts.kernel_descriptor`` packs (given the code's offset, which the ELF layout
decides), and its note section is ``elf_parts.metadata_note``'s record.  LLVM here is the toolchain
isagen assembles with (llvm-mc-19 + ld.lld-19 for gfx942, zig's clang 22 for gfx950)."""

from __future__ import annotations

import struct

import pytest

from isagen.builders.spec import bundled_specs_dir, load_specs
from isagen.isa.encoder import EncodeError, encode, encode_items
from isagen.isa.operands import Label, S, V
from isagen.isa.table import isa_table
from isagen.objects.codeobject import read_code_object
from isagen.objects.elf_parts import kernel_descriptor, metadata_note
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_every_bundled_kernels_text_and_descriptor_are_llvms(target):
    specs = [s for s in load_specs([bundled_specs_dir()]) if target in s.targets]
    assert len(specs) >= 20
    bad, branches = [], 0
    for spec in specs:
        program = spec.build(target)
        ours = encode_items(program.items)
        co = read_code_object(assemble(render_assembly(program), target, name=spec.name))
        theirs = co.text
        kd = co.kernel(spec.name).descriptor
        if kernel_descriptor(program, kd.kernel_code_entry_byte_offset) != kd.raw:
            bad.append(f"{spec.name}: descriptor {kernel_descriptor(program).hex()} LLVM {kd.raw.hex()}")
        notes = _note_sections(co.data)
        if notes != [metadata_note(program)]:
            bad.append(f"{spec.name}: note sections differ from the metadata note isagen packs")
        branches += sum(1 for i in program.instructions() if "branch" in i.desc.flags)
        if ours != theirs:
            at = next((k for k in range(min(len(ours), len(theirs))) if ours[k] != theirs[k]),
                      min(len(ours), len(theirs)))
            bad.append(f"{spec.name}: {len(ours)} bytes, LLVM {len(theirs)}; first difference at byte {at}")
    assert not bad, "\n".join(bad)
    assert branches > 20                  # loops and branches are in: their offsets are checked too


def _note_sections(elf: bytes) -> list[bytes]:
    """The contents of the ELF's SHT_NOTE sections (read straight from the section headers)."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    out = []
    for i in range(shnum):
        _name, typ, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
        if typ == 7:
            out.append(elf[off:off + size])
    return out


def test_branch_offsets_count_words_from_the_next_instruction():
    I = isa_table("gfx942")
    top, end = Label(".Le_top"), Label(".Le_end")
    items = [top, I["s_add_u32"](S[4], S[4], 0x12345),          # 8 bytes (a literal)
             I["s_cbranch_scc1"](end), I["v_mov_b32"](V[0], 1), I["s_branch"](top), end, I["s_endpgm"]()]
    code = encode_items(items)
    words = [int.from_bytes(code[i:i + 4], "little") for i in range(0, len(code), 4)]
    assert words[2] & 0xFFFF == 2                  # over v_mov and s_branch
    assert words[4] & 0xFFFF == (-5) & 0xFFFF      # back over itself, v_mov, s_cbranch and the 8-byte s_add
    with pytest.raises(EncodeError, match="label whose address is unknown"):
        encode(I["s_branch"](Label(".Lnowhere")))
