"""Read AMDGPU code objects (HSA code object v4/v5/v6 ELF files, as made by clang, Triton, isagen).

A clang offload bundle (``__CLANG_OFFLOAD_BUNDLE__``, what ``hipcc --genco`` and ``clang -x hip
--cuda-device-only`` write by default) is unwrapped: its AMDGPU entry is read (``target=`` picks one
when the bundle holds several); offsets in errors are then relative to that entry, which the label
names with its position in the file.

``read_code_object(path_or_bytes)`` returns a :class:`CodeObject`: the target ID from the ELF
flags, the symbols, the ``NT_AMDGPU_METADATA`` note (msgpack) and one :class:`CodeObjectKernel` per kernel
descriptor (``<name>.kd``) with its decoded descriptor fields, its metadata map and its code bytes
(from the descriptor's entry to the end of the kernel's function symbol).  ``CodeObjectKernel.decode()``
gives the decoder's :class:`~isagen.isa.decoder.DecodedInstruction` list.

Layouts follow LLVM's AMDGPUUsage ("Kernel Descriptor", "ELF Header", "Code Object Metadata").
Every problem with the input raises :class:`isagen.errors.CodeObjectError` with one line naming
the file and the byte offset.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass, field

import msgpack

from isagen.errors import CodeObjectError
from isagen.isa.decoder import DecodeError, decode
from isagen.targets import ELF_MACHINES

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
NT_AMDGPU_METADATA = 32

#: e_flags EF_AMDGPU_MACH values (AMDGPUUsage "AMDGPU ELF Header"); the table lives with the targets
MACH = ELF_MACHINES
#: EI_ABIVERSION -> code object version
ABI_TO_COV = {2: 4, 3: 5, 4: 6}

KD_SIZE = 64

#: clang-offload-bundler's magic strings (uncompressed and compressed bundles)
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_BUNDLE_MAGIC = b"CCOB"


class KernelNotFound(CodeObjectError):
    """The code object has no kernel of the requested name."""


# ----------------------------------------------------------------------------- kernel descriptor

def _bits(v, lo, n):
    return (v >> lo) & ((1 << n) - 1)


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte kernel descriptor, raw words plus the decoded fields users need."""

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    kernel_code_entry_byte_offset: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    compute_pgm_rsrc3: int
    kernel_code_properties: int
    kernarg_preload: int
    raw: bytes = field(repr=False, default=b"")

    # rsrc1 -------------------------------------------------------------------------------
    @property
    def vgpr_granule(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 0, 6)

    @property
    def sgpr_granule(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 6, 4)

    @property
    def vgpr_count(self) -> int:
        """Allocated VGPRs (arch + acc, unified file on gfx90a+): granule of 8."""
        return (self.vgpr_granule + 1) * 8

    @property
    def sgpr_count(self) -> int:
        """Allocated SGPRs incl. VCC/FLAT_SCRATCH/XNACK (GFX9: 2*max(0,ceil(n/16)-1))."""
        return (self.sgpr_granule // 2 + 1) * 16

    @property
    def float_round_mode_32(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 12, 2)

    @property
    def float_round_mode_16_64(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 14, 2)

    @property
    def float_denorm_mode_32(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 16, 2)

    @property
    def float_denorm_mode_16_64(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 18, 2)

    @property
    def dx10_clamp(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 21, 1))

    @property
    def ieee_mode(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 23, 1))

    # rsrc2 -------------------------------------------------------------------------------
    @property
    def private_segment_enabled(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 0, 1))

    @property
    def user_sgpr_count(self) -> int:
        return _bits(self.compute_pgm_rsrc2, 1, 5)

    @property
    def trap_handler(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 6, 1))

    @property
    def workgroup_id_enabled(self) -> tuple[bool, bool, bool]:
        r = self.compute_pgm_rsrc2
        return bool(_bits(r, 7, 1)), bool(_bits(r, 8, 1)), bool(_bits(r, 9, 1))

    @property
    def workgroup_info_enabled(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 10, 1))

    @property
    def workitem_id_vgprs(self) -> int:
        """0: x only, 1: x,y, 2: x,y,z (packed into v0 on gfx90a+)."""
        return _bits(self.compute_pgm_rsrc2, 11, 2)

    @property
    def lds_granule(self) -> int:
        return _bits(self.compute_pgm_rsrc2, 15, 9)

    # rsrc3 (gfx90a / gfx940+) ------------------------------------------------------------
    @property
    def accum_offset(self) -> int:
        """First AGPR's index in the unified file: (ACCUM_OFFSET + 1) * 4."""
        return (_bits(self.compute_pgm_rsrc3, 0, 6) + 1) * 4

    @property
    def tg_split(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc3, 16, 1))

    # kernel_code_properties --------------------------------------------------------------
    _PROPS = ("private_segment_buffer", "dispatch_ptr", "queue_ptr", "kernarg_segment_ptr",
              "dispatch_id", "flat_scratch_init", "private_segment_size")

    @property
    def user_sgprs(self) -> dict[str, bool]:
        """Which user SGPRs the hardware sets up (in this order, before preloaded kernargs)."""
        return {n: bool(_bits(self.kernel_code_properties, i, 1)) for i, n in enumerate(self._PROPS)}

    @property
    def wavefront_size32(self) -> bool:
        return bool(_bits(self.kernel_code_properties, 10, 1))

    @property
    def uses_dynamic_stack(self) -> bool:
        return bool(_bits(self.kernel_code_properties, 11, 1))

    @property
    def kernarg_preload_length(self) -> int:
        return _bits(self.kernarg_preload, 0, 7)

    @property
    def kernarg_preload_offset(self) -> int:
        return _bits(self.kernarg_preload, 7, 9)

    def user_sgpr_layout(self) -> list[tuple[str, int, int]]:
        """[(name, first SGPR, count)] of the user SGPRs in hardware order."""
        sizes = {"private_segment_buffer": 4, "dispatch_ptr": 2, "queue_ptr": 2,
                 "kernarg_segment_ptr": 2, "dispatch_id": 2, "flat_scratch_init": 2,
                 "private_segment_size": 1}
        out, s = [], 0
        for name, on in self.user_sgprs.items():
            if on:
                out.append((name, s, sizes[name]))
                s += sizes[name]
        if self.kernarg_preload_length:
            out.append(("kernarg_preload", s, self.kernarg_preload_length))
        return out

    def as_dict(self) -> dict:
        return {
            "group_segment_fixed_size": self.group_segment_fixed_size,
            "private_segment_fixed_size": self.private_segment_fixed_size,
            "kernarg_size": self.kernarg_size,
            "kernel_code_entry_byte_offset": self.kernel_code_entry_byte_offset,
            "vgpr_granule": self.vgpr_granule, "vgpr_count": self.vgpr_count,
            "sgpr_granule": self.sgpr_granule, "sgpr_count": self.sgpr_count,
            "accum_offset": self.accum_offset, "user_sgpr_count": self.user_sgpr_count,
            "workgroup_id": self.workgroup_id_enabled, "workitem_id_vgprs": self.workitem_id_vgprs,
            "user_sgprs": self.user_sgprs, "kernarg_preload_length": self.kernarg_preload_length,
            "kernarg_preload_offset": self.kernarg_preload_offset,
            "private_segment_enabled": self.private_segment_enabled,
            "float_denorm_mode_32": self.float_denorm_mode_32,
            "float_denorm_mode_16_64": self.float_denorm_mode_16_64,
            "ieee_mode": self.ieee_mode, "dx10_clamp": self.dx10_clamp,
            "tg_split": self.tg_split, "wavefront_size32": self.wavefront_size32,
        }


