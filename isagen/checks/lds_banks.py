"""LDS bank-conflict analysis for DS instructions, from the lanes' byte addresses.

The LDS serves one access per bank per cycle.  A wave's DS instruction is split into phases (groups
of lanes served together); within a phase, lanes that touch *different* dwords of the *same* bank are
serialised, lanes that touch the same dword share it (broadcast).  An instruction's cost is the sum
over phases of the worst bank's number of distinct dwords; it is conflict-free when every phase costs
one cycle.

Phase rules (reference notes, from the composable_kernel "LDS bank conflicts" document):
* gfx942: 32 banks of 4 bytes, bank = (address / 4) % 32; a phase moves at most 128 bytes, so
  b32 accesses go 32 lanes at a time, b64 16 lanes, b128 8 lanes.  ``ds_write_b128`` takes 8 phases
  of 8 consecutive lanes; ``ds_read_b128``'s phases pair non-contiguous quads of lanes:
  0-3+20-23, 4-7+16-19, 8-11+28-31, 12-15+24-27, 32-35+52-55, 36-39+48-51, 40-43+60-63, 44-47+56-59.
* gfx950: 64 banks of 4 bytes [verify on hardware]; a phase moves at most 256 bytes, so lanes per
  phase double; ``ds_read_b128`` keeps the gfx942 quad pairing, two pairs per phase [assumption].
The analysis is used on the addresses the emulator observes (any kernel) and on the addresses a tile
primitive computes for its layout (before any code runs).

It is also one of the checks every finished kernel passes (``check_program``, run by
``KernelBuilder.finish``): a DS or LDS-DMA instruction emitted with ``lanes=`` (its 64 lane addresses
for every wave variant; the tile primitives give them) is analysed, and a bank conflict in any variant
is a problem naming the instruction and its worst phase.  ``Program.lds_banks`` keeps one row per such
instruction; the .s header summarises them.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter

from isagen.errors import ISAError
from isagen.records import record, value_methods
from isagen.targets import DEFAULT_TARGET, get_target

_READ_B128_PAIRS_942 = [(0, 20), (4, 16), (8, 28), (12, 24), (32, 52), (36, 48), (40, 60), (44, 56)]


@value_methods
@record(frozen=True, repr=False, eq=False)
class BankReport:
    """The LDS bank conflicts of one access: the lanes of each phase and the cycles it takes."""

    width: int                 # bytes per lane
    phases: tuple[tuple[int, ...], ...]
    cycles: tuple[int, ...]    # per phase: the worst bank's distinct dwords

    @property
    def total_cycles(self) -> int:
        return sum(self.cycles)

    @property
    def ideal_cycles(self) -> int:
        return len(self.phases)

    @property
    def conflict_free(self) -> bool:
        return all(c <= 1 for c in self.cycles)

    @property
    def extra_cycles(self) -> int:
        return self.total_cycles - self.ideal_cycles

    def __str__(self) -> str:
        if self.conflict_free:
            return f"b{self.width * 8}: conflict-free ({self.ideal_cycles} phases)"
        worst = max(range(len(self.cycles)), key=self.cycles.__getitem__)
        return (f"b{self.width * 8}: {self.total_cycles} cycles for {self.ideal_cycles} phases "
                f"(worst phase lanes {list(self.phases[worst])}: {self.cycles[worst]}-way)")


_PHASES: dict[tuple[str, int, str], tuple[tuple[int, ...], ...]] = {}
_BANKS: dict[str, int] = {}
_GETTERS: dict[tuple[int, ...], Callable[[list[int]], tuple[int, ...]]] = {}


def phases(target_name: str, width: int, op: str) -> list[tuple[int, ...]]:
    """The lane groups served together for an access of ``width`` bytes per lane."""
    return list(_phases(target_name, width, op))


def _phases(target_name: str, width: int, op: str) -> tuple[tuple[int, ...], ...]:
    key = (target_name, width, op)
    got = _PHASES.get(key)
    if got is None:
        banks = get_target(target_name).lds_banks
        if width == 16 and op == "read" and banks == 32:
            got = tuple(tuple(range(a, a + 4)) + tuple(range(b, b + 4)) for a, b in _READ_B128_PAIRS_942)
        else:
            lanes = max(1, min(64, banks * 4 // width))
            # widths that do not divide the bank row (12-byte b96 accesses: 10 lanes a phase) leave a
            # shorter last phase rather than lanes past 63
            got = tuple(tuple(range(s, min(s + lanes, 64))) for s in range(0, 64, lanes))
        _PHASES[key] = got
    return got


def _lane_addresses(addresses) -> list[int]:
    """The 64 lanes' byte addresses as Python ints (a 64-tuple of ints as it is; arrays, nested or
    float sequences through numpy, as ``np.asarray(..., int64).reshape(64)`` reads them)."""
    if type(addresses) in (tuple, list) and len(addresses) == 64 and set(map(type, addresses)) == {int}:
        return list(addresses)
    import numpy as np
    return [int(a) for a in np.asarray(addresses, dtype=np.int64).reshape(64).tolist()]


def analyse(addresses, width: int, target_name: str = DEFAULT_TARGET, op: str = "read",
            active=None) -> BankReport:
    """Bank conflicts of one DS access: ``addresses`` are the 64 lanes' byte addresses, ``width`` the
    bytes each lane moves (4, 8, 12, 16), ``active`` an optional 64-entry mask of executing lanes."""
    addr = _lane_addresses(addresses)
    if active is None:
        mask = None
    else:
        import numpy as np
        mask = [bool(m) for m in np.asarray(active, bool).reshape(64).tolist()]
    banks = _BANKS.get(target_name)
    if banks is None:
        banks = _BANKS[target_name] = get_target(target_name).lds_banks
    groups = _phases(target_name, width, op)
    return BankReport(width, groups, _cycles(addr, groups, width, banks, mask))


def conflict_free_lanes(addr: list[int], groups: tuple[tuple[int, ...], ...], width: int, banks: int) -> bool:
    """Whether an access of all 64 lanes (``addr``: their byte addresses) takes one cycle in every
    phase (``groups``: ``phases()``), i.e. ``analyse(...).conflict_free`` without building the report."""
    return all(c <= 1 for c in _cycles(addr, groups, width, banks, None))


def _getter(group: tuple[int, ...]) -> Callable[[list[int]], tuple[int, ...]]:
    """The addresses of ``group``'s lanes, as a tuple (one C call)."""
    if len(group) == 1:
        lane = group[0]
        return lambda addr: (addr[lane],)
    get: Callable[[list[int]], tuple[int, ...]] = itemgetter(*group)
    return get


