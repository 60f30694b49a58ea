"""State of a batch of waves executed together.

All waves of a launch batch (the waves of one or more workgroups) live in shared arrays with the
wave as an inner axis, so that waves standing at the same PC execute each instruction as one numpy
operation over ``[waves, 64 lanes]``:

* ``V[r, w, lane]``   uint32, the unified VGPR/AGPR file: arch VGPRs ``0..accum_offset-1``, then the
                      AGPRs (``a[i]`` is ``V[accum_offset + i]``), as many as the descriptor allocates;
* ``S[code, w]``      uint32, the scalar file indexed by operand code: s0..s101, flat_scratch (102),
                      xnack_mask (104), vcc (106), ttmp0..15 (108..123), m0 (124), exec (126);
* ``SCC[w]``          uint32 0/1;
* ``EXEC[w, lane]``   bool, kept equal to ``S[126:128]`` (handlers that write exec re-sync it);
* ``pc[w]``           index of the next instruction; ``status[w]`` running / at barrier / done;
* ``lds[g]``          the LDS bytes of workgroup ``g`` of the batch (``wg[w]`` maps wave -> g).

A handler receives ``ws``: ``slice(None)`` when every wave of the batch takes part (views, no
copies) or an index array of the waves standing at the PC.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as host  # the host-side scheduling state stays numpy on every engine

if TYPE_CHECKING:
    import numpy as np
else:       # numpy, or CuPy while a CUDA launch runs (xp.py)
    from isagen.runtime.emu.xp import np

from isagen.runtime.emu import xp as X

if TYPE_CHECKING:       # annotations only: both modules import this one
    from isagen.runtime.emu.executor import RunContext
    from isagen.runtime.emu.sanitizer import Sanitizer

RUN, BARRIER, DONE = 0, 1, 2
ALL = slice(None)

EXEC_LO, EXEC_HI, VCC_LO, VCC_HI, M0 = 126, 127, 106, 107, 124


def mask_to_words(m: np.ndarray):
    """bool [n, 64] -> (lo, hi) uint32 [n] lane masks."""
    p = np.packbits(m, axis=-1, bitorder="little")
    w = p.view(np.uint32)
    return w[:, 0], w[:, 1]


def words_to_mask(lo, hi) -> np.ndarray:
    """uint32 lo/hi [n] -> bool [n, 64]."""
    if X.active() == "cuda":
        return X.words_to_mask(lo, hi)
    w = np.empty((np.shape(lo)[0], 2), np.uint32)
    w[:, 0] = lo
    w[:, 1] = hi
    return np.unpackbits(w.view(np.uint8), axis=-1, bitorder="little").view(np.bool_)


class Batch:
    """The register files, LDS and bookkeeping of ``W`` waves in ``G`` workgroups."""

    def __init__(self, nregs: int, W: int, G: int, lds_bytes: int):
        self.W, self.G = W, G
        self.V = np.zeros((max(nregs, 1), W, 64), np.uint32)
        self.S = np.zeros((128, W), np.uint32)
        self.SCC = np.zeros(W, np.uint32)
        self.EXEC = np.zeros((W, 64), np.bool_)
        self.exec_all = False
        self.pc = host.zeros(W, np.int64)
        self.status = host.zeros(W, np.int8)
        self.wg = host.zeros(W, np.int64)           # workgroup index within the batch
        self.wg_x = self.wg                         # the same on the engine's device (set by dispatch)
        self.wave_in_wg = host.zeros(W, np.int64)
        self.wg_id = host.zeros((G, 3), np.int64)   # workgroup ids (x, y, z) of each batch workgroup
        self.lds_bytes = lds_bytes
        self.lds = np.zeros((G, (max(lds_bytes, 4) + 15) // 16 * 16), np.uint8)
        self.icount = host.zeros(W, np.int64)       # instructions executed per wave (budget)
        self.mode = np.zeros(W, np.uint32)        # HW_REG_MODE as s_setreg left it
        self.san: Sanitizer | None = None         # the sanitizer's per-batch state, when on
        self.stats: RunContext | None = None      # the launch's statistics (shared)
        self.scratch: np.ndarray | None = None    # per-lane private memory (uint8 [W, 64, bytes])
        self.native_calls: dict = {}              # fused MFMA runs' native calls into this batch's V

    # ------------------------------------------------------------------ exec
    def sync_exec(self, ws=ALL) -> None:
        """Re-derive EXEC[ws] from S[126:128] after a write to exec."""
        self.EXEC[ws] = words_to_mask(self.S[EXEC_LO, ws], self.S[EXEC_HI, ws])
        self._exec_all()

    def _exec_all(self) -> None:
        # the cuda engine keeps the masked writes instead of a device-to-host read per write to exec, except
        # with the sanitizer on, whose initialisation map reads it as on the CPU engine (Sanitizer.mark_v)
        self.exec_all = False if X.active() == "cuda" and self.san is None else bool(self.EXEC.all())

    def set_exec(self, ws, m: np.ndarray) -> None:
        """Write EXEC[ws] from a lane mask (and S[126:128])."""
        self.EXEC[ws] = m
        lo, hi = mask_to_words(np.ascontiguousarray(self.EXEC[ws]))
        self.S[EXEC_LO, ws] = lo
        self.S[EXEC_HI, ws] = hi
        self._exec_all()

    def exec_mask(self, ws) -> np.ndarray:
        return self.EXEC[ws]

    # ------------------------------------------------------------------ lane masks in SGPR pairs
    def read_mask(self, code: int, ws) -> np.ndarray:
        return words_to_mask(self.S[code, ws], self.S[code + 1, ws])

    def write_mask(self, code: int, ws, m: np.ndarray) -> None:
        lo, hi = mask_to_words(np.ascontiguousarray(m))
        self.S[code, ws] = lo
        self.S[code + 1, ws] = hi
        if code == EXEC_LO:
            self.sync_exec(ws)
