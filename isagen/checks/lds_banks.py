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

from dataclasses import dataclass

import numpy as np

from isagen.errors import ISAError
from isagen.targets import DEFAULT_TARGET, get_target

_READ_B128_PAIRS_942 = [(0, 20), (4, 16), (8, 28), (12, 24), (32, 52), (36, 48), (40, 60), (44, 56)]


@dataclass(frozen=True)
class BankReport:
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


def phases(target_name: str, width: int, op: str) -> list[tuple[int, ...]]:
    """The lane groups served together for an access of ``width`` bytes per lane."""
    banks = get_target(target_name).lds_banks
    if width == 16 and op == "read" and banks == 32:
        return [tuple(range(a, a + 4)) + tuple(range(b, b + 4)) for a, b in _READ_B128_PAIRS_942]
    lanes = max(1, min(64, banks * 4 // width))
    # widths that do not divide the bank row (12-byte b96 accesses: 10 lanes a phase) leave a shorter
    # last phase rather than lanes past 63
    return [tuple(range(s, min(s + lanes, 64))) for s in range(0, 64, lanes)]


def analyse(addresses, width: int, target_name: str = DEFAULT_TARGET, op: str = "read",
            active=None) -> BankReport:
    """Bank conflicts of one DS access: ``addresses`` are the 64 lanes' byte addresses, ``width`` the
    bytes each lane moves (4, 8, 12, 16), ``active`` an optional 64-entry mask of executing lanes."""
    addr = np.asarray(addresses, dtype=np.int64).reshape(64)
    mask = np.ones(64, bool) if active is None else np.asarray(active, bool).reshape(64)
    banks = get_target(target_name).lds_banks
    groups = phases(target_name, width, op)
    if active is None and len({len(g) for g in groups}) == 1:
        return BankReport(width, tuple(groups), _cycles_all_lanes(addr, groups, width, banks))
    cycles = []
    for group in groups:
        lanes = [lane for lane in group if mask[lane]]
        if not lanes:
            cycles.append(0)
            continue
        dwords = np.unique((addr[lanes, None] // 4 + np.arange((width + 3) // 4)[None, :]).ravel())
        per_bank = np.bincount(dwords % banks, minlength=banks)
        cycles.append(int(per_bank.max()))
    return BankReport(width, tuple(groups), tuple(cycles))


def _cycles_all_lanes(addr: np.ndarray, groups: list[tuple[int, ...]], width: int, banks: int) -> tuple[int, ...]:
    """``analyse``'s per-phase cycles with every lane active and phases of one size, for all phases in
    one go: each phase's distinct dwords, counted per bank, the busiest bank's count."""
    lanes = np.asarray(groups, dtype=np.int64)                          # (phases, lanes per phase)
    dwords = (addr[lanes][:, :, None] // 4 + np.arange((width + 3) // 4)[None, None, :]).reshape(len(groups), -1)
    dwords.sort(axis=1)
    distinct = np.ones(dwords.shape, dtype=bool)
    distinct[:, 1:] = dwords[:, 1:] != dwords[:, :-1]
    phase = np.broadcast_to(np.arange(len(groups))[:, None], dwords.shape)
    per_bank = np.bincount((phase * banks + dwords % banks)[distinct], minlength=len(groups) * banks)
    return tuple(int(c) for c in per_bank.reshape(len(groups), banks).max(axis=1))


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


@dataclass(frozen=True)
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
    line per instruction with a bank conflict."""
    rows, problems, cache = [], [], {}
    for pos, inst in enumerate(items):
        lanes = getattr(inst, "lanes", None)
        if not lanes:
            continue
        width, op = access_kind(inst)
        reports = []
        for addrs in lanes:
            key = (addrs, width, op)
            if key not in cache:
                cache[key] = analyse(addrs, width, target_name, op)
            reports.append(cache[key])
        worst = max(reports, key=lambda r: r.extra_cycles)
        row = BankRow(pos, inst.name, inst.comment or "", width, op, len(reports),
                      sum(not r.conflict_free for r in reports), worst)
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
