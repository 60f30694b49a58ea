"""Find an LLVM assembler and linker for a target, assemble kernels and link code objects.

Search order (the first candidate that assembles for the processor wins; see docs/toolchain.md):

1. ``$ISAGEN_LLVM_DIR`` — when set, the *only* place looked at: a user who names an LLVM wants that
   LLVM, so a missing tool or an unsupported processor there is an error, never a silent fallback;
2. ROCm: ``$ROCM_PATH/llvm/bin`` (default ``/opt/rocm/llvm/bin``);
3. ``llvm-mc`` / ``clang`` with ``ld.lld`` on ``PATH``, versioned names (``llvm-mc-19``) included,
   newest LLVM first;
4. the ``ziglang`` package (clang and ld.lld inside zig, driven as ``zig clang`` / ``zig ld.lld``).

Each candidate is probed once per processor (assemble and link a one-line program that carries the
``.amdgcn_target`` directive; the answer is cached per tool path, version and processor).  LLVM 19
knows gfx942 but not gfx950, so on a Debian machine with ``llvm-19`` and ``ziglang`` gfx942 uses
``llvm-mc-19`` and gfx950 uses zig's clang.

Code objects carry the target ID that production devices run, ``gfx942:sramecc+:xnack-`` (or
whatever ``.amdgcn_target`` line the source has, e.g. feature-any ``gfx942``); every tool gets the
flags that spell the same ID and the ELF ``e_flags`` of the result are checked against it.

zig is driven through ``zig clang`` (the real clang driver zig embeds), not ``zig cc``: ``zig cc``
rewrites the triple to ``amdgcn-amd-amdhsa-unknown``, which the assembler then finds does not match
the ``.amdgcn_target "amdgcn-amd-amdhsa--…"`` line, and it can only express features as ``+``/``-``
(no feature-any).  ``zig clang -target amdgcn-amd-amdhsa -mcpu=gfx950:sramecc+:xnack-`` takes
LLVM's own spelling, so the line stays in the source as a check the assembler performs.
"""

from __future__ import annotations

import importlib
import os
import re
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import msgpack

from isagen.errors import CodeObjectError, ToolchainError
from isagen.objects.elf_parts import NT_AMDGPU_METADATA
from isagen.targets import TARGETS, Target, get_target

TRIPLE = "amdgcn-amd-amdhsa"
TIMEOUT_S = 300

# ELF e_flags of AMDGPU code objects (AMDGPUUsage "ELF Header"), code object v4+ feature encoding.
EF_AMDGPU_MACH = 0x0FF
EF_MACH = {t.name: t.e_flags_mach for t in TARGETS.values()}
_XNACK_BITS = {0x000: None, 0x100: "any", 0x200: "-", 0x300: "+"}      # EF_AMDGPU_FEATURE_XNACK_V4
_SRAMECC_BITS = {0x000: None, 0x400: "any", 0x800: "-", 0xC00: "+"}    # EF_AMDGPU_FEATURE_SRAMECC_V4
SHF_EXCLUDE = 0x80000000
SHT_NOTE = 7

# Debian/Ubuntu's packaged LLVM (`apt install llvm-19 lld-19`); ziglang's clang knows every target
APT_LLVM_MAJOR = 19


def _install_hint(t: Target) -> str:
    """Where to get an assembler that knows ``t``, from the first LLVM release that has it."""
    zig = f"`pip install ziglang` ({' and '.join(TARGETS)})"
    if t.llvm_min_major <= APT_LLVM_MAJOR:
        apt_known = [o.name for o in TARGETS.values() if o.llvm_min_major <= APT_LLVM_MAJOR]
        only = " only" if len(apt_known) < len(TARGETS) else ""
        return (f"{zig}, apt `llvm-{APT_LLVM_MAJOR} lld-{APT_LLVM_MAJOR}` ({' and '.join(apt_known)}{only}), or ROCm "
                "(/opt/rocm/llvm/bin)")
    return (f"{zig}, LLVM {t.llvm_min_major} or newer with lld, or ROCm (/opt/rocm/llvm/bin); "
            f"LLVM {APT_LLVM_MAJOR} does not know {t.name}")


INSTALL_HINT = {name: _install_hint(t) for name, t in TARGETS.items()}


