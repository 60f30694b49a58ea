"""Dump the AMD Matrix Instruction Calculator's CDNA3 MFMA register layouts to JSON.

The calculator (github.com/ROCm/amd_matrix_instruction_calculator, one file ``matrix_calculator.py``,
needs ``pip install tabulate``) is AMD's published description of where every A/B/C/D matrix element
of a matrix instruction lives (register, bit range, lane), including the CBSZ/ABID (A-block
broadcast) and BLGP (B lane pattern) modifiers.  It is not a package, so the tests cannot run it;
this script runs it once and writes ``tests/data/mfma_layouts_cdna3.json``, which the tests use as
independent reference data for ``runtime/emu/mfma.py``.

    python tools/mfma_layouts_from_calculator.py --calculator /path/to/matrix_calculator.py \
        [--commit 2ef9189] [-o tests/data/mfma_layouts_cdna3.json]

JSON layout (per instruction, CDNA3 = gfx942; sparse SMFMAC instructions are left out):
    "a": flat list, for every (block, i, k) in row-major order, of [reg, bit_lo, lane]: A[i][k] of
         block ``block`` is bits [bit_lo + width - 1 : bit_lo] of VGPR ``reg`` (relative to the
         operand's first register; for 64-bit elements the register pair's low register) in ``lane``.
    "b": the same for every (block, k, j) of B.
    "d": for every (block, i, j) of C/D, [reg, lane] (reg = low register of a pair for f64).
    "a_mods": {"cbsz,abid": a-list} - where the A element that block ``block`` multiplies comes from
         once CBSZ/ABID broadcast another block's A (only for instructions that support them).
    "b_mods": {"blgp": b-list} - the same for B under each BLGP lane pattern 1..7.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_REG = re.compile(r"^v(\d+)(?:\.\[(\d+):(\d+)\])?$|^v\[(\d+):(\d+)\]$")


def _parse_reg(text: str) -> tuple[int, int]:
    """'v1.[31:16]' -> (1, 16); 'v3' -> (3, 0); 'v[3:2]' (a 64-bit pair) -> (2, 0)."""
    m = _REG.match(text)
    if not m:
        raise ValueError(f"unexpected register text from the calculator: {text!r}")
    if m.group(1) is not None:
        return int(m.group(1)), int(m.group(3) or 0)
    return int(m.group(5)), 0


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("matrix_calculator", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["matrix_calculator"] = mod
    spec.loader.exec_module(mod)
    return mod


def _table(calc, matrix: str, info, cbsz=0, abid=0, blgp=0) -> list[int]:
    M, N, K, B = info["m"], info["n"], info["k"], info["blocks"]
    out: list[int] = []
    if matrix == "a":
        for b in range(B):
            for i in range(M):
                for k in range(K):
                    _, reg, lanes = calc._get_reg_lanes("a", i, 0, k, b, cbsz, abid, 0, 0)
                    r, lo = _parse_reg(reg)
                    out += [r, lo, lanes[0]]
    elif matrix == "b":
        for b in range(B):
            for k in range(K):
                for j in range(N):
                    _, reg, lanes = calc._get_reg_lanes("b", 0, j, k, b, 0, 0, blgp, 0)
                    r, lo = _parse_reg(reg)
                    out += [r, lo, lanes[0]]
    else:
        for b in range(B):
            for i in range(M):
                for j in range(N):
                    _, reg, lanes = calc._get_reg_lanes("d", i, j, 0, b, 0, 0, 0, 0)
                    r, _ = _parse_reg(reg)
                    out += [r, lanes[0]]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calculator", required=True, type=Path, help="path to matrix_calculator.py")
    ap.add_argument("--commit", default="", help="the calculator repository commit it came from")
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "tests/data/mfma_layouts_cdna3.json")
    args = ap.parse_args(argv)

    mc = _load(args.calculator)
    version = getattr(mc, "VERSION", "unknown")
    insts = mc.dict_insts["cdna3"]
    result = {
        "source": "AMD Matrix Instruction Calculator (github.com/ROCm/amd_matrix_instruction_calculator)",
        "calculator_version": version,
        "calculator_commit": args.commit,
        "arch": "CDNA3",
        "generated_by": "tools/mfma_layouts_from_calculator.py",
        "instructions": {},
    }
    for name, info in sorted(insts.items()):
        if info["sparse"]:
            continue
        calc = mc.InstCalcGfx9(name, info, 64)
        entry = {key: info[key] for key in ("m", "n", "k", "blocks", "in_type", "in_type_src1",
                                            "out_type", "cycles", "cbsz_abid", "blgp")}
        entry["a"] = _table(calc, "a", info)
        entry["b"] = _table(calc, "b", info)
        entry["d"] = _table(calc, "d", info)
        if info["cbsz_abid"] and info["blocks"] > 1:
            max_cbsz = min(4, info["blocks"].bit_length() - 1)
            mods = {}
            for cbsz in range(1, max_cbsz + 1):
                for abid in sorted({0, (1 << cbsz) - 1}):
                    mods[f"{cbsz},{abid}"] = _table(calc, "a", info, cbsz=cbsz, abid=abid)
            entry["a_mods"] = mods
        if info["blgp"] and info["in_type"] != "fp64":      # for f64, BLGP is the negate field
            entry["b_mods"] = {str(g): _table(calc, "b", info, blgp=g) for g in range(1, 8)}
        result["instructions"][name] = entry

    args.output.parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "w") as f:
        f.write("{\n")
        head = [k for k in result if k != "instructions"]
        for k in head:
            f.write(f"  {json.dumps(k)}: {json.dumps(result[k])},\n")
        f.write('  "instructions": {\n')
        names = list(result["instructions"])
        for n_i, name in enumerate(names):
            entry = result["instructions"][name]
            f.write(f"    {json.dumps(name)}: {json.dumps(entry, separators=(',', ':'))}")
            f.write(",\n" if n_i + 1 < len(names) else "\n")
        f.write("  }\n}\n")
    print(f"wrote {args.output} ({len(names)} instructions, calculator {version} {args.commit})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