def parse_kernel_descriptor(raw: bytes) -> KernelDescriptor:
    if len(raw) < KD_SIZE:
        raise ValueError("kernel descriptor shorter than 64 bytes")
    g, p, k = struct.unpack_from("<III", raw, 0)
    entry = struct.unpack_from("<q", raw, 16)[0]
    r3, r1, r2 = struct.unpack_from("<III", raw, 44)
    props, preload = struct.unpack_from("<HH", raw, 56)
    return KernelDescriptor(g, p, k, entry, r1, r2, r3, props, preload, bytes(raw[:KD_SIZE]))


# ----------------------------------------------------------------------------- objects

@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    type: str          # STT_FUNC, STT_OBJECT, ...
    bind: str
    section: str


@dataclass
class CodeObjectKernel:
    name: str
    descriptor: KernelDescriptor
    metadata: dict
    code_address: int       # virtual address of the first instruction
    code_offset: int        # file offset of the first instruction
    code: bytes
    target: str
    source: str = ""

    def decode(self):
        """Decode the kernel's code; errors name the file and the byte offset."""
        try:
            return decode(self.code, self.target, base=self.code_address)
        except DecodeError as exc:
            rel = exc.offset if exc.offset is not None else 0
            raise CodeObjectError(
                f"{self.source}: offset 0x{self.code_offset + rel:x} (address "
                f"0x{self.code_address + rel:x}, kernel {self.name}): {exc.reason}") from None
        except CodeObjectError as exc:     # no decoder for the processor the ELF header's e_flags name
            raise CodeObjectError(f"{self.source}: offset 0x30 (e_flags): kernel {self.name}: {exc}") from None

    # convenient metadata views
    @property
    def args(self) -> list:
        return list(self.metadata.get(".args", []))

    @property
    def vgpr_count(self) -> int | None:
        return self.metadata.get(".vgpr_count")

    @property
    def agpr_count(self) -> int | None:
        return self.metadata.get(".agpr_count")

    @property
    def sgpr_count(self) -> int | None:
        return self.metadata.get(".sgpr_count")


