#!/usr/bin/env python3
"""Generate isagen/isa/data/opcodes.<target>.json from LLVM (not typed by hand).

gfx942: for every encoding family, build machine words for every opcode value with distinct probe
register numbers in each field (vdst=v8, src0=v16, src1=v24, src2=v32, sdst=s40 ...), disassemble
them all in one batch with ``llvm-mc-19 --disassemble -mcpu=gfx942`` and read back, per opcode:
the mnemonic, which fields appear in the text and in what order, each register operand's width
(``v[8:9]`` -> 2 dwords), how each source prints inline constants and literals ("ctype"), which
immediate format a SOPP/SOPK uses, whether a VOP1/2/C opcode has DPP/SDWA forms, VOP3 op_sel
support.  Each probe word is preceded by a sentinel ``s_movk_i32 s0, <id>`` so the output can be
matched to the input even when LLVM rejects a word (it prints a warning and skips 4 bytes).

gfx950: probed the same way with ``llvm-mc-22 --disassemble -mcpu=gfx950`` (Debian's llvm-22), plus
the one two-instruction encoding (VOP3PX2: a ``v_mfma_ld_scale_b32`` word pair followed by an MFMA word
pair is one ``v_mfma_scale_*``), probed as such.  LLVM 22's printer differs from LLVM 19's in two
ways the table records or works around: a literal whose value an inline constant could encode prints
as ``lit(0x...)`` (``"lit_text": true``; ``classify_const`` reads it as the constant), and a
VGPR in an SGPR-only source (the lane mask of ``v_cndmask_b32_e64``) is no longer flagged
``/*Invalid register*/``, so such an operand keeps the register file gfx942's table has for the
same mnemonic.

``zig_assemble`` (zig's clang 22 assembler) stays for the tests that re-assemble decoded gfx950
text on machines without llvm-22.

Usage: python tools/gen_opcodes.py [--target gfx942|gfx950|all] [--families SOP1,VOP2,...]
                                   [--out DIR] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from isagen.isa import fields as F  # noqa: E402

LLVM_MC = os.environ.get("ISAGEN_LLVM_MC", "llvm-mc-19")
# the disassembler that is the reference of each target's table (LLVM 19 has no gfx950)
LLVM_MC_FOR = {"gfx942": LLVM_MC, "gfx950": os.environ.get("ISAGEN_LLVM_MC_GFX950", "llvm-mc-22")}
APT_FOR = {"llvm-mc-19": "llvm-19", "llvm-mc-22": "llvm-22"}


def mc_for(mcpu: str) -> str:
    """The llvm-mc that disassembles ``mcpu`` (gfx942: 19, gfx950: 22)."""
    return LLVM_MC_FOR.get(mcpu, LLVM_MC)
SENTINEL = 0xB0010000          # s_movk_i32 s1, <id> (no probe writes s1)
LIT = 0x12345678               # probe literal; as a word it decodes as a 32-bit VOP2
LIT_NEG = 0xFFFFFFF0

# probe register numbers: distinct first indices, aligned for 4-dword tuples
V_DST, V_SRC0, V_SRC1, V_SRC2 = 8, 16, 24, 32
S_SDST = 40

REG_RE = re.compile(r"^(v|s|a|ttmp)(\d+)$|^(v|s|a|ttmp)\[(\d+):(\d+)\]$")


# ============================================================================ llvm-mc driver

def disassemble(probes: list[tuple[int, ...]], mcpu: str = "gfx942",
                tool: str | None = None) -> list[str | None]:
    """Disassemble each probe (tuple of dwords); None where LLVM rejects the first word.

    Each probe is preceded by two sentinel words ``s_movk_i32 s1, id`` and
    ``s_movk_i32 s1, id ^ 0xa5a5`` (a pair that a random probe will not imitate), so the output
    is matched to the input even when LLVM rejects or merges words.  If llvm-mc dies on a word
    (LLVM 19 crashes on a few malformed encodings), the batch is bisected until that word is
    isolated; it counts as rejected.
    """
    out: list[str | None] = [None] * len(probes)
    todo = [(lo, min(lo + 30000, len(probes))) for lo in range(0, len(probes), 30000)]
    while todo:
        lo, hi = todo.pop()
        if _disassemble_chunk(probes[lo:hi], mcpu, tool or mc_for(mcpu), out, lo) is None:
            continue
        if hi - lo > 1:                  # llvm-mc died: bisect to isolate the word
            mid = (lo + hi) // 2
            todo += [(mid, hi), (lo, mid)]
        else:
            out[lo] = None
    return out


def _disassemble_chunk(chunk, mcpu, tool, out, base):
    lines = []
    for i, pr in enumerate(chunk):
        # two s_nop words after the probe absorb a rejected probe's trailing words being read
        # as the start of a longer instruction, so the next sentinel pair stays intact
        b = struct.pack(f"<{len(pr) + 4}I", SENTINEL | i, SENTINEL | (i ^ 0xA5A5), *pr,
                        0xBF800000, 0xBF800000)
        lines.append(" ".join(f"0x{x:02x}" for x in b))
    r = subprocess.run([tool, "--disassemble", "-triple", "amdgcn-amd-amdhsa",
                        "-mcpu=" + mcpu], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, check=False)
    # a warning at column 41 is the probe's first byte (8 bytes of sentinels = 40 chars)
    bad = {int(m.group(1)) - 1 for m in re.finditer(r"<stdin>:(\d+):41: warning", r.stderr)}
    cur, first, prev = None, False, None
    for line in r.stdout.splitlines():
        t = line.strip()
        if t.startswith("s_movk_i32 s1, "):
            v = int(t.split(", ")[1], 0)
            if prev is not None and prev ^ 0xA5A5 == v and prev < len(chunk):
                cur, first, prev = prev, True, None
                continue
            prev = v
            continue
        prev = None
        if cur is None or not first or t.startswith("."):
            continue
        first = False
        if cur not in bad:
            out[base + cur] = t
    if r.returncode != 0:
        for i in range(len(chunk)):
            out[base + i] = None
        return r.returncode
    return None


# ============================================================================ text parsing

MOD_WORDS = {"off", "offen", "idxen", "lds", "gds", "sc0", "sc1", "nt", "glc", "slc", "clamp",
             "tfe", "nv", "dlc", "bound_ctrl:0", "bound_ctrl:1"}


def split_text(text: str) -> tuple[str, list[str], list[str]]:
    """'mn a, b, c mod1 mod2' -> ('mn', ['a','b','c'], ['mod1','mod2'])."""
    text = re.sub(r"/\*.*?\*/", "", text)
    if " " not in text:
        return text, [], []
    mn, rest = text.split(" ", 1)
    parts = _split_top(rest)
    tail = parts[-1].split(" ")
    parts[-1] = tail[0]
    mods = tail[1:]
    if len(parts) == 1 and reg_of(parts[0]) is None and (
            ":" in parts[0] or parts[0] in MOD_WORDS - {"off"}):
        mods = [parts[0]] + mods
        parts = []
    return mn, parts, mods


def _split_top(s: str) -> list[str]:
    """Split on ', ' outside parentheses/brackets (hwreg(a, b, c) stays one token)."""
    out, depth, cur, i = [], 0, [], 0
    while i < len(s):
        ch = s[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if depth == 0 and s.startswith(", ", i):
            out.append("".join(cur))
            cur = []
            i += 2
            continue
        cur.append(ch)
        i += 1
    out.append("".join(cur))
    return out


def reg_of(tok: str):
    """('v', 8, 2) for 'v[8:9]' (modifiers stripped), or None."""
    t = tok.strip("-|")
    for p in ("neg(", "abs(", "sext("):
        if t.startswith(p):
            t = t[len(p):-1]
    t = t.strip("-|")
    m = REG_RE.match(t)
    if not m:
        return None
    if m.group(1):
        return m.group(1), int(m.group(2)), 1
    return m.group(3), int(m.group(4)), int(m.group(5)) - int(m.group(4)) + 1


def classify_const(texts: dict) -> str | None:
    """Pick the ctype whose printer reproduces LLVM's text for codes 242, 248 and the literal."""
    for ct in F.CTYPES:
        ok = True
        for key, got in texts.items():
            if got is None:
                continue
            if isinstance(key, tuple):
                want = F.const_text(255, key[1], ct)
                if got.startswith("lit("):
                    # LLVM 22 prints a literal whose value an inline constant of the operand's type
                    # could encode as lit(0x...) where LLVM 19 prints the constant ("1.0"): the ctype
                    # is the one whose printer turns the value into something other than hex
                    got = want if not re.fullmatch(r"-?0x[0-9a-f]+", want) else "?"
            else:
                want = F.const_text(key, None, ct)
            if want != got:
                ok = False
                break
        if ok:
            return ct
    return None