# --------------------------------------------------------------------------- target IDs
@dataclass(frozen=True)
class TargetID:
    """A parsed target ID: ``gfx942:sramecc+:xnack-``; a feature left out is 'any'."""

    processor: str
    sramecc: str | None = None     # "+", "-" or None (any)
    xnack: str | None = None

    @classmethod
    def parse(cls, text: str | Target) -> TargetID:
        if isinstance(text, Target):
            text = text.target_id
        parts = str(text).strip().split(":")
        proc = parts[0].lower()
        if proc not in TARGETS:
            raise ToolchainError(f"unsupported target '{text}' (supported: {', '.join(TARGETS)})")
        feats: dict[str, str] = {}
        for part in parts[1:]:
            m = re.fullmatch(r"(sramecc|xnack)([+-])", part)
            if not m or m.group(1) in feats:
                raise ToolchainError(f"bad target ID '{text}': feature '{part}' is not sramecc+/- or xnack+/- "
                                     "(each at most once)")
            feats[m.group(1)] = m.group(2)
        return cls(proc, feats.get("sramecc"), feats.get("xnack"))

    def __str__(self) -> str:
        out = self.processor
        if self.sramecc:
            out += f":sramecc{self.sramecc}"
        if self.xnack:
            out += f":xnack{self.xnack}"
        return out

    @property
    def mattr(self) -> str:
        """llvm-mc's spelling of the features ('+sramecc,-xnack'); empty for feature-any."""
        return ",".join(f"{sign}{name}" for name, sign in (("sramecc", self.sramecc), ("xnack", self.xnack)) if sign)


def resolve_target_id(target) -> TargetID:
    """A Target or bare processor name means the production ID; a full ID string is taken as given."""
    if isinstance(target, TargetID):
        return target
    if isinstance(target, Target):
        return TargetID.parse(target.target_id)
    text = str(target).strip()
    if ":" not in text:
        return TargetID.parse(get_target(text).target_id)
    return TargetID.parse(text)


_TARGET_LINE = re.compile(r'^[ \t]*\.amdgcn_target[ \t]+"([^"]*)"', re.MULTILINE)


def source_target_id(asm_text: str) -> TargetID | None:
    """The target ID named by the source's ``.amdgcn_target`` line, if it has one."""
    m = _TARGET_LINE.search(asm_text)
    if not m:
        return None
    full = m.group(1)
    prefix = TRIPLE + "--"
    if not full.startswith(prefix):
        raise ToolchainError(f'.amdgcn_target "{full}" does not start with "{prefix}"')
    return TargetID.parse(full[len(prefix):])


def target_id_from_eflags(e_flags: int) -> TargetID:
    mach = e_flags & EF_AMDGPU_MACH
    procs = [p for p, v in EF_MACH.items() if v == mach]
    if not procs:
        raise ToolchainError(f"code object for an unsupported processor (e_flags {e_flags:#x}, mach {mach:#x})")
    def sign(v):
        return None if v in (None, "any") else v
    return TargetID(procs[0], sign(_SRAMECC_BITS.get(e_flags & 0xC00)), sign(_XNACK_BITS.get(e_flags & 0x300)))


def eflags_match(e_flags: int, tid: TargetID) -> bool:
    """True if an ELF's e_flags spell exactly this target ID (feature-any is the 'any' encoding)."""
    want_s = {None: "any", "+": "+", "-": "-"}[tid.sramecc]
    want_x = {None: "any", "+": "+", "-": "-"}[tid.xnack]
    return ((e_flags & EF_AMDGPU_MACH) == EF_MACH[tid.processor]
            and _SRAMECC_BITS.get(e_flags & 0xC00) == want_s and _XNACK_BITS.get(e_flags & 0x300) == want_x)


# --------------------------------------------------------------------------- tools and toolchains
@dataclass(frozen=True)
class Tool:
    """One executable, as a command prefix (``argv``), with the LLVM version it reports."""

    argv: tuple[str, ...]
    path: str
    version: str

    @property
    def name(self) -> str:
        return " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(self.argv))


