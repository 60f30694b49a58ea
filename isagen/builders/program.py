"""A kernel program and the builder that writes it.

``KernelBuilder`` is what kernel generators use: it owns the register pools, the kernel arguments,
the LDS layout and the instruction list, and exposes every instruction of the target's ISA table as
a method::

    k = KernelBuilder("axpy", "gfx942", workgroup_size=256)
    x = k.args.pointer("x", "f32", access="read_only")
    addr = k.vgpr(1, "addr")
    k.v_lshlrev_b32(addr, 2, k.tid, comment="byte offset of this lane")
    ...
    program = k.finish()

``finish()`` runs the project's checks (hazard nops inserted and verified, waits verified, register
limits, leak check) and returns the ``Program``.  The check pipeline fills in part of the
``Program`` it is handed (the nop-padded ``items``, ``lds_banks``, ``rejected``, the allocations'
positions); once ``finish()`` has returned, nothing in isagen changes it.  Builders are pure: they
never call the assembler (that is ``isagen.objects.toolchain``'s job).
"""

from __future__ import annotations

import contextlib
import gc
import operator
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import field
from types import MethodType
from typing import TYPE_CHECKING, Any

from isagen.builders.instructions import InstructionMethods
from isagen.builders.kernarg import KernArgs
from isagen.builders.regs import Allocation, RegisterPool, default_align
from isagen.checks import occupancy as _occ
from isagen.checks import pipeline
from isagen.checks.lds_banks import BankRow, access_kind
from isagen.checks.occupancy import EXTRA_SGPRS
from isagen.errors import AllocationError, CheckError, ISAError, SpecError
from isagen.isa.instruction import Instruction
from isagen.isa.operands import Label, Reg
from isagen.isa.table import isa_table
from isagen.records import record, value_methods
from isagen.targets import Target, get_target


class Comment(str):
    """A comment line in the emitted assembly."""


#: what a program is a list of, in order
ProgramItem = Instruction | Label | Comment



