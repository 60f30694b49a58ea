"""What the emulator reports: one :class:`Report` per problem found, raised as :class:`EmulatorError`
or collected into a list (``launch(..., on_error="collect")``).

Every report names the kernel, the PC (the instruction's address in the code object, as
``llvm-objdump -d`` prints it), the instruction text, the workgroup, the wave within it, the lanes
concerned and, for memory problems, the address.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from isagen.errors import IsagenError

# report categories: what kind of problem a Report is (the sanitizer's findings, plus execution faults)
MISSING_WAIT = "missing-wait"          # a register read or overwritten before its memory result is waited for
HAZARD = "hazard"                      # too few wait states after an MFMA / VALU producer
LDS_RACE = "lds-race"                  # two waves touch the same LDS words with no barrier between
OOB_GLOBAL = "oob-global"              # a global/flat/buffer access outside every allocation
OOB_LDS = "oob-lds"                    # an LDS access past the workgroup's LDS allocation
UNINIT = "uninitialized"               # a read of a register nothing has written
BUDGET = "budget"                      # the instruction budget ran out (a hang)
UNSUPPORTED = "unsupported"            # an instruction or mode the emulator does not model
FAULT = "fault"                        # anything else the hardware would trap on (s_trap, bad register)

REPORT_CATEGORIES = (MISSING_WAIT, HAZARD, LDS_RACE, OOB_GLOBAL, OOB_LDS, UNINIT, BUDGET, UNSUPPORTED, FAULT)


def lane_ranges(lanes) -> str:
    """``[0,1,2,3,8]`` -> ``"0-3,8"``."""
    lanes = sorted(int(x) for x in lanes)
    if not lanes:
        return "-"
    out, start, prev = [], lanes[0], lanes[0]
    for x in lanes[1:]:
        if x == prev + 1:
            prev = x
            continue
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = x
    out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


@dataclass
class Report:
    category: str
    kernel: str
    pc: int
    instruction: str
    message: str
    workgroup: tuple = ()
    wave: int | None = None
    lanes: tuple = ()
    address: int | None = None
    extra: dict = field(default_factory=dict)

    def __str__(self) -> str:
        where = f"{self.kernel} pc {self.pc:#x} `{self.instruction}`"
        who = []
        if self.workgroup:
            who.append("workgroup (" + ",".join(str(int(x)) for x in self.workgroup) + ")")
        if self.wave is not None:
            who.append(f"wave {self.wave}")
        if self.lanes:
            who.append(f"lanes {lane_ranges(self.lanes)}")
        if self.address is not None:
            who.append(f"address {self.address:#x}")
        tail = (" [" + ", ".join(who) + "]") if who else ""
        more = self.extra.get("occurrences", 1)
        again = f" ({more} times in this launch)" if more > 1 else ""
        return f"[{self.category}] {where}: {self.message}{tail}{again}"


class EmulatorError(IsagenError):
    """A problem the emulator found while running a kernel (one line; ``.report`` has the fields)."""

    def __init__(self, report: Report | str):
        self.report = report if isinstance(report, Report) else None
        super().__init__(str(report))


def first_bad(mask: np.ndarray):
    """(wave_row, lanes) of the first row of a [waves, lanes] boolean mask with a True."""
    rows = np.nonzero(mask.reshape(mask.shape[0], -1).any(axis=1))[0]
    if rows.size == 0:
        return None, ()
    r = int(rows[0])
    return r, tuple(int(x) for x in np.nonzero(mask[r].reshape(-1))[0])
