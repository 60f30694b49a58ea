"""LDS bank conflicts, statically (from a kernel's layout formulas) and dynamically (from the emulator).

* ``static_report(accesses, target)``: one line per DS / LDS-DMA instruction a kernel emits, from the
  64 lane addresses its tile primitives compute (``LdsAccess``), analysed by ``isagen.checks.lds_banks``.
* ``BankObserver``: plugs into the emulator (``Device.lds_observer``) and analyses every LDS access
  each wave actually makes, per instruction (program counter), with the same phase rules.

Both report per instruction: how often it ran, how many of those executions had conflicts, and the
worst (``BankReport``) seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isagen.checks import lds_banks
from isagen.tiles.lds_layout import conflict_free


@dataclass
class InstructionBanks:
    """Bank statistics of one instruction."""

    name: str
    op: str                        # read | write
    width: int
    executions: int = 0            # wave executions seen
    conflicted: int = 0            # of which with a bank conflict
    worst: lds_banks.BankReport | None = None
    instruction: str = ""          # the mnemonic

    @property
    def conflict_free(self) -> bool:
        return self.conflicted == 0

    def line(self) -> str:
        state = "conflict-free" if self.conflict_free else \
            f"{self.conflicted}/{self.executions} executions conflict; worst {self.worst}"
        return f"{self.name} ({self.op}, {self.width} B/lane) x{self.executions}: {state}"


def static_report(accesses, target: str) -> list[InstructionBanks]:
    """Analyse ``LdsAccess``es (one per instruction and wave)."""
    out: dict = {}
    for a in accesses:
        key = (a.name, a.op)
        e = out.setdefault(key, InstructionBanks(a.name, a.op, a.width, instruction=a.instruction))
        rep = a.report(target)
        e.executions += 1
        if not rep.conflict_free:
            e.conflicted += 1
            if e.worst is None or rep.extra_cycles > e.worst.extra_cycles:
                e.worst = rep
    return list(out.values())


class BankObserver:
    """``Device.lds_observer``: bank analysis of every LDS access an emulated launch makes.

        obs = BankObserver("gfx950"); dev.lds_observer = obs; mod.launch(...)
        obs.conflicts()      # instructions that had a conflict, with the worst case

    Accesses with inactive lanes are analysed over the active ones."""

    def __init__(self, target: str):
        self.target = target
        self.stats: dict = {}

    def __call__(self, inst, addr, act, nbytes, write, dma=False) -> None:
        op = "write" if write else "read"
        key = (getattr(inst, "pc", id(inst)), op)
        e = self.stats.get(key)
        if e is None:
            name = getattr(inst, "name", str(inst))
            e = self.stats[key] = InstructionBanks(f"{name} @pc {key[0]:#x}" if isinstance(key[0], int) else name,
                                                   op, nbytes, instruction=name)
        addr = np.asarray(addr).reshape(-1, 64)
        act = np.asarray(act).reshape(-1, 64)
        full = act.all(axis=1)
        ok = np.ones(addr.shape[0], bool)
        if full.any():
            ok[full] = conflict_free(addr[full], nbytes, op, self.target)
        for w in np.flatnonzero(~full):
            if act[w].any():
                ok[w] = lds_banks.analyse(addr[w], nbytes, self.target, op, active=act[w]).conflict_free
        e.executions += int(act.any(axis=1).sum())
        for w in np.flatnonzero(~ok):
            rep = lds_banks.analyse(addr[w], nbytes, self.target, op, active=act[w])
            e.conflicted += 1
            if e.worst is None or rep.extra_cycles > e.worst.extra_cycles:
                e.worst = rep

    def instructions(self) -> list[InstructionBanks]:
        return sorted(self.stats.values(), key=lambda e: e.name)

    def conflicts(self) -> list[InstructionBanks]:
        return [e for e in self.instructions() if not e.conflict_free]