@dataclass
class CodeObject:
    source: str
    data: bytes
    mach: str
    target_id: str
    xnack: str          # "on" "off" "any" "unsupported"
    sramecc: str
    code_object_version: int
    e_flags: int
    symbols: list[Symbol]
    metadata: dict
    kernels: dict[str, CodeObjectKernel]
    text_address: int = 0
    text_offset: int = 0
    text: bytes = b""

    def kernel(self, name: str | None = None) -> CodeObjectKernel:
        if name is None:
            if len(self.kernels) == 1:
                return next(iter(self.kernels.values()))
            raise KernelNotFound(f"{self.source}: {len(self.kernels)} kernels, name one of: "
                                 f"{', '.join(self.kernels) or '(none)'}")
        if name not in self.kernels:
            raise KernelNotFound(f"{self.source}: no kernel named '{name}' (kernels: "
                                 f"{', '.join(self.kernels) or '(none)'})")
        return self.kernels[name]


# ----------------------------------------------------------------------------- reading

def _feature(flags: int, shift: int) -> str:
    return ("unsupported", "any", "off", "on")[(flags >> shift) & 3]


def read_code_object(src, name: str | None = None, *, target: str | None = None) -> CodeObject:
    """Read a code object from a path or bytes; ``name`` labels bytes input in errors.  ``target``
    (a processor such as "gfx942") chooses the entry of an offload bundle that holds several."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        data = bytes(src)
        label = name or "<bytes>"
    else:
        label = name or os.fspath(src)
        try:
            with open(src, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CodeObjectError(f"{label}: cannot read: {exc.strerror}") from None
    if data.startswith(BUNDLE_MAGIC):
        data, label = _unbundle(data, label, target)
    elif data.startswith(COMPRESSED_BUNDLE_MAGIC):
        raise _err(label, 0, "a compressed clang offload bundle (CCOB): unpack it with `clang-offload-bundler "
                   "--unbundle --type=o --targets=hipv4-amdgcn-amd-amdhsa--<gfx> --input=... --output=...` "
                   "or compile without --offload-compress")
    return _parse(data, label)


def _unbundle(data: bytes, label: str, target: str | None) -> tuple[bytes, str]:
    """(the AMDGPU code object inside a clang offload bundle, a label naming the entry).

    Layout (clang's OffloadBundler, uncompressed): the 24-byte magic, u64 entry count, then per entry
    u64 offset, u64 size, u64 triple length and the triple (``hipv4-amdgcn-amd-amdhsa--gfx942:xnack-``;
    the host entry is empty in a device-only bundle).
    """
    n = len(data)
    if n < 32:
        raise _err(label, n, f"truncated offload bundle header ({n} of 32 bytes)")
    count = struct.unpack_from("<Q", data, 24)[0]
    pos, gpus = 32, []
    for i in range(count):
        if pos + 24 > n:
            raise _err(label, pos, f"truncated offload bundle: entry {i} of {count} runs past the end "
                       f"of the file ({n} bytes)")
        off, size, tlen = struct.unpack_from("<QQQ", data, pos)
        if pos + 24 + tlen > n:
            raise _err(label, pos + 24, f"truncated offload bundle: entry {i}'s triple runs past the end")
        triple = data[pos + 24:pos + 24 + tlen].decode("ascii", "replace")
        if off + size > n:
            raise _err(label, min(off, n), f"truncated offload bundle: entry {triple} (0x{size:x} bytes at "
                       f"0x{off:x}) runs past the end of the file ({n} bytes)")
        if "amdgcn-amd-amdhsa" in triple and size:
            parts = triple.split("-", 5)          # kind-arch-vendor-os-env-targetid
            gpus.append((triple, parts[5].split(":")[0] if len(parts) == 6 else "?", off, size))
        pos += 24 + tlen
    procs = ", ".join(p for _, p, _, _ in gpus)
    if target is not None:
        picked = [g for g in gpus if g[1] == target]
        if not picked:
            raise _err(label, 24, f"the offload bundle holds no {target} code object "
                       f"(it has: {procs or 'no AMDGPU entry'})")
    else:
        picked = gpus
    if not picked:
        raise _err(label, 24, "the offload bundle holds no AMDGPU code object")
    if len(picked) > 1:
        raise _err(label, 24, f"the offload bundle holds code objects for {procs}: choose one "
                   "(isagen disasm --target, read_code_object(..., target=))")
    triple, _, off, size = picked[0]
    return data[off:off + size], f"{label} (bundle entry {triple} at offset 0x{off:x})"


def _err(label, off, msg):
    return CodeObjectError(f"{label}: offset 0x{off:x}: {msg}")


def _parse(data: bytes, label: str) -> CodeObject:
    n = len(data)
    if n < 4 or data[:4] != b"\x7fELF":
        raise _err(label, 0, "not an ELF file (no \\x7fELF magic)")
    if n < 64:
        raise _err(label, n, f"truncated ELF header ({n} of 64 bytes)")
    if data[4] != 2 or data[5] != 1:
        raise _err(label, 4, "not a 64-bit little-endian ELF (AMDGPU code objects are)")
    e_machine = struct.unpack_from("<H", data, 18)[0]
    if e_machine != EM_AMDGPU:
        raise _err(label, 18, f"not an AMDGPU code object (e_machine {e_machine}, want 224)")
    osabi, abiver = data[7], data[8]
    e_flags = struct.unpack_from("<I", data, 48)[0]
    shoff = struct.unpack_from("<Q", data, 40)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
    if shnum and (shentsize != 64 or shoff + shnum * 64 > n):
        raise _err(label, min(shoff, n), f"truncated: section header table ({shnum} entries at "
                   f"0x{shoff:x}) runs past the end of the file ({n} bytes)")
    secs = []
    for i in range(shnum):
        o = shoff + 64 * i
        (sh_name, sh_type, sh_flags, sh_addr, sh_off, sh_size, sh_link, sh_info,
         sh_align, sh_entsize) = struct.unpack_from("<IIQQQQIIQQ", data, o)
        if sh_type != 8 and sh_off + sh_size > n:     # SHT_NOBITS has no file bytes
            raise _err(label, min(sh_off, n), f"truncated: section {i} (0x{sh_size:x} bytes at "
                       f"0x{sh_off:x}) runs past the end of the file ({n} bytes)")
        secs.append(dict(name_off=sh_name, type=sh_type, flags=sh_flags, addr=sh_addr,
                         off=sh_off, size=sh_size, link=sh_link, entsize=sh_entsize))
    if not secs:
        raise _err(label, 40, "no section headers")

    def sec_bytes(s):
        return data[s["off"]:s["off"] + s["size"]]

    if shstrndx >= len(secs):
        raise _err(label, 62, f"bad section name table index {shstrndx}")
    shstr = sec_bytes(secs[shstrndx])
    for s in secs:
        s["name"] = _cstr(shstr, s["name_off"])

    mach_id = e_flags & 0xFF
    mach = MACH.get(mach_id, f"unknown-0x{mach_id:03x}")
    cov = ABI_TO_COV.get(abiver, 0) if osabi == ELFOSABI_AMDGPU_HSA else 0
    if cov >= 4:
        xnack, sramecc = _feature(e_flags, 8), _feature(e_flags, 10)
    else:
        xnack = "on" if e_flags & 0x100 else "unsupported"
        sramecc = "on" if e_flags & 0x200 else "unsupported"
    tid = mach
    for feat, st in (("sramecc", sramecc), ("xnack", xnack)):
        if st in ("on", "off"):
            tid += f":{feat}{'+' if st == 'on' else '-'}"

    # symbols
    symbols: list[Symbol] = []
    for s in secs:
        if s["type"] != 2:          # SHT_SYMTAB
            continue
        strtab = sec_bytes(secs[s["link"]]) if s["link"] < len(secs) else b""
        raw = sec_bytes(s)
        for j in range(len(raw) // 24):
            st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from(
                "<IBBHQQ", raw, 24 * j)
            if j == 0:
                continue
            typ = {0: "STT_NOTYPE", 1: "STT_OBJECT", 2: "STT_FUNC", 3: "STT_SECTION",
                   4: "STT_FILE"}.get(st_info & 0xF, f"STT_{st_info & 0xF}")
            bind = {0: "STB_LOCAL", 1: "STB_GLOBAL", 2: "STB_WEAK"}.get(st_info >> 4, "?")
            secname = secs[st_shndx]["name"] if 0 < st_shndx < len(secs) else ""
            symbols.append(Symbol(_cstr(strtab, st_name), st_value, st_size, typ, bind, secname))

    # metadata note
    metadata: dict = {}
    for s in secs:
        if s["type"] != 7:          # SHT_NOTE
            continue
        raw = sec_bytes(s)
        p = 0
        while p + 12 <= len(raw):
            namesz, descsz, ntype = struct.unpack_from("<III", raw, p)
            nm = raw[p + 12:p + 12 + namesz].rstrip(b"\0")
            dp = p + 12 + ((namesz + 3) & ~3)
            if dp + descsz > len(raw):
                raise _err(label, s["off"] + p, "truncated note in section " + s["name"])
            if ntype == NT_AMDGPU_METADATA and nm == b"AMDGPU":
                metadata = _msgpack(raw[dp:dp + descsz], label, s["off"] + dp)
                check_metadata(metadata, label, s["off"] + dp)
            p = dp + ((descsz + 3) & ~3)

    def addr_to_off(addr, size=1):
        for s in secs:
            if s["type"] != 8 and s["flags"] & 2 and s["addr"] <= addr and addr + size <= s["addr"] + s["size"]:
                return s["off"] + addr - s["addr"], s
        return None, None

    text = next((s for s in secs if s["name"] == ".text"), None)
    md_by_symbol = {k.get(".symbol"): k for k in metadata.get("amdhsa.kernels", [])}
    funcs = sorted((sym for sym in symbols if sym.type == "STT_FUNC"), key=lambda x: x.value)
    kernels: dict[str, CodeObjectKernel] = {}
    for sym in symbols:
        if not sym.name.endswith(".kd") or sym.type != "STT_OBJECT":
            continue
        kname = sym.name[:-3]
        koff, ksec = addr_to_off(sym.value, KD_SIZE)
        if koff is None:
            raise _err(label, n, f"kernel descriptor {sym.name} at address 0x{sym.value:x} is "
                       "outside the file's sections (truncated?)")
        kd = parse_kernel_descriptor(data[koff:koff + KD_SIZE])
        entry = sym.value + kd.kernel_code_entry_byte_offset
        coff, csec = addr_to_off(entry, 4)
        if coff is None:
            raise _err(label, koff + 16, f"kernel {kname}: code entry 0x{entry:x} is outside the "
                       "file's sections")
        fn = next((f for f in funcs if f.name == kname and f.value == entry), None)
        if fn is not None and fn.size:
            end = entry + fn.size
        else:   # no sized symbol: up to the next function or the end of the section
            nxt = [f.value for f in funcs if f.value > entry]
            end = min(nxt) if nxt else csec["addr"] + csec["size"]
        if end > csec["addr"] + csec["size"]:
            raise _err(label, coff, f"kernel {kname}: code runs past the end of {csec['name']}")
        code = data[coff:coff + (end - entry)]
        md: dict = md_by_symbol.get(sym.name) or next(
            (k for k in metadata.get("amdhsa.kernels", []) if k.get(".name") == kname), {})
        kernels[kname] = CodeObjectKernel(kname, kd, md, entry, coff, code, mach, label)

    return CodeObject(label, data, mach, tid, xnack, sramecc, cov, e_flags, symbols, metadata,
                      kernels, text["addr"] if text else 0, text["off"] if text else 0,
                      sec_bytes(text) if text else b"")


def _cstr(buf: bytes, off: int) -> str:
    end = buf.find(b"\0", off)
    return buf[off:end if end >= 0 else len(buf)].decode("utf-8", "replace")


def _msgpack(raw: bytes, label: str, off: int):
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several types for malformed input
        raise _err(label, off, f"malformed AMDGPU metadata (msgpack): {exc}") from None


# ----------------------------------------------------------------------------- metadata schema
# The shape of the AMDGPU code-object metadata (AMDGPUUsage, "Code Object V3+ Metadata") for the fields
# isagen reads: the disassembler's header, the report, the emulator's loader and kernarg packing.  Every
# reader relies on this check instead of guarding each access, so a well-formed msgpack document of the
# wrong shape (a number for the root, a string for ``.args``, a negative LDS size) is refused here, once,
# with the field's path.  Fields isagen does not read are not checked (producers add their own), and
# every field is optional except where the format requires it and a reader depends on it (an argument's
# ``.offset``/``.size``/``.value_kind``: kernel arguments are packed from them).
# Ranges are what any AMDGPU processor allows (1024 VGPRs per lane on gfx1250, 256 AGPRs), not one
# target's, and no cross-field rule that shipped objects break: AITER's gfx950 fmoe kernels declare an
# argument ending 4 bytes past their .kernarg_segment_size (the emulator sizes the segment to cover both).
# Checked against the 2,909 code objects of ROCm/aiter's hsa/ folder: all are accepted.

_U32 = (1 << 32) - 1
#: bound on kernel-argument offsets and sizes: far above any real kernel (HIP allows 4 KiB of explicit
#: arguments), and small enough that a loader may allocate the segment it describes
KERNARG_MAX = 1 << 20


def _nonneg(hi: int = _U32):
    def check(v):
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= hi:
            return None
        return f"expected a non-negative integer{'' if hi == _U32 else f' up to {hi}'}"
    return check


def _int_in(lo: int, hi: int):
    def check(v):
        if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi:
            return None
        return f"expected an integer from {lo} to {hi}"
    return check


def _one_of(*allowed):
    def check(v):
        if isinstance(v, int) and not isinstance(v, bool) and v in allowed:
            return None
        return f"expected one of {', '.join(map(str, allowed))}"
    return check


def _string(v):
    return None if isinstance(v, str) else "expected a string"


def _boolean(v):
    return None if isinstance(v, bool) else "expected a boolean"


def _workgroup(v):
    if (isinstance(v, list) and len(v) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 1024 for x in v)
            and v[0] * v[1] * v[2] <= 1024):
        return None
    return "expected 3 integers from 1 to 1024 whose product is at most 1024"


def _version(v):
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                   for x in v):
        return None
    return "expected [major, minor], two non-negative integers"


#: kernel map fields -> check (None when the value is fine, else what was expected)
_KERNEL_FIELDS = {
    ".name": _string, ".symbol": _string,
    ".kernarg_segment_size": _nonneg(KERNARG_MAX), ".kernarg_segment_align": _one_of(*(1 << i for i in range(17))),
    ".group_segment_fixed_size": _nonneg(), ".private_segment_fixed_size": _nonneg(),
    ".wavefront_size": _one_of(32, 64),
    ".sgpr_count": _nonneg(1024), ".vgpr_count": _nonneg(1024), ".agpr_count": _nonneg(256),
    ".sgpr_spill_count": _nonneg(), ".vgpr_spill_count": _nonneg(),
    ".max_flat_workgroup_size": _int_in(1, 1024), ".reqd_workgroup_size": _workgroup,
    ".uses_dynamic_stack": _boolean,
}
#: kernel argument fields; the first three are required (the emulator packs arguments by them)
_ARG_FIELDS = {
    ".offset": _nonneg(KERNARG_MAX), ".size": _nonneg(KERNARG_MAX), ".value_kind": _string,
    ".name": _string, ".value_type": _string, ".type_name": _string, ".address_space": _string,
}
_ARG_REQUIRED = (".offset", ".size", ".value_kind")


def _show(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_metadata(md, label: str, off: int) -> None:
    """Check the decoded metadata note against the schema above; a field of the wrong type, range or
    length raises :class:`CodeObjectError` naming the file, the note's offset and the field's path
    (``amdhsa.kernels[0].vgpr_count``)."""
    def bad(path: str, why: str, v):
        return _err(label, off, f"AMDGPU metadata: {path}: {why}, got {_show(v)}")

    if not isinstance(md, dict):
        raise bad("the root", "expected a map", md)
    if "amdhsa.version" in md and _version(md["amdhsa.version"]):
        raise bad("amdhsa.version", _version(md["amdhsa.version"]) or "", md["amdhsa.version"])
    if "amdhsa.target" in md and not isinstance(md["amdhsa.target"], str):
        raise bad("amdhsa.target", "expected a string", md["amdhsa.target"])
    kernels = md.get("amdhsa.kernels", [])
    if not isinstance(kernels, list):
        raise bad("amdhsa.kernels", "expected a list of kernel maps", kernels)
    for i, k in enumerate(kernels):
        where = f"amdhsa.kernels[{i}]"
        if not isinstance(k, dict):
            raise bad(where, "expected a map", k)
        for key, check in _KERNEL_FIELDS.items():
            if key in k and (why := check(k[key])):
                raise bad(where + key, why, k[key])
        if ".agpr_count" in k and ".vgpr_count" in k and k[".agpr_count"] > k[".vgpr_count"]:
            # .vgpr_count counts the AGPRs too (LLVM's getTotalNumVGPRs: accum_offset + AGPRs on gfx90a+,
            # the larger of the two files before): fewer would make the arch VGPR count negative
            raise _err(label, off, f"AMDGPU metadata: {where}.agpr_count: {k['.agpr_count']} AGPRs, more than "
                       f"the .vgpr_count {k['.vgpr_count']} that includes them")
        args = k.get(".args", [])
        if not isinstance(args, list):
            raise bad(where + ".args", "expected a list of argument maps", args)
        for j, a in enumerate(args):
            at = f"{where}.args[{j}]"
            if not isinstance(a, dict):
                raise bad(at, "expected a map", a)
            for key in _ARG_REQUIRED:
                if key not in a:
                    raise _err(label, off, f"AMDGPU metadata: {at}: no {key} (required)")
            for key, check in _ARG_FIELDS.items():
                if key in a and (why := check(a[key])):
                    raise bad(at + key, why, a[key])


def dump_summary(co: CodeObject) -> str:
    """A short human summary (used by `isagen disasm`)."""
    out = io.StringIO()
    out.write(f"; {co.source}: {co.target_id} (code object v{co.code_object_version}), "
              f"{len(co.kernels)} kernel(s)\n")
    return out.getvalue()