# ============================================================================ families

class Family:
    """One encoding family: how to build a probe word from (opcode, field values)."""

    name = ""
    nops = 0
    size = 4          # bytes without literal
    # field -> list of probe values to try (first = preferred); 0 = "field left zero"
    fields: dict = {}
    # field -> (register file used in the text, index printed for probe value)
    lit = False       # append a literal word to every probe

    def encode(self, op: int, f: dict) -> tuple[int, ...]:
        raise NotImplementedError

    def probe(self, op: int, f: dict, literal: int = LIT) -> tuple[int, ...]:
        """The probe words: the encoding, then the literal dword in the families that append one."""
        w = self.encode(op, f)
        return w + (literal,) if self.lit else w

    def token_field(self, tok: str, f: dict):
        """Return (field, file, width) for an operand token, or None."""
        r = reg_of(tok)
        if r is None:
            return None
        file, idx, n = r
        for name, val in f.items():
            pi = self.printed_index(name, val) if val else None
            if pi and _same(pi, file, idx):
                return name, file, n
        return None

    def printed_index(self, name, val):
        return None


def _src9(val):
    """9-bit source operand code -> (file, index) as printed."""
    if val >= 256:
        return "v", val - 256
    return "s", val


def _same(printed, file, idx):
    """A VGPR-coded source may print as an AGPR (v_accvgpr_read/mov: the field names an AGPR)."""
    return printed == (file, idx) or (printed[0] == "v" and file == "a" and printed[1] == idx)


# -- scalar ------------------------------------------------------------------------------

class ScalarFamily(Family):
    """A scalar family: each of its register fields prints as an SGPR of the probe's index."""

    def printed_index(self, name, val):
        return "s", val


class SOP2(ScalarFamily):
    name, nops = "SOP2", 0x60
    fields = {"sdst": [8, 0], "ssrc0": [16, 0], "ssrc1": [24, 0]}
    lit = True

    def encode(self, op, f):
        return ((2 << 30) | (op << 23) | (f["sdst"] << 16) | (f["ssrc1"] << 8) | f["ssrc0"],)


class SOP1(ScalarFamily):
    name, nops = "SOP1", 256
    fields = {"sdst": [8, 0], "ssrc0": [16, 0]}
    lit = True

    def encode(self, op, f):
        return ((0x17D << 23) | (f["sdst"] << 16) | (op << 8) | f["ssrc0"],)


class SOPC(ScalarFamily):
    name, nops = "SOPC", 128
    fields = {"ssrc0": [16, 0], "ssrc1": [24, 0]}
    lit = True

    def encode(self, op, f):
        return ((0x17E << 23) | (op << 16) | (f["ssrc1"] << 8) | f["ssrc0"],)


class SOPK(ScalarFamily):
    name, nops = "SOPK", 29       # 29..31 are the SOP1/SOPC/SOPP prefixes
    fields = {"sdst": [8, 0]}
    lit = True

    def encode(self, op, f):
        return ((0xB << 28) | (op << 23) | (f["sdst"] << 16) | f.get("simm16", 0),)


class SOPP(Family):
    name, nops = "SOPP", 128
    fields = {}

    def encode(self, op, f):
        return ((0x17F << 23) | (op << 16) | f.get("simm16", 0),)


class SMEM(ScalarFamily):
    name, nops, size = "SMEM", 256, 8
    fields = {"sdata": [8, 0], "sbase": [16, 0], "offset": [0x2C, 0], "imm": [1, 0]}

    def encode(self, op, f):
        return ((0x30 << 26) | (op << 18) | (f.get("imm", 1) << 17) | (f["sdata"] << 6)
                | (f["sbase"] >> 1), f.get("offset", 0x2C))