@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a kernel is built and checked.  A build makes tens
    of thousands of small objects (instructions, register keys, the checks' states) that are nearly
    all alive until it ends; the collections their allocation triggers only re-scan them, about a
    fifth of a build's time.  Reference counting still frees everything as usual, and the collector
    runs again (as it was) afterwards, so cycles made meanwhile are collected then.

    On the way out, what the build made is moved to the oldest generation (``gc.freeze`` then
    ``gc.unfreeze``: two list splices, and the young generation's count back to 0) when nothing else
    is frozen: otherwise the first allocation after the build would start a collection that scans the
    whole new program once more (a sixth of a build), although it is alive; the oldest generation's
    objects are still collected, at the next full collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()

@value_methods
@record(frozen=True, repr=False, eq=False)
class LdsRegion:
    """A named range of LDS bytes the kernel allocated."""

    name: str
    offset: int
    size: int


@value_methods
@record(repr=False, eq=False)
class Program:
    """A finished kernel: everything the assembler, the checkers, the runtime and reports need.

    A plain (mutable) dataclass: ``KernelBuilder.finish()`` hands it to the check pipeline, which
    replaces ``items`` with the nop-padded list, records ``lds_banks`` and, with ``--force``,
    ``rejected``.  Consumers (emit, reports, the runtime) only read it."""

    name: str
    target: Target
    items: list[ProgramItem]         # in program order
    args: KernArgs
    workgroup_size: tuple[int, int, int]
    workgroup_ids: tuple[str, ...]   # enabled workgroup-id SGPRs, in x, y, z order
    workitem_id_dims: int            # 1: x only (v0 holds ids packed x|y<<10|z<<20 on gfx90a+)
    lds_regions: tuple[LdsRegion, ...]
    lds_bytes: int
    vgprs: int                       # arch VGPR high-water mark
    agprs: int                       # AGPR high-water mark
    sgprs: int                       # SGPR high-water mark (without VCC)
    allocations: list[Allocation]    # all classes, in check-out order
    header: list[str] = field(default_factory=list)   # comment lines for the top of the .s
    rejected: str | None = None      # why the spec was rejected (only with --force)
    leaks: list[str] = field(default_factory=list)    # allocations never freed (an error at finish)
    lds_banks: list[BankRow] = field(default_factory=list)   # per instruction with lanes= (finish)

    # ------------------------------------------------------------------ derived descriptor fields
    @property
    def accum_offset(self) -> int:
        return _occ.accum_offset(self.target, self.vgprs)

    @property
    def next_free_vgpr(self) -> int:
        """Unified register count: arch VGPRs, then AGPRs from accum_offset."""
        return _occ.unified_vgprs(self.target, self.vgprs, self.agprs)

    @property
    def total_vgprs_allocated(self) -> int:
        """Per-lane registers the hardware allocates (granule-rounded unified count)."""
        return _occ.allocated_vgprs(self.target, self.next_free_vgpr)

    @property
    def uses_vcc(self) -> bool:
        seen: set[int] = set()  # equal instructions share their register keys: look at each once
        for i in self.items:
            if isinstance(i, Instruction) and id(i.shared) not in seen:
                seen.add(id(i.shared))
                if any(k[0] in ("vcc_lo", "vcc_hi") for k in i.def_keys() + i.use_keys()):
                    return True
        return False

    @property
    def sgpr_count(self) -> int:
        """SGPRs the wave is given, as LLVM counts them for the descriptor granule and the metadata's
        ``.sgpr_count``: the allocated ones plus 6 always reserved on gfx9 (VCC, FLAT_SCRATCH,
        XNACK_MASK), with or without VCC use and with xnack- (checked against clang 19 and 22)."""
        return max(self.sgprs, 1) + EXTRA_SGPRS

    @property
    def user_sgprs(self) -> int:
        return 2                                  # the kernarg segment pointer, s[0:1]

    @property
    def flat_workgroup_size(self) -> int:
        x, y, z = self.workgroup_size
        return x * y * z

    @property
    def waves_per_workgroup(self) -> int:
        return -(-self.flat_workgroup_size // self.target.wave_size)

    def instructions(self) -> list[Instruction]:
        return [i for i in self.items if isinstance(i, Instruction)]

    def occupancy(self) -> dict[str, Any]:
        """Waves per SIMD and what limits them (VGPRs, SGPRs, LDS, workgroup size): the summary of
        ``isagen.checks.occupancy.occupancy`` (``occupancy_detail()`` has the rest)."""
        return self.occupancy_detail().summary()

    def occupancy_detail(self) -> _occ.Occupancy:
        """``isagen.checks.occupancy.Occupancy`` of this kernel: limits, granule effects, what one more wave needs."""
        return _occ.occupancy(self.target, arch_vgprs=self.vgprs, agprs=self.agprs, sgpr_count=self.sgpr_count,
                              lds_bytes=self.lds_bytes, workgroup_size=self.flat_workgroup_size)


def _lds_range(lds: LdsRegion | tuple[int, int]) -> tuple[int, int]:
    """``lds=`` on a DS or LDS-DMA instruction: the bytes it touches (an LdsRegion or (start, end)),
    so the wait checker can tell the halves of a double buffer apart."""
    if isinstance(lds, LdsRegion):
        return (lds.offset, lds.offset + lds.size)
    start, end = lds
    if not 0 <= start < end:
        raise ISAError(f"lds range ({start}, {end}) is empty or negative")
    return (int(start), int(end))


_INTS = {int}


def _lane_addresses(inst: Instruction, lanes: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    """``lanes=`` on a DS or LDS-DMA instruction: the 64 lane byte addresses it accesses, one sequence
    per wave variant (e.g. per wave of the workgroup whose addresses differ), for the LDS bank check."""
    access_kind(inst)                                  # an ISAError for instructions with no bank model
    out = []
    for wave in lanes:
        # the tile primitives hand tuples of Python ints (lane expressions' values: kept as they are,
        # no int() per lane) or integer numpy arrays (tolist() gives the same Python ints, faster)
        np = sys.modules.get("numpy")          # (an array is numpy's: not loaded, no array)
        if type(wave) is tuple and set(map(type, wave)) == _INTS:
            addrs = wave
        elif np is not None and isinstance(wave, np.ndarray) and wave.ndim == 1 and wave.dtype.kind in ("i", "u"):
            addrs = tuple(wave.tolist())
        else:
            addrs = tuple(map(int, wave))
        if len(addrs) != 64:
            raise ISAError(f"lanes= on {inst.name}: {len(addrs)} addresses, expected 64 (one per lane)")
        out.append(addrs)
    if not out:
        raise ISAError(f"lanes= on {inst.name}: no wave variant given")
    return tuple(out)


_ALLOCATED_AT = operator.attrgetter("allocated_at")

#: target name -> the KernelBuilder subclass that kernels of that target are made as (see
#: KernelBuilder.__new__): it gains each instruction's method on first use
_TARGET_CLASSES: dict[str, type] = {}


def _emitter(desc: Any) -> Any:
    """The builder method of one instruction (``k.v_add_u32(...)``): make it, attach ``lds=`` /
    ``lanes=``, append it."""
    make = desc.make

    def emit(self: KernelBuilder, *ops: Any, comment: str | None = None, lds: Any = None, lanes: Any = None,
             **mods: Any) -> Instruction:
        inst: Instruction = make(ops, mods, comment)
        if lds is not None:
            inst.lds = _lds_range(lds)
        if lanes is not None:
            if type(lanes) is tuple:
                # a tuple of tuples (immutable) converted before for this kernel: the same addresses
                seen = self._lanes_seen.get(id(lanes))
                if seen is not None and seen[0] is lanes:
                    access_kind(inst)
                    inst.lanes = seen[1]
                else:
                    inst.lanes = _lane_addresses(inst, lanes)
                    if all(type(w) is tuple for w in lanes):
                        self._lanes_seen[id(lanes)] = (lanes, inst.lanes)
            else:
                inst.lanes = _lane_addresses(inst, lanes)
        self.items.append(inst)          # self.emit(inst): made from this kernel's own table
        return inst

    emit.__name__ = desc.name
    emit.__doc__ = f"{desc.name} {desc.signature()}"
    return emit


class KernelBuilder(InstructionMethods):
    """Writes one kernel.  Instruction methods come from the target's ISA table (``__getattr__``);
    type checkers and editors see them declared in ``instructions.pyi`` instead."""

    def __new__(cls, name: str, target: Target | str, *args: Any, **kwargs: Any) -> KernelBuilder:
        """A kernel builder is made as the subclass of its target (one per target, named
        ``KernelBuilder`` too), to which ``__getattr__`` adds each instruction's method when it is first
        used: later calls of it are plain method calls.  Subclasses of KernelBuilder are left as they
        are (their instructions go through ``__getattr__`` every time)."""
        if cls is KernelBuilder:
            t = get_target(target)
            sub = _TARGET_CLASSES.get(t.name)
            if sub is None:
                sub = _TARGET_CLASSES[t.name] = type("KernelBuilder", (KernelBuilder,), {
                    "__module__": KernelBuilder.__module__, "__qualname__": "KernelBuilder",
                    "__doc__": KernelBuilder.__doc__})
            cls = sub
        return super().__new__(cls)

    def __init__(self, name: str, target: Target | str, *, workgroup_size: int | Sequence[int] = 256,
                 workgroup_ids: str = "x", workitem_id_dims: int = 1) -> None:
        if not name.isidentifier():
            raise SpecError(f"kernel name '{name}' is not a valid symbol")
        self.name = name
        self.target = get_target(target)
        self.isa = isa_table(self.target)
        if isinstance(workgroup_size, int):
            workgroup_size = (workgroup_size, 1, 1)
        dims = tuple(workgroup_size)
        if not 1 <= len(dims) <= 3:
            raise SpecError(f"workgroup size {dims} must have 1 to 3 dimensions")
        x, y, z = dims + (1,) * (3 - len(dims))
        self.workgroup_size = (x, y, z)
        flat = x * y * z
        if not 1 <= flat <= self.target.max_workgroup_size:
            raise SpecError(f"workgroup size {flat} outside 1..{self.target.max_workgroup_size}")
        self.items: list[ProgramItem] = []
        self.args = KernArgs()
        self.header: list[str] = []
        self.vgprs = RegisterPool("v", self.target.max_arch_vgprs)
        self.agprs = RegisterPool("a", self.target.max_agprs)
        self.sgprs = RegisterPool("s", self.target.max_sgprs)
        self._pools = {"v": self.vgprs, "a": self.agprs, "s": self.sgprs}
        self._lds: list[LdsRegion] = []
        self._lds_top = 0
        self._labels: set[str] = set()
        self._placed: set[Label] = set()
        self._lanes_seen: dict[int, tuple[Any, tuple[tuple[int, ...], ...]]] = {}   # id -> (lanes=, converted)
        # registers the hardware initialises at wave launch (AMDGPUUsage "Initial Kernel Execution State")
        self.kernarg_ptr = self.sgprs.alloc(2, "kernarg_ptr", align=2, index=0, kernel=True)
        if any(d not in "xyz" for d in workgroup_ids) or list(workgroup_ids) != sorted(set(workgroup_ids)):
            raise SpecError(f"workgroup_ids must be a subset of 'xyz' in order, got '{workgroup_ids}'")
        self.workgroup_ids = tuple(workgroup_ids)
        self.workgroup_id: dict[str, Reg] = {}
        for n, dim in enumerate(self.workgroup_ids):
            self.workgroup_id[dim] = self.sgprs.alloc(1, f"wg_id_{dim}", index=2 + n, kernel=True)
        if workitem_id_dims not in (1, 2, 3):
            raise SpecError(f"workitem_id_dims must be 1, 2 or 3, got {workitem_id_dims}")
        self.workitem_id_dims = workitem_id_dims
        self.tid = self.vgprs.alloc(1, "tid", index=0)   # v0: packed work-item ids; free it when done

    # ------------------------------------------------------------------ instructions
    # Hidden from type checkers: with a ``__getattr__`` in sight, mypy would accept any attribute, so
    # a misspelt mnemonic would pass; they check calls against InstructionMethods' stub instead.
    if not TYPE_CHECKING:
        def __getattr__(self, name: str):
            if name.startswith("_"):
                raise AttributeError(name)
            isa = self.__dict__.get("isa")
            if isa is None or name not in isa:
                raise AttributeError(f"'{name}' is neither a builder method nor a {self.target.name} instruction")
            fn = _emitter(isa[name])
            cls = type(self)
            if _TARGET_CLASSES.get(self.target.name) is cls:
                setattr(cls, name, fn)           # later uses are plain method calls
            return MethodType(fn, self)

    def emit(self, inst: Instruction) -> Instruction:
        if inst.desc.arch != self.target.name:
            raise ISAError(f"{inst.name} was built for {inst.desc.arch}, this kernel targets {self.target.name}")
        self.items.append(inst)
        return inst

    def wait(self, *, why: str, vmcnt: int | None = None, lgkmcnt: int | None = None) -> Instruction:
        """``s_waitcnt`` with a reason, which every wait in isagen's output carries."""
        mods = {k: v for k, v in (("vmcnt", vmcnt), ("lgkmcnt", lgkmcnt)) if v is not None}
        if not mods:
            raise ISAError("wait() needs vmcnt and/or lgkmcnt")
        return self.emit(self.isa["s_waitcnt"].make((), mods, why))    # k.s_waitcnt(comment=why, **mods)

    def barrier(self, *, why: str) -> Instruction:
        return self.s_barrier(comment=why)

    def comment(self, text: str) -> None:
        for line in str(text).splitlines() or [""]:
            self.items.append(Comment(line))

    def label(self, name: str) -> Label:
        """A new unique local label (not yet placed): ``loop = k.label("loop")`` ... ``k.place(loop)``."""
        base = f".L{self.name}_{name}"
        text, n = base, 1
        while text in self._labels:
            n += 1
            text = f"{base}_{n}"
        self._labels.add(text)
        return Label(text)

    def place(self, label: Label) -> None:
        if label in self._placed:
            raise ISAError(f"label {label} placed twice")
        self._placed.add(label)
        self.items.append(label)

    # ------------------------------------------------------------------ registers
    def _alloc(self, cls: str, count: int, name: str, align: int | None, kernel: bool, scratch: bool = False) -> Reg:
        return self._pools[cls].alloc(count, name, align or default_align(cls, count), kernel,
                                      position=len(self.items), scratch=scratch)

    # ``scratch=True``: an anonymous intermediate, written as a physical register in the .s (no .set)
    def vgpr(self, count: int = 1, name: str = "tmp", align: int | None = None, kernel: bool = False,
             scratch: bool = False) -> Reg:
        return self.vgprs.alloc(count, name, align or (2 if count >= 2 else 1), kernel,
                                position=len(self.items), scratch=scratch)      # default_align("v", count)

    def agpr(self, count: int = 1, name: str = "acc", align: int | None = None, kernel: bool = False,
             scratch: bool = False) -> Reg:
        return self._alloc("a", count, name, align, kernel, scratch)

    def sgpr(self, count: int = 1, name: str = "tmp", align: int | None = None, kernel: bool = False,
             scratch: bool = False) -> Reg:
        return self.sgprs.alloc(count, name, align or default_align("s", count), kernel,
                                position=len(self.items), scratch=scratch)

    def free(self, *regs: Reg) -> None:
        for reg in regs:
            self._pools[reg.cls].free(reg, len(self.items))

    @contextlib.contextmanager
    def temps(self, **requests: str) -> Iterator[Any]:
        """Scoped temporaries: ``with k.temps(addr="v2", idx="s1") as t: t.addr ...``; freed on exit."""
        held: dict[str, Reg] = {}
        try:
            for name, req in requests.items():
                cls, count = req[0], int(req[1:] or 1)
                held[name] = self._alloc(cls, count, name, None, False)
            yield type("Temps", (), held)()
        finally:
            for reg in held.values():
                if reg.index in self._pools[reg.cls].live:
                    self._pools[reg.cls].free(reg, len(self.items))

    # ------------------------------------------------------------------ LDS
    def lds(self, size: int, name: str, align: int = 16) -> LdsRegion:
        """Reserve ``size`` bytes of LDS for this workgroup; fails past the target's LDS."""
        offset = (self._lds_top + align - 1) // align * align
        if offset + size > self.target.lds_bytes:
            used = ", ".join(f"{r.name}={r.size}" for r in self._lds) or "nothing"
            raise AllocationError(f"LDS overflow allocating '{name}' ({size} bytes at {offset}); "
                                  f"{self.target.name} has {self.target.lds_bytes} bytes; already: {used}")
        region = LdsRegion(name, offset, size)
        self._lds.append(region)
        self._lds_top = offset + size
        return region

    # ------------------------------------------------------------------ finishing
    def finish(self, *, check: bool = True, force: bool = False) -> Program:
        """Seal the kernel: append s_endpgm if missing, insert hazard nops, run every check.

        With ``force`` the failed checks are recorded in the header instead of raised, so a broken
        kernel can still be emitted for inspection.
        """
        if not self.items or not (isinstance(self.items[-1], Instruction) and self.items[-1].name == "s_endpgm"):
            self.s_endpgm()
        program = self._program()
        if not check:
            return program
        with cyclic_gc_paused():
            problems = pipeline.finish_program(program)
        if problems:
            if not force:
                raise CheckError(problems[0])
            program.rejected = "; ".join(problems)
        return program

    def _program(self) -> Program:
        leaks = [a for p in self._pools.values() for a in p.leaks()]
        return Program(
            name=self.name, target=self.target, items=list(self.items), args=self.args,
            workgroup_size=self.workgroup_size, workgroup_ids=self.workgroup_ids,
            workitem_id_dims=self.workitem_id_dims, lds_regions=tuple(self._lds), lds_bytes=self._lds_top,
            vgprs=self.vgprs.peak, agprs=self.agprs.peak, sgprs=self.sgprs.peak,
            allocations=sorted((a for p in self._pools.values() for a in p.history), key=_ALLOCATED_AT),
            header=list(self.header),
            leaks=[f"{a.name} ({a.reg.physical()})" for a in leaks],
        )
