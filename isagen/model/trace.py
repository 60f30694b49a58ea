"""Per-wave instruction streams of an emulator launch, as the cycle model's operations.

:class:`Recorder` is the emulator's trace hook (``Module.trace``): before each basic block a group of
waves runs, it appends the block to each of those waves' streams.  :func:`op_of` turns a compiled
instruction into an :class:`Op` -- what the cycle model needs of it: its kind, how long it holds its
pipe, the bytes it moves and, for ``s_waitcnt``, the counts it waits for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from isagen.targets import get_target

# operation kinds
SALU, VALU, TRANS, MFMA, DS, VLOAD, VSTORE, LDS_DMA, SMEM, WAIT, BARRIER, NOP, BRANCH, END, OTHER = range(15)
KIND_NAMES = ("salu", "valu", "trans", "mfma", "ds", "vmem_load", "vmem_store", "lds_dma", "smem", "waitcnt",
              "barrier", "nop", "branch", "end", "other")


@dataclass(frozen=True)
class Op:
    kind: int
    busy: int = 0          # cycles its pipe is held (MFMA: passes x 4; VALU: 4; s_nop N: wait states)
    nbytes: int = 0        # bytes moved (VMEM/LDS DMA/DS: per wave, all 64 lanes)
    vm: int = 63           # s_waitcnt vmcnt
    lgkm: int = 15         # s_waitcnt lgkmcnt
    lgkm_too: bool = False  # a FLAT access also counts on lgkmcnt
    name: str = ""


_WIDTH = (("dwordx4", 16), ("dwordx3", 12), ("dwordx2", 8), ("b128", 16), ("b96", 12), ("b64", 8),
          ("dword", 4), ("b32", 4), ("short", 2), ("b16", 2), ("ubyte", 1), ("sbyte", 1), ("byte", 1),
          ("b8", 1))


def lane_bytes(name: str) -> int:
    """Bytes one lane moves for a memory mnemonic (``buffer_load_dwordx4`` 16, ``ds_read2_b64`` 16)."""
    n = 2 if re.search(r"(read|write)2", name) else 1
    for key, w in _WIDTH:
        if key in name:
            return w * n
    return 4 * n


def op_of(step, target: str) -> Op:
    """The operation of a compiled emulator step (``CompiledStep``)."""
    inst = step.inst
    name = inst.name
    cat = step.cat
    if cat == "mfma":
        return Op(MFMA, 4 * get_target(target).mfma(name).passes, name=name)
    if cat == "valu":
        return Op(VALU, 4, name=name)
    if cat == "trans":
        return Op(TRANS, 4, name=name)
    if cat == "salu":
        return Op(SALU, 1, name=name)
    if cat == "nop":
        return Op(NOP, step.nop_slots, name=name)
    if cat == "waitcnt":
        f = step.flags
        return Op(WAIT, vm=int(f.get("vmcnt", 63)), lgkm=int(f.get("lgkmcnt", 15)), name=name)
    if cat == "barrier":
        return Op(BARRIER, name=name)
    if cat == "branch":
        return Op(END if name.startswith("s_endpgm") else BRANCH, name=name)
    if cat == "smem":
        return Op(SMEM, nbytes=lane_bytes(name), name=name)
    if cat == "ds":
        return Op(DS, nbytes=64 * lane_bytes(name), name=name)
    if cat == "lds_dma":
        return Op(LDS_DMA, nbytes=64 * lane_bytes(name), name=name)
    if cat in ("vmem", "flat"):
        also = bool(step.flags.get("also_lgkm")) if isinstance(step.flags, dict) else False
        kind = VLOAD if (step.is_load or "load" in name) else VSTORE
        return Op(kind, nbytes=64 * lane_bytes(name), lgkm_too=also, name=name)
    return Op(OTHER, name=name)


class Recorder:
    """The emulator's trace hook: the sequence of basic blocks each wave ran.

    ``streams[(wg_x, wg_y, wg_z, wave_in_workgroup)]`` is a list of ``CompiledBlock``s in execution order.
    """

    def __init__(self):
        self.streams: dict[tuple[int, int, int, int], list] = {}
        self._st = None
        self._wave_keys: list = []

    def __call__(self, st, ws, block) -> None:
        keys = self._wave_keys
        if self._st is not st:
            keys = [(int(st.wg_id[st.wg[w]][0]), int(st.wg_id[st.wg[w]][1]), int(st.wg_id[st.wg[w]][2]),
                     int(st.wave_in_wg[w])) for w in range(st.W)]
            for k in keys:
                self.streams.setdefault(k, [])
            self._st, self._wave_keys = st, keys
        if isinstance(ws, slice):
            for k in keys:
                self.streams[k].append(block)
        else:
            for w in np.asarray(ws).tolist():
                self.streams[keys[w]].append(block)

    def ops(self, target: str) -> dict[tuple[int, int, int, int], list[Op]]:
        """Each wave's stream as operations (one list per wave)."""
        cache: dict[int, list[Op]] = {}
        out = {}
        for key, blocks in self.streams.items():
            seq: list[Op] = []
            for b in blocks:
                o = cache.get(id(b))
                if o is None:
                    o = cache[id(b)] = [op_of(s, target) for s in b.steps]
                seq.extend(o)
            out[key] = seq
        return out


def workgroups(streams: dict) -> dict[tuple[int, int, int], list[list]]:
    """Group per-wave streams by workgroup: ``{(x, y, z): [wave0 ops, wave1 ops, ...]}``."""
    out: dict[tuple[int, int, int], list] = {}
    for (x, y, z, _w), seq in sorted(streams.items(), key=lambda kv: kv[0]):
        out.setdefault((x, y, z), []).append(seq)
    return out