# -- vector ALU ----------------------------------------------------------------------------

class VOP2(Family):
    name, nops = "VOP2", 0x3E
    fields = {"vdst": [V_DST], "src0": [256 + V_SRC0, V_SRC0], "vsrc1": [V_SRC1]}
    lit = True

    def encode(self, op, f):
        return ((op << 25) | (f["vdst"] << 17) | (f["vsrc1"] << 9) | f["src0"],)

    def printed_index(self, name, val):
        if name == "src0":
            return _src9(val)
        return ("v", val)


class VOP1(Family):
    name, nops = "VOP1", 256
    fields = {"vdst": [V_DST, 0], "src0": [256 + V_SRC0, V_SRC0, 0]}
    lit = True

    def encode(self, op, f):
        return ((0x3F << 25) | (f["vdst"] << 17) | (op << 9) | f["src0"],)

    def printed_index(self, name, val):
        if name == "src0":
            return _src9(val)
        return ("v", val) if name != "vdst" else None

    def token_field(self, tok, f):
        r = reg_of(tok)
        if r and f["vdst"] and r[1] == f["vdst"] and r[0] in "vsa" and not tok.startswith(("-", "|")):
            # v_readfirstlane writes an SGPR, v_accvgpr_mov an AGPR through the vdst field
            if r[0] != "v" or r[1] != 16:
                return "vdst", r[0], r[2]
        return super().token_field(tok, f)


class VOPC(Family):
    name, nops = "VOPC", 256
    fields = {"src0": [256 + V_SRC0, V_SRC0], "vsrc1": [V_SRC1]}
    lit = True

    def encode(self, op, f):
        return ((0x3E << 25) | (op << 17) | (f["vsrc1"] << 9) | f["src0"],)

    def printed_index(self, name, val):
        if name == "src0":
            return _src9(val)
        return ("v", val)


class VOP3(Family):
    name, nops, size = "VOP3", 0x380, 8   # 0x380.. is the VOP3P prefix (110100111)
    fields = {"vdst": [V_DST], "sdst": [0, S_SDST],
              "src0": [256 + V_SRC0, V_SRC0, 0], "src1": [256 + V_SRC1, V_SRC1, 0],
              "src2": [256 + V_SRC2, V_SRC2, 0]}

    def encode(self, op, f):
        return ((0x34 << 26) | (op << 16) | (f["sdst"] << 8) | f["vdst"],
                f["src0"] | (f["src1"] << 9) | (f["src2"] << 18))

    def token_field(self, tok, f):
        r = reg_of(tok)
        if r is None:
            return None
        file, idx, n = r
        if idx == f["vdst"] and file in "vsa":
            return "vdst", file, n
        if f["sdst"] and file == "s" and idx == f["sdst"]:
            return "sdst", file, n
        for s in ("src0", "src1", "src2"):
            if f[s] and _same(_src9(f[s]), file, idx):
                return s, file, n
        return None


class VOP3P(Family):
    name, nops, size = "VOP3P", 128, 8
    # op_sel_hi 7 first (the packed-math default); 3 clears w0 bit 14, which MAI opcodes read as
    # abid bit 3: LLVM 22 rejects any abid on the gfx950 f8f6f4 MFMAs.  vdst 0: v_mfma_ld_scale_b32
    # has no destination and LLVM 22 rejects the word unless the field is 0
    fields = {"vdst": [V_DST, 0], "src0": [256 + V_SRC0, V_SRC0, 0],
              "src1": [256 + V_SRC1, V_SRC1, 0], "src2": [256 + V_SRC2, V_SRC2, 0], "op_sel_hi": [7, 3]}

    def encode(self, op, f):
        hi = f.get("op_sel_hi", 7)
        return ((0x1A7 << 23) | (op << 16) | ((hi >> 2) & 1) << 14 | f["vdst"],
                f["src0"] | (f["src1"] << 9) | (f["src2"] << 18) | ((hi & 3) << 27))

    def token_field(self, tok, f):
        r = reg_of(tok)
        if r is None:
            return None
        file, idx, n = r
        if idx == f["vdst"] and file in "va":
            return "vdst", file, n
        for s in ("src0", "src1", "src2"):
            if f[s]:
                ff, ii = _src9(f[s])
                if ii == idx and (ff == file or (ff == "v" and file == "a")):
                    return s, file, n
        return None


# -- memory --------------------------------------------------------------------------------

class DS(Family):
    name, nops, size = "DS", 256, 8
    fields = {"vdst": [V_DST, 0], "addr": [V_SRC0, 0], "data0": [V_SRC1, 0],
              "data1": [V_SRC2, 0], "gds": [0, 1]}

    def encode(self, op, f):
        return ((0x36 << 26) | (op << 17) | (f.get("gds", 0) << 16),
                f["addr"] | (f["data0"] << 8) | (f["data1"] << 16) | (f["vdst"] << 24))

    def printed_index(self, name, val):
        return "v", val


class MUBUF(Family):
    name, nops, size = "MUBUF", 128, 8
    fields = {"vdata": [V_DST, 0], "vaddr": [V_SRC0, 0], "srsrc": [V_SRC1, 0],
              "soffset": [S_SDST, 0]}

    def encode(self, op, f):
        return ((0x38 << 26) | (op << 18) | ((1 << 12) if f["vaddr"] else 0),
                f["vaddr"] | (f["vdata"] << 8) | ((f["srsrc"] >> 2) << 16) | (f["soffset"] << 24))

    def token_field(self, tok, f):
        r = reg_of(tok)
        if r is None:
            return None
        file, idx, n = r
        if file == "v" and idx == f["vdata"] and f["vdata"]:
            return "vdata", file, n
        if file == "v" and idx == f["vaddr"] and f["vaddr"]:
            return "vaddr", file, n
        if file == "s" and idx == f["srsrc"] and f["srsrc"]:
            return "srsrc", file, n
        if file == "s" and idx == f["soffset"] and f["soffset"]:
            return "soffset", file, n
        return None


