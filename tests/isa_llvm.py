"""Helpers for the ISA tests: drive LLVM's assemblers in batches, read encodings and opcodes.

``assemble_lines(lines, target)`` runs one assembler over many instructions and returns, per input
line, either ``(text, bytes)`` (LLVM's canonical spelling and the machine code) or ``(None, error)``.
gfx942 uses Debian's ``llvm-mc-19``; gfx950 (which LLVM 19 does not know) uses zig's clang 22
(``clang -cc1as -show-encoding``).  Both are independent of isagen.

``family_opcode(word)`` reads the encoding family and opcode field of a gfx9 instruction's first
dword from the published bit layouts (AMD's CDNA3/CDNA4 ISA guides, "Microcode Formats").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "isagen" / "isa" / "data"
LLVM_MC = os.environ.get("ISAGEN_TEST_LLVM_MC", "llvm-mc-19")
LLVM_MCPU = {"gfx942": ["-mcpu=gfx942", "-mattr=+sramecc,-xnack"]}


def have_llvm_mc() -> bool:
    return shutil.which(LLVM_MC) is not None


def have_zig() -> bool:
    try:
        import ziglang  # noqa: F401
        return True
    except ImportError:
        return False


def require(target: str):
    """Skip (with the reason) when the assembler for ``target`` is not installed."""
    if target == "gfx942" and not have_llvm_mc():
        pytest.skip(f"{LLVM_MC} not installed (apt-get install llvm-19)")
    if target == "gfx950" and not have_zig():
        pytest.skip("ziglang not installed (pip install ziglang)")


_ENC_RE = re.compile(r"^\s*(.*?)\s*; encoding: \[([^\]]*)\]")
_ERR_RE = re.compile(r"^(?:<stdin>|[^:]*\.s):(\d+):(\d+): error: (.*)$")


def _run_assembler(text: str, target: str, tool: str | None = None) -> tuple[str, str]:
    tool = tool or ("llvm-mc" if target == "gfx942" else "zig")
    if tool == "llvm-mc":
        r = subprocess.run([LLVM_MC, "-triple", "amdgcn-amd-amdhsa", *LLVM_MCPU.get(target, [f"-mcpu={target}"]),
                            "-show-encoding"], input=text, capture_output=True, text=True)
        return r.stdout, r.stderr
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.s"
        src.write_text(text)
        r = subprocess.run([sys.executable, "-m", "ziglang", "clang", "-cc1as", "-triple", "amdgcn-amd-amdhsa",
                            "-target-cpu", target, "-filetype", "asm", "-show-encoding", str(src), "-o", "-"],
                           capture_output=True, text=True)
        return r.stdout, r.stderr


def assemble_lines(lines: list[str], target: str, tool: str | None = None, prefix: list[str] = ()) -> list[tuple]:
    """Assemble each line as one instruction.  Returns per line ``(llvm_text, bytes)`` or
    ``(None, error message)``.  Lines LLVM rejects are reported, the others still assembled.
    ``prefix``: directives (``.set``...) placed before the instructions; they emit no code."""
    # a label every instruction may branch to
    prefix = list(prefix) + [".Ltarget:"]
    text = "\n".join(prefix + list(lines)) + "\n"
    out, err = _run_assembler(text, target, tool)
    errors: dict[int, str] = {}
    for line in err.splitlines():
        m = _ERR_RE.match(line)
        if m:
            errors.setdefault(int(m.group(1)) - 1 - len(prefix), m.group(3))
    encoded = []
    for line in out.splitlines():
        m = _ENC_RE.match(line)
        if m:
            encoded.append((m.group(1), bytes(int(b, 16) for b in m.group(2).split(",") if b.strip())))
    # LLVM 19 lets a few operands through that its own printer then marks as invalid (e.g. exec as a
    # carry-in): count those as rejected
    for i, (txt, _) in enumerate(encoded):
        if "/*Invalid register" in txt:
            encoded[i] = (None, "LLVM printed: " + txt)
    results: list[tuple] = []
    it = iter(encoded)
    for i in range(len(lines)):
        if i in errors:
            results.append((None, errors[i]))
        else:
            nxt = next(it, None)
            if nxt is None:
                raise RuntimeError(f"assembler output ended early at line {i}: {lines[i]!r}\n{err[-2000:]}")
            results.append(nxt if nxt[0] is not None else (None, nxt[1]))
    if next(it, None) is not None:
        raise RuntimeError("more encodings than accepted input lines: output could not be matched to input")
    return results


# ----------------------------------------------------------------------------- LLVM's text vs ours

_SUFFIX_RE = re.compile(r"^(\S+?)(_e32|_e64)(\s|$)")


def normalise_llvm(text: str) -> str:
    """LLVM's canonical text without the _e32/_e64 encoding suffix (isagen lets LLVM pick the form)."""
    text = _SUFFIX_RE.sub(lambda m: m.group(1) + m.group(3), text.strip())
    return re.sub(r"\s+", " ", text)


def normalise_ours(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip())


# ----------------------------------------------------------------------------- opcode tables

def family_opcode(data: bytes) -> tuple[str, int]:
    """Encoding family and opcode of the instruction in ``data`` (gfx9 layouts).  A 16-byte instruction
    is gfx950's VOP3PX2 (a scaled MFMA: the v_mfma_ld_scale_b32 word pair, then the MFMA's), named by
    the opcode of its second half."""
    if len(data) == 16:
        return "VOP3PX2", family_opcode(data[8:])[1]
    word = int.from_bytes(data[:4], "little")
    if word >> 30 == 0b10:
        if word >> 23 == 0x17D:
            return "SOP1", (word >> 8) & 0xFF
        if word >> 23 == 0x17E:
            return "SOPC", (word >> 16) & 0x7F
        if word >> 23 == 0x17F:
            return "SOPP", (word >> 16) & 0x7F
        if word >> 28 == 0xB:
            return "SOPK", (word >> 23) & 0x1F
        return "SOP2", (word >> 23) & 0x7F
    if word >> 31 == 0:
        op = (word >> 25) & 0x3F
        if op == 0x3F:
            return "VOP1", (word >> 9) & 0xFF
        if op == 0x3E:
            return "VOPC", (word >> 17) & 0xFF
        return "VOP2", op
    if word >> 23 == 0x1A7:
        return "VOP3P", (word >> 16) & 0x7F
    top6 = word >> 26
    if top6 == 0b110000:
        return "SMEM", (word >> 18) & 0xFF
    if top6 == 0b110100:
        return "VOP3", (word >> 16) & 0x3FF
    if top6 == 0b110110:
        return "DS", (word >> 17) & 0xFF
    if top6 == 0b111000:
        return "MUBUF", (word >> 18) & 0x7F
    if top6 == 0b110111:
        return ("FLAT", "SCRATCH", "GLOBAL", "?")[(word >> 14) & 3], (word >> 18) & 0x7F
    return "?", -1


def load_opcodes(target: str) -> dict | None:
    path = DATA / f"opcodes.{target}.json"
    if not path.exists():
        return None
    with open(path) as f:
        return json.load(f)


def table_name(opcodes: dict, family: str, opcode: int) -> str | None:
    """The base mnemonic (no _e32/_e64 suffix) the LLVM-generated table records for an opcode."""
    entry = opcodes["families"].get(family, {}).get(str(opcode))
    if entry is None:
        return None
    return entry.get("name") or re.sub(r"_e(32|64)$", "", entry["mn"])
