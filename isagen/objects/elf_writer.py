"""Write a loadable AMDGPU code object without LLVM: isagen's encoder for the ``.text``, its own
kernel descriptor and metadata note (``isagen.objects.elf_parts``), and the ELF file around them.

``write_code_object(programs, target_id)`` returns the bytes of an ``ET_DYN`` shared object laid out
the way ``ld.lld -shared`` lays out the code objects of ``isagen.objects.toolchain``'s LLVM path:

=================  =========================================================================
segment            sections
=================  =========================================================================
PT_LOAD R          ELF header, program headers, ``.note`` (the ``NT_AMDGPU_METADATA`` note),
                   ``.dynsym``, ``.gnu.hash``, ``.hash``, ``.dynstr``, ``.rodata`` (one 64-byte
                   kernel descriptor ``<name>.kd`` per kernel, 64-byte aligned)
PT_LOAD R E        ``.text`` (each kernel 256-byte aligned), on the next page
PT_LOAD RW         ``.dynamic`` (+ ``.relro_padding`` to the end of the page), on the next page
PT_DYNAMIC, PT_GNU_RELRO, PT_GNU_STACK, PT_NOTE, PT_PHDR, as ld.lld writes them
(not loaded)       ``.comment``, ``.symtab`` (the ``.set`` register and LDS names as absolute
                   local symbols, ``_DYNAMIC``, the kernels), ``.shstrtab``, ``.strtab``
=================  =========================================================================

A segment's file offset and address agree modulo the page (4 KiB); the descriptor's
``kernel_code_entry_byte_offset`` is the kernel's address minus the descriptor's.  The ``.text``
bytes, descriptors and note are byte for byte what LLVM writes for the same program
(tests/objects/test_elf_writer.py checks them, and the layout, with llvm-readelf and llvm-objdump);
the file as a whole differs from ld.lld's only in the ``.comment`` string and the order of local
symbols.

An instruction the encoder does not cover raises ``isagen.isa.encoder.EncodeError``; the caller
(``isagen.objects.assembler.code_object``) then assembles that kernel with LLVM.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from isagen import __version__
from isagen.builders.program import Program
from isagen.isa.encoder import encode_items
from isagen.objects.elf_parts import KD_SIZE, NOTE_NAME, NT_AMDGPU_METADATA, _key_order, kernel_descriptor, packb
from isagen.objects.emit import CODE_OBJECT_VERSION, metadata_document

PAGE = 0x1000
TEXT_ALIGN = 256                 # emit's .p2align 8 before every kernel
S_NOP = struct.pack("<I", 0xBF800000)   # what LLVM pads code with

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
ABI_VERSION = {4: 2, 5: 3, 6: 4}          # code object version -> EI_ABIVERSION
ET_DYN = 3
# section types and flags
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_HASH, SHT_DYNAMIC, SHT_NOTE, SHT_NOBITS, SHT_DYNSYM = 1, 2, 3, 5, 6, 7, 8, 11
SHT_GNU_HASH = 0x6FFFFFF6
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_MERGE, SHF_STRINGS = 1, 2, 4, 0x10, 0x20
# program header types and flags
PT_LOAD, PT_DYNAMIC, PT_NOTE, PT_PHDR = 1, 2, 4, 6
PT_GNU_STACK, PT_GNU_RELRO = 0x6474E551, 0x6474E552
PF_X, PF_W, PF_R = 1, 2, 4
# dynamic tags
DT_NULL, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT, DT_GNU_HASH = 0, 4, 5, 6, 10, 11, 0x6FFFFEF5
# symbols
STB_LOCAL, STB_GLOBAL = 0, 1
STT_NOTYPE, STT_OBJECT, STT_FUNC = 0, 1, 2
STV_DEFAULT, STV_HIDDEN, STV_PROTECTED = 0, 2, 3
SHN_ABS = 0xFFF1

# e_flags feature bits (AMDGPUUsage, code object v4+): None = any
_XNACK = {None: 0x100, "-": 0x200, "+": 0x300}
_SRAMECC = {None: 0x400, "-": 0x800, "+": 0xC00}


def e_flags(target_id: str) -> int:
    """The ELF ``e_flags`` that spell ``target_id`` ('gfx942:sramecc+:xnack-', or feature-any 'gfx942')."""
    from isagen.targets import get_target
    proc, *feats = target_id.split(":")
    signs = {f[:-1]: f[-1] for f in feats}
    return get_target(proc).e_flags_mach | _XNACK[signs.get("xnack")] | _SRAMECC[signs.get("sramecc")]


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def gnu_hash(name: bytes) -> int:
    h = 5381
    for c in name:
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def sysv_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


class _Strtab:
    """A string table: a leading NUL, each name once."""

    def __init__(self) -> None:
        self.data = bytearray(b"\0")
        self.offsets: dict[bytes, int] = {}

    def add(self, name: str) -> int:
        key = name.encode()
        if key not in self.offsets:
            self.offsets[key] = len(self.data)
            self.data += key + b"\0"
        return self.offsets[key]


class _Sym:
    """One ELF symbol.  (A plain class: a dataclass costs ~0.7 ms of every process that imports it,
    issue 17.)"""

    __slots__ = ("name", "value", "size", "info", "other", "shndx")

    def __init__(self, name: str, value: int, size: int, info: int, other: int, shndx: int):
        self.name = name
        self.value = value
        self.size = size
        self.info = info
        self.other = other
        self.shndx = shndx


def _pack_sym(strtab: _Strtab, s: _Sym) -> bytes:
    return struct.pack("<IBBHQQ", strtab.add(s.name) if s.name else 0, s.info, s.other, s.shndx, s.value, s.size)


def register_symbols(program: Program) -> list[tuple[str, int]]:
    """The absolute symbols emit's ``.set`` lines define, in order (a name set twice keeps its last
    value, as the assembler's symbol does)."""
    out: dict[str, int] = {}
    for a in program.allocations:
        if not a.scratch and a.reg.sym:
            out[a.reg.sym] = a.reg.index
    for r in program.lds_regions:
        out[f"lds_{r.name}"] = r.offset
    return list(out.items())