class MTBUF(MUBUF):
    name, nops = "MTBUF", 16

    def encode(self, op, f):
        dfmt = f.get("dfmt", 4)
        nfmt = f.get("nfmt", 0)
        return ((0x3A << 26) | (nfmt << 23) | (dfmt << 19) | (op << 15) | (1 << 12),
                f["vaddr"] | (f["vdata"] << 8) | ((f.get("srsrc", V_SRC1) >> 2) << 16)
                | (f.get("soffset", S_SDST) << 24))


class FLAT(Family):
    name, nops, size = "FLAT", 128, 8
    seg = 0
    saddr = 0          # FLAT proper has no saddr: the field must be 0
    fields = {"vdst": [V_DST, 0], "addr": [V_SRC0], "data": [V_SRC1, 0]}

    def encode(self, op, f):
        sve = (1 << 13) if self.seg == 1 else 0
        return ((0x37 << 26) | (op << 18) | (self.seg << 14) | sve,
                f["addr"] | (f["data"] << 8) | (f.get("saddr", self.saddr) << 16)
                | (f["vdst"] << 24))

    def printed_index(self, name, val):
        return "v", val


class GLOBAL(FLAT):
    name, seg, saddr = "GLOBAL", 2, 0x7F


class SCRATCH(FLAT):
    name, seg, saddr = "SCRATCH", 1, 0x7F


FAMILIES = [SOP2(), SOP1(), SOPC(), SOPK(), SOPP(), SMEM(), VOP1(), VOP2(), VOPC(), VOP3(),
            VOP3P(), DS(), MUBUF(), MTBUF(), FLAT(), GLOBAL(), SCRATCH()]
FAMILY_BY_NAME = {f.name: f for f in FAMILIES}


# ============================================================================ probing

def _combos(fam: Family):
    names = list(fam.fields)
    out = [{}]
    for n in names:
        out = [dict(c, **{n: v}) for c in out for v in fam.fields[n]]
    return out


def _score(fam, f, text):
    """How well a probe's text is explained: (#attributed register tokens, -#unexplained)."""
    mn, ops, mods = split_text(text)
    hits, miss = 0, 0
    for t in ops:
        if reg_of(t) is None:
            continue
        if fam.token_field(t, f):
            hits += 1
        else:
            miss += 1
    return hits - 3 * miss


def _template(fam, f, text):
    mn, ops, mods = split_text(text)
    tpl = []
    for t in ops:
        tf = fam.token_field(t, f)
        if tf:
            tpl.append(list(tf))
        elif fam.name in ("GLOBAL", "SCRATCH") and reg_of(t) and reg_of(t)[0] == "s":
            tpl.append(["saddr", "s", 2 if fam.name == "GLOBAL" else 1])
        elif reg_of(t) is not None:
            tpl.append(["?", t, 0])
        elif t == f"0x{LIT:x}":
            tpl.append(["k", "", 0])    # the trailing literal (madmk K, s_setreg_imm32 value)
        elif fam.name in ("SOPP", "SOPK") and t not in ("vcc", "exec"):
            tpl.append(["simm16", "", 0])
        elif fam.name == "SOPC" and t.startswith("gpr_idx("):
            tpl.append(["gpr_idx", "", 0])   # s_set_gpr_idx_on: ssrc1 is a mode mask
        elif fam.name == "SMEM" and t == "0x2c":
            tpl.append(["offset", "", 0])
        elif fam.name == "SMEM" and t.isdigit():
            tpl.append(["sdata_imm", "", 0])   # s_atc_probe: the sdata field is a 7-bit value
        elif fam.name in ("GLOBAL", "SCRATCH") and t == "off":
            tpl.append(["saddr", "s", 2 if fam.name == "GLOBAL" else 1])
        elif fam.name in ("GLOBAL", "SCRATCH") and reg_of(t) and reg_of(t)[0] == "s":
            tpl.append(["saddr", "s", 2 if fam.name == "GLOBAL" else 1])
        else:
            tpl.append(["=", t, 0])     # fixed token (vcc, off, an immediate ...)
    return mn, tpl, mods


def probe_family(fam: Family, mcpu="gfx942", ops=None) -> dict:
    """Return {opcode: entry} for one family."""
    ops = range(fam.nops) if ops is None else ops
    combos = _combos(fam)
    probes, meta = [], []
    for op in ops:
        for ci, c in enumerate(combos):
            probes.append(fam.probe(op, c))
            meta.append((op, ci))
    texts = disassemble(probes, mcpu)
    best: dict = {}
    for (op, ci), t in zip(meta, texts):
        if t is None or "Invalid" in t:
            continue
        c = combos[ci]
        sc = _score(fam, c, t)
        nset = sum(1 for v in c.values() if v)
        key = (sc, -nset)
        if op not in best or key > best[op][0]:
            best[op] = (key, c, t)
    table = {}
    for op, (_, c, t) in sorted(best.items()):
        mn, tpl, mods = _template(fam, c, t)
        tpl = [x for x in tpl if not (x[0] == "=" and x[1] == "gds")]
        e = {"mn": mn, "ops": tpl}
        if mn.endswith(("_e32", "_e64")):
            e["name"] = mn[:-4]
        table[op] = {"entry": e, "probe": c, "text": t, "mods": mods}
    return table


# ---------------------------------------------------------------------------- per-family extras

def _ctype_probe(fam, table, srcs, mcpu):
    """For each opcode and 9-bit source field, find how it prints inline constants/literals."""
    probes, meta = [], []
    for op, rec in table.items():
        c = rec["probe"]
        present = {t[0] for t in rec["entry"]["ops"]}
        for s in srcs:
            if s not in present:
                continue
            for code, lit in ((242, LIT), (248, LIT), (255, LIT), (255, 0x3C00),
                              (255, 0x3F800000)):
                if code == 255 and not fam.lit:
                    continue
                f = dict(c, **{s: code})
                probes.append(fam.probe(op, f, lit))
                meta.append((op, s, code if code != 255 else lit))
    texts = disassemble(probes, mcpu)
    seen: dict = {}
    for (op, s, code), t in zip(meta, texts):
        if t is None:
            continue
        mn, ops, mods = split_text(t)
        idx = [x[0] for x in table[op]["entry"]["ops"]].index(s)
        if idx >= len(ops):
            continue
        tok = ops[idx].strip("-|")
        seen.setdefault((op, s), {})[("lit", code) if code > 255 else code] = tok
    for (op, s), tx in seen.items():
        ct = classify_const(tx)
        if ct is None:
            print(f"  warning: {fam.name} op {op} {s}: no ctype prints {tx}", file=sys.stderr)
            continue
        if ct != "b32":
            table[op]["entry"].setdefault("ct", {})[s] = ct


