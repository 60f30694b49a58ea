"""Representative instances of every instruction in a target's table, generated from operand kinds.

``candidates(desc)`` yields ``(label, ops, mods)`` triples: a base instance (registers of the right
class, width and alignment; the base addressing mode), then one variation per operand alternative
(SGPR, inline constant, literal, AGPR, special register, ``off``, 64-bit address...) and per modifier
value (each flag, range ends, bit lists, omod values, each DPP control, source modifiers).  Some
candidates are invalid on purpose: the encoding test checks that isagen accepts exactly the ones
LLVM accepts (up to a short list of documented, deliberate differences).
"""

from __future__ import annotations

from isagen.isa.instruction import Instruction
from isagen.isa.operands import OFF, Label, Reg, Special, abs_, neg

TARGET_LABEL = Label(".Ltarget")


class _Alloc:
    """Distinct, aligned registers for the operands of one instruction."""

    def __init__(self):
        self.next = {"v": 2, "a": 4, "s": 8}

    def take(self, cls: str, width: int) -> Reg:
        align = (2 if width == 2 else 4) if cls == "s" and width > 1 else (2 if width >= 2 else 1)
        start = -(-self.next[cls] // align) * align
        self.next[cls] = start + width + 2
        return Reg(cls, start, width)


def _base_value(spec, width, alloc, prefer_a=False):
    kind = spec.kind
    if kind in ("v", "vsrc", "gaddr", "mvaddr"):
        return alloc.take("v", width)
    if kind == "a":
        return alloc.take("a", width)
    if kind in ("av", "avc"):
        return alloc.take("a" if prefer_a else "v", width)
    if kind in ("s", "sgpr", "ssrc", "saddr"):
        return alloc.take("s", 2 if kind == "saddr" else width)
    if kind == "imm":
        return 1
    if kind == "simm16":
        return -2
    if kind == "uimm16":
        return 0x1234
    if kind == "lit":
        return 0x1234
    if kind == "label":
        return TARGET_LABEL
    if kind in ("soff", "soffu"):
        return 0x10
    raise AssertionError(kind)


def _base(desc):
    """Base operands and modifiers: all registers (MFMA in AGPRs), MUBUF with offen, global with an SGPR base."""
    alloc = _Alloc()
    mods = {}
    if any(s.kind == "mvaddr" for s in desc.operands):
        mods["offen"] = True
    if desc.name == "s_waitcnt":
        mods["vmcnt"] = 0
    ops = []
    scalar_taken = False
    for spec in desc.operands:
        width = spec.width
        if spec.kind == "ssrc" and desc.unit in ("valu", "trans"):
            if scalar_taken:            # one SGPR per VALU instruction (constant bus): a constant here
                ops.append(3)
                continue
            scalar_taken = True
        if spec.kind == "mvaddr":
            width = 1
        if spec.kind == "gaddr":
            width = 1
        if desc.mfma is not None and spec.name in ("src0", "src1") and desc.mfma.in_type == "f8f6f4":
            width = 8
        ops.append(_base_value(spec, width, alloc, prefer_a=desc.fmt == "MAI" and spec.name in ("vdst", "src2")))
    return ops, mods


def _alternatives(desc, i, spec, ops):
    """Other values for operand ``i`` (labels say what they exercise)."""
    kind, width = spec.kind, spec.width
    alloc = _Alloc()
    alloc.next = {"v": 40, "a": 40, "s": 40}
    alts = []
    if kind == "vsrc":
        alts.append(("sgpr", alloc.take("s", width)))
        alts.append(("inline int", 5 if width == 1 else 1))
        alts.append(("inline -int", -3))
        alts.append(("inline float", 0.5))
        alts.append(("inline 1/2pi", 0.15915494309189532))
        if width == 1:
            alts.append(("literal int", 0x12345))
            alts.append(("literal float", 3.5))
            alts.append(("m0", Special("m0")))
        else:
            alts.append(("vcc", Special("vcc")))
        alts.append(("agpr", alloc.take("a", width)))
    elif kind == "ssrc":
        alts.append(("inline int", 7))
        alts.append(("inline float", -2.0))
        alts.append(("literal", 0x12345))
        alts.append(("vgpr", alloc.take("v", width)))
        if width == 1:
            alts.append(("m0", Special("m0")))
            alts.append(("vcc_lo", Special("vcc_lo")))
        else:
            alts.append(("exec", Special("exec")))
            alts.append(("vcc", Special("vcc")))
    elif kind in ("s", "sgpr"):
        if width == 2:
            alts.append(("vcc", Special("vcc")))
            alts.append(("exec", Special("exec")))
        elif width == 1:
            alts.append(("m0", Special("m0")))
            alts.append(("exec_lo", Special("exec_lo")))
        alts.append(("vgpr", alloc.take("v", width)))
    elif kind == "av":
        other = "v" if isinstance(ops[i], Reg) and ops[i].cls == "a" else "a"
        alts.append((f"{other}gpr", alloc.take(other, width)))
    elif kind in ("v", "a"):
        alts.append(("sgpr", alloc.take("s", width)))
        alts.append(("other file", alloc.take("a" if kind == "v" else "v", width)))
        if not spec.is_def:
            alts.append(("inline int", 1))
    elif kind == "avc":
        alts.append(("inline 0", 0))
        alts.append(("inline 1.0", 1.0))
        alts.append(("literal", 0x12345))
    elif kind in ("soff", "soffu"):
        alts.append(("sgpr", alloc.take("s", 1)))
        alts.append(("m0", Special("m0")))
        alts.append(("max", (1 << 20) - 1))
        alts.append(("negative", -16))
    elif kind == "imm":
        alts.append(("max", (1 << width) - 1))
        alts.append(("over max", 1 << width))
    elif kind == "simm16":
        alts.append(("max", 0x7FFF))
        alts.append(("min", -0x8000))
    elif kind == "uimm16":
        alts.append(("max", 0xFFFF))
    elif kind == "lit":
        alts.append(("float", 2.5))
    return alts


def _mod_values(desc, name, spec):
    t = spec.type
    nsrc = len(desc.sources)
    if t == "flag":
        return [True]
    if t in ("u", "hex", "count"):
        hi = (1 << spec.bits) - 1
        return [hi, 1, hi + 1] if spec.bits < 16 else [hi, 1]
    if t == "i":
        return [-(1 << (spec.bits - 1)), (1 << (spec.bits - 1)) - 1, -1]
    if t == "bits":
        n = spec.bits or nsrc
        ones = [1] * n
        first = [1] + [0] * (n - 1)
        last = [0] * (n - 1) + [1]
        return [first, last, ones, [0] * n]
    if t == "omod":
        return [1, 2, 3]
    if t == "swizzle":
        return [0x801B, 0x041F, 0x1C1F, 0x00E0, 0x01F3, 0x8000, 0x41F]
    if t == "quad":
        return [[1, 0, 3, 2]]
    if t == "u4nz":
        return [1, 15]
    if t == "one":
        return [True]
    if t == "bcast":
        return [15, 31]
    if t == "mask":
        return []           # exercised together with a DPP control below
    raise AssertionError(t)


def candidates(desc):
    """(label, ops, mods) candidates for one instruction definition."""
    base_ops, base_mods = _base(desc)
    out = [("base", list(base_ops), dict(base_mods))]
    for i, spec in enumerate(desc.operands):
        for label, value in _alternatives(desc, i, spec, base_ops):
            ops = list(base_ops)
            ops[i] = value
            out.append((f"{spec.name}={label}", ops, dict(base_mods)))
    # addressing alternatives
    names = [s.name for s in desc.operands]
    if "vaddr" in names and desc.fmt == "MUBUF":
        i = names.index("vaddr")
        for label, value, mods in (("off", OFF, {}), ("idxen", Reg("v", 30), {"idxen": True}),
                                   ("idxen offen", Reg("v", 30, 2), {"idxen": True, "offen": True}),
                                   ("off with offen", OFF, {"offen": True}),
                                   ("pair with offen", Reg("v", 30, 2), {"offen": True})):
            ops = list(base_ops)
            ops[i] = value
            out.append((f"vaddr={label}", ops, mods))
    if "saddr" in names:
        i, j = names.index("saddr"), names.index("vaddr")
        for label, vaddr in (("off", Reg("v", 30, 2)), ("off with 1 vgpr", Reg("v", 30))):
            ops = list(base_ops)
            ops[i], ops[j] = OFF, vaddr
            out.append((f"saddr={label}", ops, dict(base_mods)))
    # MFMA: accumulator in VGPRs, mixed files
    if desc.fmt == "MAI":
        vd, s2 = names.index("vdst"), names.index("src2")
        ops = list(base_ops)
        ops[vd] = Reg("v", 40, base_ops[vd].count)
        ops[s2] = Reg("v", 40, base_ops[vd].count)
        out.append(("accumulator in VGPRs", ops, {}))
        ops = list(base_ops)
        ops[s2] = Reg("v", 40, base_ops[vd].count)
        out.append(("vdst AGPR, src2 VGPR", ops, {}))
        if desc.mfma.in_type == "f8f6f4":
            for fmt, regs in ((2, 6), (4, 4), (4, 8)):
                ops = list(base_ops)
                ops[names.index("src0")] = Reg("v", 60, regs)
                out.append((f"cbsz={fmt} with {regs} regs", ops, {"cbsz": fmt}))
    # modifiers, one at a time
    for name, spec in desc.mods.items():
        if name in ("offen", "idxen"):
            continue
        for value in _mod_values(desc, name, spec):
            mods = dict(base_mods)
            mods[name] = value
            out.append((f"{name}={value}", list(base_ops), mods))
    if desc.dpp:
        out.append(("dpp masks", list(base_ops), {"row_shr": 1, "row_mask": 3, "bank_mask": 5, "bound_ctrl": True}))
        out.append(("dpp mask without control", list(base_ops), {"row_mask": 3}))
        out.append(("two dpp controls", list(base_ops), {"row_shr": 1, "row_ror": 2}))
    # source modifiers on the first two VALU sources
    if desc.unit in ("valu", "trans") and desc.fmt != "ACC":
        srcs = [i for i, s in enumerate(desc.operands) if not s.is_def and s.kind in ("vsrc", "v")]
        if srcs:
            ops = list(base_ops)
            ops[srcs[0]] = neg(ops[srcs[0]])
            out.append(("neg src", ops, dict(base_mods)))
            if len(srcs) > 1:
                ops = list(base_ops)
                ops[srcs[1]] = abs_(ops[srcs[1]])
                out.append(("abs src", ops, dict(base_mods)))
            if desc.dpp:
                ops = list(base_ops)
                ops[srcs[0]] = neg(ops[srcs[0]])
                out.append(("dpp with neg", ops, {"quad_perm": [3, 2, 1, 0]}))
    return out


def raw_render(desc, ops, mods) -> str:
    """The text of an instruction isagen refused to build (to ask LLVM whether it agrees)."""
    return Instruction(desc, tuple(OFF if o == "off" else o for o in ops), dict(mods)).render(with_comment=False)