def metadata_note_for(programs: Sequence[Program], target_id: str) -> bytes:
    """One ``NT_AMDGPU_METADATA`` note whose ``amdhsa.kernels`` lists every program, in order (for one
    program it is ``elf_parts.metadata_note``'s record)."""
    doc = metadata_document(programs[0], target_id)
    doc["amdhsa.kernels"] = [k for p in programs for k in metadata_document(p, target_id)["amdhsa.kernels"]]
    desc = packb(_key_order(doc))
    pad = lambda b: b + b"\0" * (-len(b) % 4)         # noqa: E731
    return struct.pack("<III", len(NOTE_NAME), len(desc), NT_AMDGPU_METADATA) + pad(NOTE_NAME) + pad(desc)


def write_code_object(programs: Program | Sequence[Program], target_id: str | None = None) -> bytes:
    """The code object (.co bytes) of one program or several (one note listing them all)."""
    progs = [programs] if isinstance(programs, Program) else list(programs)
    if not progs:
        raise ValueError("write_code_object needs at least one program")
    target = progs[0].target
    target_id = target_id or target.target_id
    for p in progs:
        if p.target.name != target.name:
            raise ValueError(f"{p.name} is for {p.target.name}, {progs[0].name} for {target.name}: one target per "
                             "code object")
    names = [p.name for p in progs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"kernel(s) named more than once: {', '.join(dup)}")
    codes = [encode_items(p.items) for p in progs]           # EncodeError: the caller falls back to LLVM
    note = metadata_note_for(progs, target_id)

    # ---- the dynamic symbols (each kernel: its code, then its descriptor), ordered by GNU hash bucket
    n_dyn = 2 * len(progs)
    nbuckets = max((n_dyn + 3) // 4, 1)
    dyn_names = [n for p in progs for n in (p.name, f"{p.name}.kd")]
    order = sorted(range(n_dyn), key=lambda i: gnu_hash(dyn_names[i].encode()) % nbuckets)   # stable
    dynstr = _Strtab()
    for i in order:
        dynstr.add(dyn_names[i])

    # ---- the first (read-only) segment
    phnum = 8
    off = 64 + phnum * 56
    note_off = _align(off, 4)
    dynsym_off = _align(note_off + len(note), 8)
    dynsym_size = (1 + n_dyn) * 24
    maskwords = 1
    while maskwords * 64 < n_dyn * 12:     # ~12 bloom bits per symbol, a power of two of 64-bit words
        maskwords *= 2
    gnuhash_off = _align(dynsym_off + dynsym_size, 8)
    gnuhash_size = 16 + 8 * maskwords + 4 * nbuckets + 4 * n_dyn
    hash_off = _align(gnuhash_off + gnuhash_size, 4)
    hash_size = 8 + 8 * (1 + n_dyn)
    dynstr_off = hash_off + hash_size
    rodata_off = _align(dynstr_off + len(dynstr.data), 64)
    rodata_size = KD_SIZE * len(progs)
    ro_end = rodata_off + rodata_size

    # ---- .text on the next page (address congruent to the offset modulo the page)
    text_off = _align(ro_end, TEXT_ALIGN)
    text_addr = _align(ro_end, PAGE) + text_off % PAGE
    text = bytearray()
    starts = []
    for code in codes:
        pad = _align(len(text), TEXT_ALIGN) - len(text)
        text += S_NOP * (pad // 4)
        starts.append(len(text))
        text += code
    text_end_addr = text_addr + len(text)

    # ---- .dynamic on the next page; .relro_padding fills the page
    dynamic = [(DT_SYMTAB, dynsym_off), (DT_SYMENT, 24), (DT_STRTAB, dynstr_off), (DT_STRSZ, len(dynstr.data)),
               (DT_GNU_HASH, gnuhash_off), (DT_HASH, hash_off), (DT_NULL, 0)]
    dyn_off = _align(text_off + len(text), 8)
    dyn_addr = _align(text_end_addr, PAGE) + dyn_off % PAGE
    dyn_size = 16 * len(dynamic)
    relro_pad = _align(dyn_addr + dyn_size, PAGE) - (dyn_addr + dyn_size)

    # section indices (fixed layout)
    NOTE, DYNSYM, GNUHASH, HASH, DYNSTR, RODATA, TEXT, DYNAMIC, RELRO, COMMENT, SYMTAB, SHSTRTAB, STRTAB = range(1, 14)

    kernel_syms = []
    for k, p in enumerate(progs):
        kernel_syms.append(_Sym(p.name, text_addr + starts[k], len(codes[k]), STB_GLOBAL << 4 | STT_FUNC,
                                STV_PROTECTED, TEXT))
        kernel_syms.append(_Sym(f"{p.name}.kd", rodata_off + KD_SIZE * k, KD_SIZE, STB_GLOBAL << 4 | STT_OBJECT,
                                STV_DEFAULT, RODATA))
    dynsym = bytes(24) + b"".join(_pack_sym(dynstr, kernel_syms[i]) for i in order)

    # GNU hash: header, bloom filter, buckets (first symbol of each), chains (hash, low bit: last of its bucket)
    hashes = [gnu_hash(dyn_names[i].encode()) for i in order]
    bloom = [0] * maskwords
    for h in hashes:
        bloom[(h // 64) % maskwords] |= 1 << (h % 64) | 1 << ((h >> 26) % 64)
    buckets = [0] * nbuckets
    chains = []
    for j, h in enumerate(hashes):
        b = h % nbuckets
        if buckets[b] == 0:
            buckets[b] = 1 + j
        last = j + 1 == len(hashes) or hashes[j + 1] % nbuckets != b
        chains.append(h & ~1 | int(last))
    gnuhash = struct.pack(f"<IIII{maskwords}Q{nbuckets}I{len(chains)}I", nbuckets, 1, maskwords, 26,
                          *bloom, *buckets, *chains)
    # SysV hash: nbucket = nchain = the dynamic symbols (the null one included)
    nsym = 1 + n_dyn
    sbuckets, schain = [0] * nsym, [0] * nsym
    for j, i in enumerate(order, 1):
        b = sysv_hash(dyn_names[i].encode()) % nsym
        schain[j] = sbuckets[b]
        sbuckets[b] = j
    sysvhash = struct.pack(f"<II{nsym}I{nsym}I", nsym, nsym, *sbuckets, *schain)
    assert len(gnuhash) == gnuhash_size and len(sysvhash) == hash_size and len(dynsym) == dynsym_size

    rodata = b"".join(kernel_descriptor(p, (text_addr + starts[k]) - (rodata_off + KD_SIZE * k))
                      for k, p in enumerate(progs))
    dynamic_bytes = b"".join(struct.pack("<qQ", tag, val) for tag, val in dynamic)

    # ---- what is not loaded: .comment, .symtab, .shstrtab, .strtab
    comment = f"isagen {__version__}\0".encode()
    comment_off = dyn_off + dyn_size
    strtab = _Strtab()
    locals_ = [_Sym(name, value, 0, STB_LOCAL << 4 | STT_NOTYPE, STV_DEFAULT, SHN_ABS)
               for p in progs for name, value in register_symbols(p)]
    locals_.append(_Sym("_DYNAMIC", dyn_addr, 0, STB_LOCAL << 4 | STT_NOTYPE, STV_HIDDEN, DYNAMIC))
    symtab = bytes(24) + b"".join(_pack_sym(strtab, s) for s in locals_ + kernel_syms)
    symtab_off = _align(comment_off + len(comment), 8)
    shstrtab = _Strtab()
    sec_names = ["", ".note", ".dynsym", ".gnu.hash", ".hash", ".dynstr", ".rodata", ".text", ".dynamic",
                 ".relro_padding", ".comment", ".symtab", ".shstrtab", ".strtab"]
    name_offs = [shstrtab.add(n) if n else 0 for n in sec_names]
    shstrtab_off = symtab_off + len(symtab)
    strtab_off = shstrtab_off + len(shstrtab.data)
    shoff = _align(strtab_off + len(strtab.data), 8)

    def sh(i, typ, flags, addr, offset, size, link=0, info=0, align=1, entsize=0):
        return struct.pack("<IIQQQQIIQQ", name_offs[i], typ, flags, addr, offset, size, link, info, align, entsize)

    A = SHF_ALLOC
    sections = [
        bytes(64),
        sh(NOTE, SHT_NOTE, A, note_off, note_off, len(note), align=4),
        sh(DYNSYM, SHT_DYNSYM, A, dynsym_off, dynsym_off, dynsym_size, DYNSTR, 1, 8, 24),
        sh(GNUHASH, SHT_GNU_HASH, A, gnuhash_off, gnuhash_off, gnuhash_size, DYNSYM, align=8),
        sh(HASH, SHT_HASH, A, hash_off, hash_off, hash_size, DYNSYM, align=4, entsize=4),
        sh(DYNSTR, SHT_STRTAB, A, dynstr_off, dynstr_off, len(dynstr.data)),
        sh(RODATA, SHT_PROGBITS, A, rodata_off, rodata_off, rodata_size, align=64),
        sh(TEXT, SHT_PROGBITS, A | SHF_EXECINSTR, text_addr, text_off, len(text), align=TEXT_ALIGN),
        sh(DYNAMIC, SHT_DYNAMIC, A | SHF_WRITE, dyn_addr, dyn_off, dyn_size, DYNSTR, align=8, entsize=16),
        sh(RELRO, SHT_NOBITS, A | SHF_WRITE, dyn_addr + dyn_size, comment_off, relro_pad),
        sh(COMMENT, SHT_PROGBITS, SHF_MERGE | SHF_STRINGS, 0, comment_off, len(comment), entsize=1),
        sh(SYMTAB, SHT_SYMTAB, 0, 0, symtab_off, len(symtab), STRTAB, 1 + len(locals_), 8, 24),
        sh(SHSTRTAB, SHT_STRTAB, 0, 0, shstrtab_off, len(shstrtab.data)),
        sh(STRTAB, SHT_STRTAB, 0, 0, strtab_off, len(strtab.data)),
    ]

    def ph(typ, flags, offset, addr, filesz, memsz, align):
        return struct.pack("<IIQQQQQQ", typ, flags, offset, addr, addr, filesz, memsz, align)

    phdrs = [
        ph(PT_PHDR, PF_R, 64, 64, phnum * 56, phnum * 56, 8),
        ph(PT_LOAD, PF_R, 0, 0, ro_end, ro_end, PAGE),
        ph(PT_LOAD, PF_R | PF_X, text_off, text_addr, len(text), len(text), PAGE),
        ph(PT_LOAD, PF_R | PF_W, dyn_off, dyn_addr, dyn_size, dyn_size + relro_pad, PAGE),
        ph(PT_DYNAMIC, PF_R | PF_W, dyn_off, dyn_addr, dyn_size, dyn_size, 8),
        ph(PT_GNU_RELRO, PF_R, dyn_off, dyn_addr, dyn_size, dyn_size + relro_pad, 1),
        ph(PT_GNU_STACK, PF_R | PF_W, 0, 0, 0, 0, 0),
        ph(PT_NOTE, PF_R, note_off, note_off, len(note), len(note), 4),
    ]
    assert len(phdrs) == phnum

    abi = ABI_VERSION[CODE_OBJECT_VERSION]
    ident = b"\x7fELF" + bytes([2, 1, 1, ELFOSABI_AMDGPU_HSA, abi]) + bytes(7)
    header = ident + struct.pack("<HHIQQQIHHHHHH", ET_DYN, EM_AMDGPU, 1, 0, 64, shoff, e_flags(target_id), 64, 56,
                                 phnum, 64, len(sections), SHSTRTAB)

    out = bytearray(shoff + 64 * len(sections))
    for pos, blob in ((0, header), (64, b"".join(phdrs)), (note_off, note), (dynsym_off, dynsym),
                      (gnuhash_off, gnuhash), (hash_off, sysvhash), (dynstr_off, bytes(dynstr.data)),
                      (rodata_off, rodata), (text_off, bytes(text)), (dyn_off, dynamic_bytes),
                      (comment_off, comment), (symtab_off, symtab), (shstrtab_off, bytes(shstrtab.data)),
                      (strtab_off, bytes(strtab.data)), (shoff, b"".join(sections))):
        out[pos:pos + len(blob)] = blob
    return bytes(out)