def _imm_formats(fam, table, mcpu, tables):
    """SOPP/SOPK: find the formatter of simm16 that matches LLVM for many values."""
    values = [0, 1, 3, 7, 15, 63, 64, 65, 0x70, 0xF70, 0x3F7F, 0xC07F, 0x1234, 0x8000, 0xFFF0,
              0xFFFF, 0x0F7F, 0x4F0F, 0x07FF, 0xF800, 0x00C1, 0x0803]
    probes, meta = [], []
    for op, rec in table.items():
        for v in values:
            f = dict(rec["probe"], simm16=v)
            probes.append(fam.probe(op, f))
            meta.append((op, v))
    texts = disassemble(probes, mcpu)
    got: dict = {}
    for (op, v), t in zip(meta, texts):
        got.setdefault(op, {})[v] = t
    for op, vt in got.items():
        e = table[op]["entry"]
        mn = e["mn"]
        cands = []
        for fmt in F.IMM_FORMATS:
            ok = True
            for v, t in vt.items():
                if t is None or (fmt == "sendmsg" and v >= 1024):
                    continue    # the sendmsg table covers 0..1023 (see _sendmsg_table)
                want = _render_simm(fam, e, fmt, v, tables)
                if want != t:
                    ok = False
                    break
            if ok:
                cands.append(fmt)
        if not cands:
            print(f"  warning: {fam.name} {mn}: no imm format matches {vt}", file=sys.stderr)
            e["imm"] = "dec"
        else:
            e["imm"] = cands[0]
        e["imm_valid"] = sorted(v for v, t in vt.items() if t is not None) if None in vt.values() else "all"


def _render_simm(fam, e, fmt, v, tables):
    s = F.fmt_imm(fmt, v, tables)
    if fam.name == "SOPP":
        return e["mn"] + (" " + s if s else "")
    ops = []
    for fld, file, n in e["ops"]:
        if fld == "sdst":
            ops.append(F.scalar_text(8, n))
        elif fld == "simm16":
            if s:
                ops.append(s)
        elif fld == "k":
            ops.append(f"0x{LIT:x}")
        else:
            ops.append(file)
    return e["mn"] + (" " + ", ".join(ops) if ops else "")


def _hwreg_names(mcpu):
    probes = [((0xB << 28) | (17 << 23) | (8 << 16) | (31 << 11) | i, LIT) for i in range(64)]
    names = {}
    for i, t in enumerate(disassemble(probes, mcpu)):
        if t:
            m = re.search(r"hwreg\(([A-Z_0-9]+)\)", t)
            if m and m.group(1) != str(i):
                names[i] = m.group(1)
    return names


def _sendmsg_table(mcpu):
    # values past 1023 print as decimal except a few aliases nobody emits; keep the table small
    probes = [((0x17F << 23) | (16 << 16) | v,) for v in range(1024)]
    tab = {}
    for v, t in enumerate(disassemble(probes, mcpu)):
        if t:
            s = t.split(" ", 1)[1] if " " in t else ""
            if s != str(v):
                tab[v] = s
    return tab


def _mtbuf_formats(mcpu):
    probes, meta = [], []
    fam = FAMILY_BY_NAME["MTBUF"]
    for d in range(16):
        for n in range(8):
            probes.append(fam.encode(0, {"vdata": V_DST, "vaddr": V_SRC0, "dfmt": d, "nfmt": n}))
            meta.append((d, n))
    tab = {}
    for (d, n), t in zip(meta, disassemble(probes, mcpu)):
        if t is None:
            continue
        m = re.search(r"(format:\S+)", t)
        tab[d * 8 + n] = m.group(1) if m else ""
    return tab


def _dpp_sdwa(fam, table, mcpu):
    """Which VOP1/VOP2/VOPC opcodes have DPP and SDWA forms (as LLVM decodes them)."""
    probes, meta = [], []
    dpp = (0xF << 28) | (0xF << 24) | (0xE4 << 8) | V_SRC0     # quad_perm:[0,1,2,3], all masks
    for op, rec in table.items():
        c = dict(rec["probe"])
        # SDWA twice: src0_sel DWORD, then WORD_0 with src1_sel 0 (what v_cvt_pk_f32_fp8 accepts)
        for kind, code, ext in (("dpp", 0xFA, dpp), ("dpp_mods", 0xFA, dpp | (3 << 20)),
                                ("sdwa", 0xF9, 0x06060600 | V_SRC0), ("sdwa", 0xF9, 0x00040600 | V_SRC0)):
            f = dict(c, src0=code)
            probes.append(fam.encode(op, f) + (ext,))
            meta.append((op, kind))
    mods = set()
    for (op, kind), t in zip(meta, disassemble(probes, mcpu)):
        if t and "Invalid" not in t and "/*" not in t:
            mn = split_text(t)[0]
            if kind == "dpp_mods":
                if "-" in t or "|" in t:
                    mods.add(op)
            elif mn.endswith("_" + kind):
                table[op]["entry"][kind] = True
                if kind == "sdwa" and fam.name != "VOPC" and "dst_sel:" not in t:
                    # a 64-bit result (v_cvt_pk_f32_fp8): no dst_sel/dst_unused in LLVM's SDWA form
                    table[op]["entry"]["sdwa_nodst"] = True
    for op, rec in table.items():
        if rec["entry"].get("dpp") and op not in mods:
            rec["entry"]["dpp_nomods"] = True    # integer op: LLVM ignores DPP neg/abs bits


