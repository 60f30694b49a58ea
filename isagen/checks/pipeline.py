"""The checks every finished kernel passes (run by ``KernelBuilder.finish``).

1. registers: no leaked allocation; unified VGPR+AGPR count within the 512-entry file; SGPRs within
   the addressable limit; LDS within the target's size;
2. hazards: the minimum ``s_nop``s are inserted (``isagen.checks.hazards.insert_nops``), then the finished
   program is verified independently (``isagen.checks.hazards.check_hazards``);
3. waits: every register written by an outstanding memory operation is waited for before it is read
   or overwritten, across loops and branches (``isagen.checks.waits.check_waits``);
4. kernel arguments: the metadata layout and the host packing come from the same list (by
   construction), and every argument fits the kernarg segment;
5. LDS banks: every DS / LDS-DMA instruction emitted with ``lanes=`` (its lane addresses per wave
   variant) is free of bank conflicts by the phase rules of ``isagen.checks.lds_banks`` (rows kept in
   ``Program.lds_banks``).

Returns a list of one-line problems (empty when the kernel is clean).
"""

from __future__ import annotations

from isagen.checks import hazards, lds_banks, waits
from isagen.checks.cfg import CFG


def register_problems(program) -> list[str]:
    t = program.target
    out = []
    if program.leaks:
        out.append(f"{program.name}: register allocation(s) never freed: {', '.join(program.leaks)}")
    if program.next_free_vgpr > t.unified_regs_per_lane:
        out.append(f"{program.name}: {program.vgprs} VGPRs + {program.agprs} AGPRs (accum_offset "
                   f"{program.accum_offset}) exceed the {t.unified_regs_per_lane}-entry register file")
    if program.lds_bytes > t.lds_bytes:
        out.append(f"{program.name}: LDS {program.lds_bytes} bytes exceeds {t.name}'s {t.lds_bytes}")
    return out


def finish_program(program) -> list[str]:
    problems = register_problems(program)
    before = program.items
    cfg = CFG(before)
    program.items, inserted = hazards.pad(before, program.target, cfg)
    if inserted:                                # s_nops went in: the positions moved
        _shift_allocation_positions(program, len(before), inserted)
        cfg = cfg.with_insertions(program.items, inserted)
    # the verifier and the wait check share the padded program's graph (each applies its own rules)
    problems += [str(v) for v in hazards.check_hazards(program.items, program.target, cfg)]
    problems += [str(v) for v in waits.check_waits(program.items, program.target, cfg)]
    program.lds_banks, bank_problems = lds_banks.check_program(program.items, program.target.name)
    problems += [f"{program.name}: {p}" for p in bank_problems]
    return problems


def _shift_allocation_positions(program, n_before: int, inserted: list[tuple[int, int]]) -> None:
    """Keep ``Allocation.allocated_at``/``freed_at`` indices into ``program.items`` after the hazard
    pass inserted ``s_nop``s (``inserted``: (old position, s_nops put before it), in order): position
    ``j`` of the old list becomes the new position of old item ``j`` (the end stays the end), so
    reports and the .s lifetimes name the right instructions."""
    new_pos: list[int] = []                     # old position -> new one, and the end
    prev = shift = 0
    for pos, n in inserted:
        new_pos.extend(range(prev + shift, pos + shift))
        shift += n                                # the s_nops go before item pos
        prev = pos
    new_pos.extend(range(prev + shift, n_before + shift + 1))
    for a in program.allocations:
        at = a.allocated_at
        a.allocated_at = new_pos[at if at < n_before else n_before]
        at = a.freed_at
        if at is not None:
            a.freed_at = new_pos[at if at < n_before else n_before]