@dataclass(frozen=True)
class Toolchain:
    """An assembler and a linker that together turn a .s into a code object for some targets."""

    source: str          # where it was found: ISAGEN_LLVM_DIR, ROCm, PATH, ziglang
    flavor: str          # "llvm-mc" or "clang" (how the assembler is driven)
    assembler: Tool
    linker: Tool
    note: str = ""       # e.g. the zig version

    def assemble_command(self, tid: TargetID, src: str, obj: str) -> list[str]:
        if self.flavor == "llvm-mc":
            cmd = [*self.assembler.argv, f"-triple={TRIPLE}", f"-mcpu={tid.processor}"]
            if tid.mattr:
                cmd.append(f"-mattr={tid.mattr}")
            return cmd + ["-filetype=obj", src, "-o", obj]
        # clang takes the target ID itself in -mcpu ("gfx942:sramecc+:xnack-")
        return [*self.assembler.argv, "-target", TRIPLE, f"-mcpu={tid}", "-c", "-x", "assembler", src, "-o", obj]

    def link_command(self, objs: list[str], out: str) -> list[str]:
        return [*self.linker.argv, "-shared", "--no-undefined", *objs, "-o", out]

    @property
    def version(self) -> str:
        """What identifies this toolchain's output (for build caches): tool and LLVM version."""
        extra = f" ({self.note})" if self.note else ""
        return f"{self.assembler.name} {self.assembler.version}{extra}"

    def describe(self) -> str:
        extra = f", {self.note}" if self.note else ""
        return (f"{self.assembler.name} (LLVM {self.assembler.version}{extra}) + {self.linker.name} "
                f"[{self.source}: {self.assembler.path}]")


# --------------------------------------------------------------------------- discovery
_VERSION_CACHE: dict[tuple, str] = {}
_PROBE_CACHE: dict[tuple[str, str, str], ProbeResult] = {}
_FIND_CACHE: dict[tuple, Toolchain] = {}


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    why: str = ""


def _run(cmd: list[str], cwd: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"{os.path.basename(cmd[0])} did not finish within {TIMEOUT_S} s") from None
    except OSError as e:
        raise ToolchainError(f"cannot run {cmd[0]}: {e.strerror}") from None