def _ds_offsets(table, mcpu):
    """DS opcodes that take two 8-bit offsets (offset0:/offset1:) instead of one 16-bit offset."""
    fam = FAMILY_BY_NAME["DS"]
    ops = list(table)
    probes = []
    for op in ops:
        w0, w1 = fam.encode(op, table[op]["probe"])
        probes.append((w0 | 0x0201, w1))
    for op, t in zip(ops, disassemble(probes, mcpu)):
        if t and "offset0:" in t:
            table[op]["entry"]["off2"] = True
    for op in ops:                      # GWS ops need (and print) gds; others ignore the bit
        if " gds" in table[op]["text"]:
            table[op]["entry"]["gds"] = True


def _smem_glc(table, mcpu):
    """SMEM opcodes that print the glc bit (cache-control ops and s_memtime ignore it)."""
    fam = FAMILY_BY_NAME["SMEM"]
    ops = list(table)
    probes = []
    for op in ops:
        w0, w1 = fam.encode(op, table[op]["probe"])
        probes.append((w0 | (1 << 16), w1))
    for op, t in zip(ops, disassemble(probes, mcpu)):
        if not (t and " glc" in t):
            table[op]["entry"]["noglc"] = True


def _vop3_opsel(table, mcpu):
    fam = FAMILY_BY_NAME["VOP3"]
    probes, meta = [], []
    for op, rec in table.items():
        vop3b = bool(rec["probe"]["sdst"])     # bits 14:8 hold sdst: no op_sel/abs there
        for bit in range(0 if vop3b else 4):
            w0, w1 = fam.encode(op, rec["probe"])
            probes.append((w0 | (1 << (11 + bit)), w1))
            meta.append((op, bit))
        w0, w1 = fam.encode(op, rec["probe"])
        for i in range(3):
            if vop3b:
                probes.append((w0, w1 | (1 << (29 + i))))
                meta.append((op, ("neg", i)))
                continue
            probes.append((w0, w1 | (1 << (29 + i))))      # neg on source i
            meta.append((op, ("neg", i)))
            probes.append((w0 | (1 << (8 + i)), w1))        # abs on source i
            meta.append((op, ("abs", i)))
    negm: dict = {}
    absm: dict = {}
    for (op, bit), t in zip(meta, disassemble(probes, mcpu)):
        if isinstance(bit, tuple):
            kind, i = bit
            if t is None:
                continue
            ops = split_text(t)[1]
            srcs = [k for k, x in enumerate(table[op]["entry"]["ops"]) if x[0] == f"src{i}"]
            if not srcs or srcs[0] >= len(ops):
                continue
            tok = ops[srcs[0]]
            if kind == "neg" and (tok.startswith("-") or tok.startswith("neg(")):
                negm[op] = negm.get(op, 0) | (1 << i)
            if kind == "abs" and "|" in tok:
                absm[op] = absm.get(op, 0) | (1 << i)
            continue
        if t and "op_sel:[" in t:
            lst = re.search(r"op_sel:\[([0-9,]+)\]", t).group(1).split(",")
            table[op]["entry"]["opsel"] = len(lst)
    for op, rec in table.items():
        nsrc = sum(1 for x in rec["entry"]["ops"] if x[0].startswith("src"))
        full = (1 << nsrc) - 1
        # sources whose neg/abs bits LLVM prints (integer operands ignore them)
        if negm.get(op, 0) != full:
            rec["entry"]["negm"] = negm.get(op, 0)
        if absm.get(op, 0) != full and not rec["probe"]["sdst"]:
            rec["entry"]["absm"] = absm.get(op, 0)


def _vop3p_kinds(table, mcpu):
    """VOP3P: number of op_sel/neg elements LLVM prints; MAI (MFMA) opcodes."""
    for rec in table.values():
        e = rec["entry"]
        if ("mfma" in e["mn"] or "smfmac" in e["mn"]) and "ld_scale" not in e["mn"]:
            e["mai"] = True             # v_mfma_ld_scale_b32 is a plain VOP3P (two sources)
        else:
            e["nsrc"] = sum(1 for t in e["ops"] if t[0] in ("src0", "src1", "src2"))


def _mfma_scale(vop3p: dict, mcpu: str) -> dict:
    """VOP3PX2 (gfx950): ``v_mfma_ld_scale_b32 scale0, scale1`` followed by an MFMA is one
    ``v_mfma_scale_*`` instruction (16 bytes).  Probe every MAI opcode behind a ld_scale word pair
    (scale sources v48, v56) and keep those LLVM prints as one scaled MFMA: {opcode: entry}, keyed
    by the MFMA word's opcode, operands the MFMA's then ``scale0``/``scale1``."""
    fam = FAMILY_BY_NAME["VOP3P"]
    ld = ((0x1A7 << 23) | (0x2C << 16), (256 + 48) | ((256 + 56) << 9))
    ops = [op for op, rec in vop3p.items() if rec["entry"].get("mai")]
    probes = []
    for op in ops:
        w = fam.probe(op, vop3p[op]["probe"])
        # the MFMA word of the pair has abid (w0 bits 11-14) = 1: LLVM's assembler sets it, its
        # disassembler pairs the two words only then
        probes.append(ld + ((w[0] & ~(0xF << 11)) | (1 << 11),) + w[1:])
    texts = disassemble(probes, mcpu)
    out = {}
    for op, t in zip(ops, texts):
        if t is None or not t.startswith("v_mfma_scale_"):
            continue
        c = vop3p[op]["probe"]
        mn, tpl, _ = _template(fam, c, t)
        tpl = [x for x in tpl if x[0] != "?"]
        tpl += [["scale0", "v", 1], ["scale1", "v", 1]]
        out[op] = {"mn": mn, "ops": tpl, "mai": True}
    return out


def _prints_lit(mcpu: str) -> bool:
    """LLVM 22 prints a literal equal to an inline constant's value as lit(0x...) (LLVM 19: the
    constant): v_add_f32 v8, <literal 1.0>, v24."""
    t = disassemble([((1 << 25) | (V_DST << 17) | (V_SRC1 << 9) | 255, 0x3F800000)], mcpu)[0]
    return bool(t and "lit(0x3f800000)" in t)