def _cycles(addr: list[int], groups: tuple[tuple[int, ...], ...], width: int, banks: int,
            mask: list[bool] | None) -> tuple[int, ...]:
    """Per phase: the busiest bank's number of distinct dwords among the active lanes (0 for a phase
    without one).

    When every lane's access is aligned to its own size and that size divides the bank row (b32 and
    narrower: one dword; b64/b128 aligned to 8/16 bytes), the dwords of two lanes are either the same
    block or disjoint blocks, each on its own run of banks: counting distinct blocks per run of banks
    is counting distinct dwords per bank.  Other accesses (b96, unaligned) count dword by dword."""
    nd = (width + 3) // 4                     # dwords a lane touches
    if width < 4:
        nd, unit = 1, 4                       # a sub-dword access touches the dword it is in
    else:
        unit = 4 * nd
    aligned = nd == 1 or (banks % nd == 0 and not any(map(unit.__rmod__, addr)))
    out = []
    for group in groups:
        if mask is None:
            get = _GETTERS.get(group)
            if get is None:
                get = _GETTERS[group] = _getter(group)
            values = get(addr)
        else:
            values = tuple(addr[lane] for lane in group if mask[lane])
            if not values:
                out.append(0)
                continue
        if aligned:
            nb = banks // nd
            blocks = set(map(unit.__rfloordiv__, values))
            runs = set(map(nb.__rmod__, blocks))
            if len(runs) == len(blocks):
                out.append(1)
                continue
            keys = [b % nb for b in blocks]
        else:
            dwords = {a // 4 + k for a in values for k in range(nd)}
            keys = [d % banks for d in dwords]
        count: dict[int, int] = {}
        for k in keys:
            count[k] = count.get(k, 0) + 1
        out.append(max(count.values()))
    return tuple(out)


# ------------------------------------------------------------------------------ the program check
# bytes per lane of the accesses the bank model covers (DS reads/writes, LDS-DMA loads)
ACCESS_BYTES = {
    "ds_read_u8": 1, "ds_read_i8": 1, "ds_read_u16": 2, "ds_read_i16": 2, "ds_read_u8_d16": 1,
    "ds_read_u8_d16_hi": 1, "ds_read_u16_d16": 2, "ds_read_u16_d16_hi": 2, "ds_read_b32": 4, "ds_read_b64": 8,
    "ds_read_b96": 12, "ds_read_b128": 16, "ds_read_b64_tr_b16": 8,
    "ds_write_b8": 1, "ds_write_b16": 2, "ds_write_b8_d16_hi": 1, "ds_write_b16_d16_hi": 2, "ds_write_b32": 4,
    "ds_write_b64": 8, "ds_write_b96": 12, "ds_write_b128": 16,
    "buffer_load_ubyte_lds": 1, "buffer_load_ushort_lds": 2, "buffer_load_dword_lds": 4,
    "buffer_load_dwordx3_lds": 12, "buffer_load_dwordx4_lds": 16,
}


def access_kind(inst) -> tuple[int, str]:
    """``(bytes per lane, "read" | "write")`` of a DS / LDS-DMA instruction (from the LDS's side: an
    LDS-DMA load writes LDS)."""
    width = ACCESS_BYTES.get(inst.name)
    if width is None:
        raise ISAError(f"{inst.name}: no LDS bank model (lanes= is for DS reads/writes and LDS-DMA loads)")
    return width, ("read" if "lds_read" in inst.desc.flags else "write")


@value_methods
@record(frozen=True, repr=False, eq=False)
class BankRow:
    """The bank analysis of one instruction over its wave variants."""

    position: int              # index in Program.items
    instruction: str           # the mnemonic (table name)
    what: str                  # its comment
    width: int
    op: str
    variants: int              # wave variants analysed
    conflicted: int            # of which with a bank conflict
    worst: BankReport          # the costliest variant

    @property
    def conflict_free(self) -> bool:
        return self.conflicted == 0

    def line(self) -> str:
        state = ("conflict-free" if self.conflict_free
                 else f"{self.conflicted} of {self.variants} wave variants: {self.worst}")
        return f"#{self.position} {self.instruction} ({self.what}): {state}"


def check_program(items, target_name: str) -> tuple[list[BankRow], list[str]]:
    """Analyse every instruction of ``items`` that carries ``lanes``; returns the rows and one problem
    line per instruction with a bank conflict.

    Bank conflicts do not change when every lane's address moves by the same multiple of the access
    block (``4 * dwords per lane`` bytes): blocks and dwords move together, their banks rotate.  The
    variants of a kernel's accesses are mostly one pattern at different LDS offsets, so each is
    analysed once, keyed by its addresses relative to the block below lane 0's."""
    rows, problems = [], []
    cache: dict = {}             # (addresses, width, op) -> report
    shifted: dict = {}           # (addresses - base, width, op) -> report
    # (id(lanes), width, op) -> (lanes, worst report, variants with conflicts, variants): the builder
    # gives the instructions that repeat a lanes= argument one tuple (an unrolled loop's reads), judged once
    judged: dict = {}
    for pos, inst in enumerate(items):
        lanes = getattr(inst, "lanes", None)
        if not lanes:
            continue
        width, op = access_kind(inst)
        got = judged.get((id(lanes), width, op))
        if got is not None and got[0] is lanes:
            _, worst, conflicted, variants = got
        else:
            unit = 4 * ((width + 3) // 4) if width >= 4 else 4
            reports = []
            for addrs in lanes:
                key = (addrs, width, op)
                report = cache.get(key)
                if report is None:
                    base = addrs[0]
                    if type(addrs) is tuple and type(base) is int:
                        base -= base % unit
                        rel = (tuple([a - base for a in addrs]), width, op)
                        report = shifted.get(rel)
                        if report is None:
                            report = shifted[rel] = analyse(addrs, width, target_name, op)
                    else:
                        report = analyse(addrs, width, target_name, op)
                    cache[key] = report
                reports.append(report)
            worst = max(reports, key=lambda r: r.extra_cycles)
            conflicted = sum(not r.conflict_free for r in reports)
            variants = len(reports)
            judged[(id(lanes), width, op)] = (lanes, worst, conflicted, variants)
        row = BankRow(pos, inst.name, inst.comment or "", width, op, variants, conflicted, worst)
        rows.append(row)
        if not row.conflict_free:
            problems.append(f"LDS bank conflict: {row.line()}")
    return rows, problems


def summary(rows: list[BankRow], target_name: str) -> str:
    """One line for the .s header."""
    kinds: dict = {}
    for r in rows:
        kinds[r.instruction] = kinds.get(r.instruction, 0) + 1
    bad = [r for r in rows if not r.conflict_free]
    state = "conflict-free" if not bad else f"{len(bad)} with conflicts"
    what = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    return (f"LDS banks ({target_name} phase rules): {len(rows)} instructions with declared lane addresses "
            f"({what}), every wave variant: {state}")