def _tool_version(argv: tuple[str, ...], path: str, arg: str = "--version") -> str:
    """The version a tool prints ('19.1.7'), cached per command and the executable's mtime."""
    try:
        key = (argv, arg, os.stat(path).st_mtime)
    except OSError:
        key = (argv, arg, 0.0)
    if key not in _VERSION_CACHE:
        try:
            out = subprocess.run([*argv, arg], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        m = re.search(r"(?:LLVM version|clang version|LLD|^)\s*(\d+\.\d+(?:\.\d+)*)", out)
        _VERSION_CACHE[key] = m.group(1) if m else "unknown"
    return _VERSION_CACHE[key]


def _llvm_version(argv: tuple[str, ...], path: str) -> str:
    return _tool_version(argv, path)


def _major(version: str) -> int:
    m = re.match(r"\d+", version)
    return int(m.group()) if m else 0


def _exe(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _dir_toolchain(directory: str, source: str) -> tuple[Toolchain | None, str]:
    """The llvm-mc (or clang) + ld.lld of one LLVM bin folder, or why there is none."""
    lld = os.path.join(directory, "ld.lld")
    for flavor, name in (("llvm-mc", "llvm-mc"), ("clang", "clang")):  # noqa: B007  (the one found is used below)
        asm = os.path.join(directory, name)
        if _exe(asm):
            break
    else:
        return None, f"{directory} has neither llvm-mc nor clang"
    if not _exe(lld):
        return None, f"{directory} has {name} but no ld.lld"
    version = _llvm_version((asm,), asm)
    return Toolchain(source, flavor, Tool((asm,), asm, version), Tool((lld,), lld, _llvm_version((lld,), lld))), ""


_PATH_TOOL = re.compile(r"^(llvm-mc|clang|ld\.lld)(?:-(\d+))?$")


def _path_toolchains(path_env: str) -> list[Toolchain]:
    """llvm-mc / clang with an ld.lld on PATH, newest LLVM first, llvm-mc before clang."""
    found: dict[str, dict[str | None, str]] = {"llvm-mc": {}, "clang": {}, "ld.lld": {}}
    for d in path_env.split(os.pathsep):
        if not d or not os.path.isdir(d):
            continue
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            m = _PATH_TOOL.match(n)
            if m and _exe(os.path.join(d, n)):
                found[m.group(1)].setdefault(m.group(2), os.path.join(d, n))   # first on PATH wins
    out, seen = [], set()
    for flavor in ("llvm-mc", "clang"):
        for suffix, asm in found[flavor].items():
            real = os.path.realpath(asm)
            if real in seen:
                continue
            seen.add(real)
            version = _llvm_version((asm,), asm)
            if version == "unknown" and suffix:
                version = suffix
            # the linker of the same LLVM: same suffix, else the one beside the real binary
            lld = found["ld.lld"].get(suffix) or (
                os.path.join(os.path.dirname(real), "ld.lld") if _exe(os.path.join(os.path.dirname(real), "ld.lld"))
                else None)
            if lld is None and found["ld.lld"]:
                lld = max(found["ld.lld"].items(), key=lambda kv: int(kv[0] or 0))[1]
            if lld is None:
                continue
            out.append(Toolchain("PATH", flavor, Tool((asm,), asm, version),
                                 Tool((lld,), lld, _llvm_version((lld,), lld))))
    out.sort(key=lambda tc: (-_major(tc.assembler.version), tc.flavor != "llvm-mc"))
    return out


def _zig_binary() -> tuple[tuple[str, ...], str] | None:
    """The zig executable inside the ``ziglang`` package (or ``python -m ziglang``), if importable."""
    try:
        mod = importlib.import_module("ziglang")
    except ImportError:
        return None
    pkg = os.path.dirname(getattr(mod, "__file__", "") or "")
    exe = os.path.join(pkg, "zig")
    if _exe(exe):
        return (exe,), exe
    return (sys.executable, "-m", "ziglang"), pkg


def _zig_toolchain(zig: tuple[tuple[str, ...], str]) -> Toolchain:
    argv, path = zig
    clang = Tool((*argv, "clang"), path, _llvm_version((*argv, "clang"), path))
    lld = Tool((*argv, "ld.lld"), path, _llvm_version((*argv, "ld.lld"), path))
    return Toolchain("ziglang", "clang", clang, lld, note=f"zig {_tool_version(argv, path, 'version')}")


def _rocm_dir() -> str:
    return os.path.join(os.environ.get("ROCM_PATH") or "/opt/rocm", "llvm", "bin")


def candidates() -> list[tuple[Toolchain | None, str, str]]:
    """Every toolchain in search order as (toolchain or None, where, why not usable)."""
    llvm_dir = os.environ.get("ISAGEN_LLVM_DIR")
    if llvm_dir:
        tc, why = _dir_toolchain(llvm_dir, "ISAGEN_LLVM_DIR")
        return [(tc, f"ISAGEN_LLVM_DIR={llvm_dir}", why)]
    out: list[tuple[Toolchain | None, str, str]] = []
    rocm = _rocm_dir()
    if os.path.isdir(rocm):
        tc, why = _dir_toolchain(rocm, "ROCm")
        out.append((tc, rocm, why))
    for tc in _path_toolchains(os.environ.get("PATH", "")):
        out.append((tc, "PATH", ""))
    zig = _zig_binary()
    if zig:
        out.append((_zig_toolchain(zig), "ziglang", ""))
    return out


def probe(tc: Toolchain, processor: str) -> ProbeResult:
    """Can this toolchain assemble and link a code object for ``processor``?  (cached)"""
    key = (tc.assembler.path + " " + " ".join(tc.assembler.argv[1:]), tc.assembler.version, processor)
    if key not in _PROBE_CACHE:
        tid = TargetID.parse(get_target(processor).target_id)
        text = f'.amdgcn_target "{TRIPLE}--{tid}"\n.text\ns_endpgm\n'
        try:
            _build(tc, [text], tid, "probe")
            _PROBE_CACHE[key] = ProbeResult(True)
        except ToolchainError as e:
            _PROBE_CACHE[key] = ProbeResult(False, str(e))
    return _PROBE_CACHE[key]


def find_toolchain(target) -> Toolchain:
    """The first toolchain in search order that supports ``target`` (a Target, processor or target ID)."""
    proc = resolve_target_id(target).processor
    zig = _zig_binary()
    key = (proc, os.environ.get("ISAGEN_LLVM_DIR"), os.environ.get("ROCM_PATH"), os.environ.get("PATH"), zig)
    if key in _FIND_CACHE:
        return _FIND_CACHE[key]
    tried = []
    for tc, _where, why in candidates():
        if tc is None:
            tried.append(why)
            continue
        result = probe(tc, proc)
        if result.ok:
            _FIND_CACHE[key] = tc
            return tc
        tried.append(f"{tc.assembler.name} (LLVM {tc.assembler.version}): {result.why}")
    llvm_dir = os.environ.get("ISAGEN_LLVM_DIR")
    if llvm_dir:
        raise ToolchainError(f"no usable assembler for {proc} in ISAGEN_LLVM_DIR ({'; '.join(tried)}); "
                             f"unset ISAGEN_LLVM_DIR to search ROCm, PATH and ziglang")
    detail = f" (tried: {'; '.join(tried)})" if tried else ""
    raise ToolchainError(f"no assembler for {proc} found: install {INSTALL_HINT[proc]}, "
                         f"or set ISAGEN_LLVM_DIR to an LLVM bin folder{detail}")


# --------------------------------------------------------------------------- assemble and link
_ERROR_LINE = re.compile(r"^(?P<file>[^\n:]*):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*)$", re.MULTILINE)


def _assembler_error(stderr: str, sources: dict[str, str], tool: str) -> str:
    m = _ERROR_LINE.search(stderr)
    if m:
        base = os.path.basename(m.group("file"))
        text = sources.get(base)
        lineno = int(m.group("line"))
        src = ""
        if text is not None:
            lines = text.splitlines()
            if 1 <= lineno <= len(lines):
                src = lines[lineno - 1].strip()
        shown = f": `{src}`" if src else ""
        return f"{tool} rejected {base}:{lineno}:{m.group('col')}: {m.group('msg').strip()}{shown}"
    first = next((ln.strip() for ln in stderr.splitlines() if "error" in ln.lower()), None)
    first = first or next((ln.strip() for ln in stderr.splitlines() if ln.strip()), "no message")
    return f"{tool} failed: {first}"


def _read_eflags(data: bytes, producer: str = "the assembler") -> int:
    if data[:4] != b"\x7fELF" or len(data) < 52:
        raise ToolchainError(f"{producer} produced something that is not an ELF file")
    return struct.unpack_from("<I", data, 48)[0]


def _output(path: str, tool: Tool) -> bytes:
    """The file a tool that exited 0 was to write: a tool that reports success without writing it (a
    wrapper script, a broken install under ISAGEN_LLVM_DIR) is named with the file it did not write."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ToolchainError(f"{tool.name} ({tool.path}) exited 0 but did not write {os.path.basename(path)} "
                             f"({e.strerror})") from None
    if not data:
        raise ToolchainError(f"{tool.name} ({tool.path}) exited 0 but wrote an empty {os.path.basename(path)}")
    return data


def _check_eflags(data: bytes, tid: TargetID, what: str, producer: str = "the linker") -> None:
    flags = _read_eflags(data, producer)
    if not eflags_match(flags, tid):
        raise ToolchainError(f"{what} came out as {target_id_from_eflags(flags)} (e_flags {flags:#x}), "
                             f"not the requested {tid}")


def _assemble_in(tc: Toolchain, tmp: str, texts: list[str], tid: TargetID, name: str) -> list[str]:
    objs, sources = [], {}
    for n, text in enumerate(texts):
        base = f"{name}.s" if len(texts) == 1 else f"{name}_{n}.s"
        src = os.path.join(tmp, base)
        with open(src, "w") as f:
            f.write(text)
        sources[base] = text
        obj = src[:-2] + ".o"
        r = _run(tc.assemble_command(tid, src, obj), cwd=tmp)
        unknown = re.search(r"'([^']+)' is not a recognized processor|invalid target ID '([^':]+)|"
                            r"unknown target CPU '([^']+)'", r.stderr)
        if unknown:
            raise ToolchainError(f"{tc.assembler.name} does not know {next(g for g in unknown.groups() if g)}")
        if r.returncode != 0:
            raise ToolchainError(_assembler_error(r.stderr, sources, tc.assembler.name))
        _check_eflags(_output(obj, tc.assembler), tid, f"{base}'s object", tc.assembler.name)
        objs.append(obj)
    return objs


def _link_in(tc: Toolchain, tmp: str, objs: list[str], out: str) -> bytes:
    r = _run(tc.link_command(objs, out), cwd=tmp)
    if r.returncode != 0:
        first = next((ln.strip() for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip() or "no message")
        raise ToolchainError(f"{tc.linker.name} failed: {first}")
    return _output(out, tc.linker)


def _build(tc: Toolchain, texts: list[str], tid: TargetID, name: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="isagen-") as tmp:
        objs = _assemble_in(tc, tmp, texts, tid, name)
        data = _link_in(tc, tmp, objs, os.path.join(tmp, f"{name}.co"))
    _check_eflags(data, tid, "the linked code object", tc.linker.name)
    return data


def _pick_target_id(asm_text: str, target) -> TargetID:
    """The source's ``.amdgcn_target`` decides the features; ``target`` must name the same processor."""
    in_source = source_target_id(asm_text)
    asked = resolve_target_id(target)
    if in_source is None:
        return asked
    if in_source.processor != asked.processor:
        raise ToolchainError(f"the source's .amdgcn_target is {in_source}, but it was to be assembled for "
                             f"{asked.processor}")
    explicit = isinstance(target, str) and ":" in target
    if explicit and in_source != asked:
        raise ToolchainError(f"source's .amdgcn_target is {in_source}, but {asked} was asked for")
    return in_source


def assemble_object(asm_text: str, target, *, name: str = "kernel", toolchain: Toolchain | None = None) -> bytes:
    """Assemble one .s into a relocatable object (for ``link``)."""
    tid = _pick_target_id(asm_text, target)
    tc = toolchain or find_toolchain(tid.processor)
    with tempfile.TemporaryDirectory(prefix="isagen-") as tmp:
        (obj,) = _assemble_in(tc, tmp, [asm_text], tid, _safe(name))
        return _output(obj, tc.assembler)


def assemble(asm_text: str, target, *, name: str = "kernel", toolchain: Toolchain | None = None) -> bytes:
    """Assemble one .s and link it into a loadable code object (.co bytes).

    ``target``: a Target, a processor name ('gfx942', meaning the production ID
    gfx942:sramecc+:xnack-) or a full target ID.  A ``.amdgcn_target`` line in the source decides the
    features (and must name the same processor).  Assembler errors raise ``ToolchainError`` with the
    assembler's first error and the offending source line.
    """
    tid = _pick_target_id(asm_text, target)
    tc = toolchain or find_toolchain(tid.processor)
    return _build(tc, [asm_text], tid, _safe(name))


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", name) or "kernel"


# --------------------------------------------------------------------------- linking several kernels
def _sections(data: bytes) -> list[dict]:
    """Section headers of an ELF64 little-endian file (name offsets unresolved)."""
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    out = []
    for i in range(shnum):
        off = shoff + i * shentsize
        name, typ, flags, addr, offset, size = struct.unpack_from("<IIQQQQ", data, off)
        out.append({"index": i, "header": off, "type": typ, "flags": flags, "offset": offset, "size": size})
    return out


def _notes(blob: bytes):
    pos = 0
    while pos + 12 <= len(blob):
        namesz, descsz, typ = struct.unpack_from("<III", blob, pos)
        name = blob[pos + 12: pos + 12 + namesz].rstrip(b"\0")
        dpos = pos + 12 + (namesz + 3) // 4 * 4
        yield name, typ, blob[dpos: dpos + descsz]
        pos = dpos + (descsz + 3) // 4 * 4


def _split_metadata(obj: bytes) -> tuple[bytes, dict | None]:
    """(object with its AMDGPU metadata note section marked SHF_EXCLUDE, the metadata) — the linker
    then drops the note and ``link`` writes one merged note for all kernels."""

    data = bytearray(obj)
    meta = None
    for sec in _sections(obj):
        if sec["type"] != SHT_NOTE:
            continue
        blob = obj[sec["offset"]: sec["offset"] + sec["size"]]
        found = [d for n, t, d in _notes(blob) if n == b"AMDGPU" and t == NT_AMDGPU_METADATA]
        if not found:
            continue
        if len(found) > 1 or meta is not None:
            raise ToolchainError("an object holds more than one AMDGPU metadata note")
        from isagen.objects.codeobject import check_metadata  # (it loads the decoder: only when linking)
        try:
            meta = msgpack.unpackb(found[0], raw=False, strict_map_key=False)
            check_metadata(meta, "the object", sec["offset"])
        except CodeObjectError as e:
            raise ToolchainError(str(e)) from None
        except Exception as e:  # noqa: BLE001 -- msgpack raises several types for malformed input
            raise ToolchainError(f"an object's AMDGPU metadata note is malformed (msgpack): {e}") from None
        if any(n != b"AMDGPU" or t != NT_AMDGPU_METADATA for n, t, _ in _notes(blob)):
            raise ToolchainError("an object's metadata note section holds other notes too; cannot merge")
        struct.pack_into("<Q", data, sec["header"] + 8, sec["flags"] | SHF_EXCLUDE)
    return bytes(data), meta


def _note_source(meta: dict, code_object_version: int) -> str:
    """Assembly for one NT_AMDGPU_METADATA note holding ``meta`` (msgpack bytes, written raw)."""

    desc = msgpack.packb(meta, use_bin_type=False)
    name = b"AMDGPU\0"
    body = struct.pack("<III", len(name), len(desc), NT_AMDGPU_METADATA) + name + b"\0" * (-len(name) % 4)
    body += desc + b"\0" * (-len(desc) % 4)
    lines = [f".amdhsa_code_object_version {code_object_version}", '.section .note,"a",@note', ".p2align 2"]
    for i in range(0, len(body), 16):
        lines.append(".byte " + ", ".join(str(b) for b in body[i:i + 16]))
    return "\n".join(lines) + "\n"


def link(objects: list[bytes], *, name: str = "kernels", toolchain: Toolchain | None = None) -> bytes:
    """Link relocatable objects (from ``assemble_object``) into one code object.

    Every object carries its own metadata note; a plain link would keep them all and runtimes read
    only the first, so the kernels of the later objects would be invisible.  ``link`` merges them
    into one note whose ``amdhsa.kernels`` lists every kernel, in the order given.
    """
    if not objects:
        raise ToolchainError("link() needs at least one object")
    flags, abis = set(), set()
    for n, obj in enumerate(objects):
        if obj[:4] != b"\x7fELF":
            raise ToolchainError(f"object {n} is not an ELF file")
        if struct.unpack_from("<H", obj, 16)[0] != 1:
            raise ToolchainError(f"object {n} is not a relocatable object (pass assemble_object() results, "
                                 "not linked code objects)")
        flags.add(_read_eflags(obj))
        abis.add(obj[8])
    if len(abis) != 1:
        versions = ", ".join(f"v{a + 2}" for a in sorted(abis))
        raise ToolchainError(f"cannot link objects of different code object versions: {versions}")
    if len(flags) != 1:
        ids = ", ".join(sorted(str(target_id_from_eflags(f)) for f in flags))
        raise ToolchainError(f"cannot link objects for different targets: {ids}")
    tid = target_id_from_eflags(flags.pop())
    tc = toolchain or find_toolchain(tid.processor)
    stripped, metas = [], []
    for obj in objects:
        data, meta = _split_metadata(obj)
        stripped.append(data)
        if meta is not None:
            metas.append(meta)
    merged = None
    if metas:
        merged = dict(metas[0])
        for key in ("amdhsa.version", "amdhsa.target"):
            values = {repr(m.get(key)) for m in metas}
            if len(values) > 1:
                raise ToolchainError(f"objects disagree on {key}: {', '.join(sorted(values))}")
        merged["amdhsa.kernels"] = [k for m in metas for k in m.get("amdhsa.kernels", [])]
        names = [k.get(".name") for k in merged["amdhsa.kernels"]]
        dup = sorted({x for x in names if names.count(x) > 1})
        if dup:
            raise ToolchainError(f"kernel(s) defined in more than one object: {', '.join(map(str, dup))}")
    safe = _safe(name)
    with tempfile.TemporaryDirectory(prefix="isagen-") as tmp:
        paths = []
        for n, data in enumerate(stripped):
            p = os.path.join(tmp, f"{safe}_{n}.o")
            with open(p, "wb") as f:
                f.write(data)
            paths.append(p)
        if merged is not None:
            paths += _assemble_in(tc, tmp, [_note_source(merged, abis.pop() + 2)], tid, f"{safe}_metadata")
        out = _link_in(tc, tmp, paths, os.path.join(tmp, f"{safe}.co"))
    _check_eflags(out, tid, "the linked code object", tc.linker.name)
    return out