def _keep_gfx942_files(fams: dict, g942: dict) -> None:
    """An SGPR-only source (v_cndmask_b32_e64's lane mask, v_addc_co_u32_e64's carry-in) prints its
    VGPR probe as v[32:33] in LLVM 22 without LLVM 19's /*Invalid register*/ flag, so the probe may
    record it as a VGPR: where a gfx942 entry of the same mnemonic differs only in the register file
    of a source operand, take gfx942's."""
    for fam, ops in fams.items():
        for op, e in ops.items():
            o = g942.get("families", {}).get(fam, {}).get(op)
            if o is None or o["mn"] != e["mn"] or len(o["ops"]) != len(e["ops"]) or o["ops"] == e["ops"]:
                continue
            if all(a[0] == b[0] and a[2] == b[2] and (a[1] == b[1] or a[0].startswith("src"))
                   for a, b in zip(o["ops"], e["ops"])):
                e["ops"] = [list(x) for x in o["ops"]]


def probe_target(families=None, mcpu="gfx942", g942: dict | None = None) -> dict:
    """The opcode table of ``mcpu`` from its disassembler (``mc_for(mcpu)``); ``g942`` (the gfx942
    table) lets the gfx950 one keep register files LLVM 22 no longer checks (_keep_gfx942_files)."""
    tables = {"hwreg": _hwreg_names(mcpu), "sendmsg": _sendmsg_table(mcpu),
              "mtbuf_format": _mtbuf_formats(mcpu)}
    out: dict = {"target": mcpu, "generator": "tools/gen_opcodes.py",
                 "llvm": _llvm_version(mc_for(mcpu)), "tables": {k: {str(a): b for a, b in v.items()}
                                                                 for k, v in tables.items()}}
    if _prints_lit(mcpu):
        out["lit_text"] = True
    out["families"] = {}
    for fam in FAMILIES:
        if families and fam.name not in families:
            continue
        print(f"probing {fam.name} ...", file=sys.stderr)
        tab = probe_family(fam, mcpu)
        if fam.name in ("VOP1", "VOP2", "VOPC", "SOP1", "SOP2", "SOPC"):
            _ctype_probe(fam, tab, ("src0", "ssrc0", "ssrc1"), mcpu)
        if fam.name in ("VOP3", "VOP3P"):
            _ctype_probe(fam, tab, ("src0", "src1", "src2"), mcpu)
        if fam.name in ("SOPP", "SOPK"):
            _imm_formats(fam, tab, mcpu, tables)
        if fam.name in ("VOP1", "VOP2", "VOPC"):
            _dpp_sdwa(fam, tab, mcpu)
        if fam.name == "VOP3":
            _vop3_opsel(tab, mcpu)
        if fam.name == "DS":
            _ds_offsets(tab, mcpu)
        if fam.name == "SMEM":
            _smem_glc(tab, mcpu)
        if fam.name == "VOP3P":
            _vop3p_kinds(tab, mcpu)
        out["families"][fam.name] = {str(op): rec["entry"] for op, rec in tab.items()}
        print(f"  {fam.name}: {len(tab)} opcodes", file=sys.stderr)
        if fam.name == "VOP3P":
            x2 = _mfma_scale(tab, mcpu)
            if x2:
                out["families"]["VOP3PX2"] = {str(op): e for op, e in sorted(x2.items())}
                print(f"  VOP3PX2: {len(x2)} opcodes", file=sys.stderr)
    if g942 is not None and mcpu != "gfx942":
        _keep_gfx942_files(out["families"], g942)
    return out


probe_target_gfx942 = probe_target


def _llvm_version(tool: str = LLVM_MC):
    try:
        r = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
        m = re.search(r"LLVM version (\S+)", r.stdout)
        return m.group(1) if m else "?"
    except OSError:
        return "?"


# ============================================================================ cross-check words

def fuzz_words(family: str, op: int, rng) -> tuple[int, ...]:
    """A random machine word of ``family``/``op`` (most fields random), for decoder cross-checks
    against LLVM.  Many are invalid; callers keep the ones llvm-mc accepts."""
    r = rng.getrandbits
    if family == "SOP2":
        return ((2 << 30) | (op << 23) | r(23),)
    if family == "SOP1":
        return ((0x17D << 23) | (r(7) << 16) | (op << 8) | r(8),)
    if family == "SOPC":
        return ((0x17E << 23) | (op << 16) | r(16),)
    if family == "SOPK":
        return ((0xB << 28) | (op << 23) | r(23),)
    if family == "SOPP":
        return ((0x17F << 23) | (op << 16) | rng.choice([r(16), r(4), r(10)]),)
    if family == "SMEM":
        return ((0x30 << 26) | (op << 18) | r(18), r(32))
    src = rng.choice([r(9), 0xFA, 0xF9, 255, 128 + r(7), 256 + r(8), 240 + r(3)])
    if family == "VOP1":
        return ((0x3F << 25) | (r(8) << 17) | (op << 9) | src,)
    if family == "VOP2":
        return ((op << 25) | (r(16) << 9) | src,)
    if family == "VOPC":
        return ((0x3E << 25) | (op << 17) | (r(8) << 9) | src,)
    if family == "VOP3":
        w0 = (0x34 << 26) | (op << 16) | (r(16) if rng.random() < 0.3 else r(8) | (r(1) << 15))
        w1 = r(32) if rng.random() < 0.5 else r(27) | (r(1) << (27 + rng.randrange(5)))
        return (w0, _no_dpp_sdwa_src(w1))
    if family == "VOP3P":
        return ((0x1A7 << 23) | (op << 16) | r(16), _no_dpp_sdwa_src(r(32)))
    if family == "DS":
        w0 = (0x36 << 26) | (op << 17) | r(16) | (r(1) << 25)
        w1 = r(32) if rng.random() < 0.3 else r(8) | (r(8) << 24) | (rng.choice([0, r(8)]) << 8)
        return (w0, w1)
    if family == "MUBUF":
        return ((0x38 << 26) | (op << 18) | r(18), r(32))
    if family == "MTBUF":
        return ((0x3A << 26) | (op << 15) | r(15) | (r(7) << 19), r(32))
    seg = {"FLAT": 0, "SCRATCH": 1, "GLOBAL": 2}[family]
    w0 = (0x37 << 26) | (op << 18) | (seg << 14) | r(14) | (r(2) << 16) | (r(1) << 25)
    w1 = r(32)
    if family == "FLAT":
        w1 &= ~(0x7F << 16)
    elif rng.random() < 0.5:
        w1 |= 0x7F << 16
    return (w0, w1)


