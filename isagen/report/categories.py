"""Instruction-mix classes, the same for isagen's instructions and decoded machine code.

The class is the execution unit of isagen's ISA table (``salu smem valu trans mfma ds vmem flat``),
with the SOPP control instructions split by what they do (``branch wait barrier nop`` and ``sopp``
for the rest: s_endpgm, s_setprio, s_sleep...).  Decoded instructions are looked up in the same ISA
table by name; names the table does not have fall back on their encoding family.
"""

from __future__ import annotations

import re

#: display order of the classes
ORDER = ("mfma", "valu", "trans", "salu", "smem", "vmem", "flat", "ds", "wait", "barrier", "branch",
         "nop", "sopp")

_TRANS = re.compile(r"^v_(exp|log|rcp|rsq|sqrt|sin|cos)(_legacy|_iflag)?_f(16|32|64)$")
_FAMILY_UNIT = {"SOP1": "salu", "SOP2": "salu", "SOPK": "salu", "SOPC": "salu", "SOPP": "sopp",
                "SMEM": "smem", "DS": "ds", "MUBUF": "vmem", "MTBUF": "vmem", "GLOBAL": "vmem",
                "SCRATCH": "vmem", "FLAT": "flat"}


def category(name: str, unit: str) -> str:
    """Mix class of an instruction called ``name`` executing on ``unit``."""
    if unit == "sopp":
        if name.startswith("s_waitcnt"):
            return "wait"
        if name == "s_barrier":
            return "barrier"
        if name == "s_nop":
            return "nop"
        if name.startswith(("s_branch", "s_cbranch")):
            return "branch"
    return unit


def decoded_unit(ins, table=None) -> str:
    """Execution unit of a decoded instruction (``isagen.isa.decoder.DecodedInstruction``)."""
    if table is not None and ins.name in table:
        return table[ins.name].unit
    if ins.mai:
        return "mfma"
    unit = _FAMILY_UNIT.get(ins.family)
    if unit:
        return unit
    return "trans" if _TRANS.match(ins.name) else "valu"


def mix(categories) -> dict[str, int]:
    """Counts per class, in display order, classes with no instruction left out."""
    counts: dict[str, int] = {}
    for c in categories:
        counts[c] = counts.get(c, 0) + 1
    ordered = {c: counts.pop(c) for c in ORDER if c in counts}
    ordered.update(sorted(counts.items()))
    return ordered