def _no_dpp_sdwa_src(w1: int) -> int:
    """llvm-mc-19 crashes on a VOP3 source code 0xF9/0xFA (SDWA/DPP markers): avoid them."""
    for lo in (0, 9, 18):
        if (w1 >> lo) & 0x1FF in (0xF9, 0xFA):
            w1 ^= 0x100 << lo
    return w1


def fuzz_extension(words: tuple[int, ...], rng) -> tuple[int, ...]:
    """Append a random trailing dword (literal or DPP/SDWA word).  SDWA words get selectors
    in range: llvm-mc-19 crashes on SDWA sel 7 (it would only cost time: the batch is bisected)."""
    r = rng.getrandbits
    if len(words) == 1 and (words[0] & 0x1FF) == 0xF9 and (words[0] >> 31 == 0):
        ext = r(32)
        for lo in (8, 16, 24):
            if (ext >> lo) & 7 == 7:
                ext &= ~(1 << lo)
        return words + (ext,)
    return words + (rng.choice([0x12345678, 0xFFFFFFF0, 0x3F800000, 0x3C00, 0x40490FDB, r(32)]),)


def canonical_words(family: str, op: int) -> list[tuple[int, ...]]:
    """The probe words of an opcode (aligned registers v8/v16/v24/v32, s40): they assemble back."""
    fam = FAMILY_BY_NAME[family]
    return [fam.probe(op, c) for c in _combos(fam)]


# ============================================================================ main

def write_table(tab: dict, path: str):
    with open(path, "w") as f:
        json.dump(tab, f, indent=None, separators=(",", ":"), sort_keys=False)
        f.write("\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="all", choices=["gfx942", "gfx950", "all"])
    ap.add_argument("--families", default="")
    ap.add_argument("--out", default=os.path.join(ROOT, "isagen", "isa", "data"))
    args = ap.parse_args(argv)
    fams = [x for x in args.families.split(",") if x]
    targets = ["gfx942", "gfx950"] if args.target == "all" else [args.target]
    for t in targets:
        tool = mc_for(t)
        if shutil.which(tool) is None:
            print(f"error: {tool} not found (apt-get install {APT_FOR.get(tool, 'llvm')})", file=sys.stderr)
            return 2
    g942 = None
    if "gfx942" in targets:
        g942 = probe_target(fams, "gfx942")
        write_table(g942, os.path.join(args.out, "opcodes.gfx942.json"))
    if "gfx950" in targets:
        if g942 is None:
            with open(os.path.join(args.out, "opcodes.gfx942.json")) as f:
                g942 = json.load(f)
        write_table(probe_target(fams, "gfx950", g942), os.path.join(args.out, "opcodes.gfx950.json"))
    return 0



# ============================================================================ zig clang (tests re-assemble gfx950)

ZIG = (sys.executable, "-m", "ziglang")
ZIG_CPU = {"gfx950": "gfx950+sramecc", "gfx942": "gfx942+sramecc"}


def zig_available() -> bool:
    try:
        r = subprocess.run([*ZIG, "version"], capture_output=True, text=True, check=False)
    except OSError:
        return False
    return r.returncode == 0


def zig_assemble(lines: list[str], mcpu: str = "gfx950") -> list[tuple[bytes | None, str]]:
    """Assemble each line on its own with zig's clang 22; [(bytes or None, error text)].

    Lines are separated by sentinel pairs (as in :func:`disassemble`); lines the assembler
    rejects are reported with its message and left out of a second assembly."""
    from isagen.objects.codeobject import read_code_object
    out: list = [(None, "")] * len(lines)
    for c0 in range(0, len(lines), 20000):
        chunk = list(enumerate(lines[c0:c0 + 20000]))
        errors: dict[int, str] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for _attempt in range(4):
                src, where = [".text"], {}
                for i, ln in chunk:
                    if i in errors:
                        continue
                    src += [f"s_movk_i32 s1, 0x{i:x}", f"s_movk_i32 s1, 0x{i ^ 0xA5A5:x}", ln]
                    where[len(src)] = i          # 1-based line number of the instruction
                s_path, o_path = os.path.join(tmp, "z.s"), os.path.join(tmp, "z.o")
                with open(s_path, "w") as f:
                    f.write("\n".join(src) + "\n")
                r = subprocess.run([*ZIG, "cc", "-target", "amdgcn-amdhsa-none",
                                    f"-mcpu={ZIG_CPU.get(mcpu, mcpu)}", "-c", s_path, "-o", o_path],
                                   capture_output=True, text=True, check=False)
                new = {}
                for m in re.finditer(r"z\.s:(\d+):(\d+): error: (.*)", r.stderr):
                    ln = int(m.group(1))
                    if ln in where and where[ln] not in errors and where[ln] not in new:
                        new[where[ln]] = f"{m.group(2)}:{m.group(3)}"
                if r.returncode == 0:
                    break
                if not new:
                    raise RuntimeError("zig clang failed: " + r.stderr[:500])
                errors.update(new)
            text = read_code_object(open(o_path, "rb").read(), "z.o").text
        words = struct.unpack(f"<{len(text) // 4}I", text)
        marks = [k for k in range(len(words) - 1)
                 if words[k] >> 16 == SENTINEL >> 16 and words[k + 1] >> 16 == SENTINEL >> 16
                 and (words[k] ^ words[k + 1]) & 0xFFFF == 0xA5A5]
        for n, k in enumerate(marks):
            i = words[k] & 0xFFFF
            end = marks[n + 1] if n + 1 < len(marks) else len(words)
            out[c0 + i] = (struct.pack(f"<{end - k - 2}I", *words[k + 2:end]), "")
        for i, err in errors.items():
            out[c0 + i] = (None, err)
    return out


if __name__ == "__main__":
    sys.exit(main())
