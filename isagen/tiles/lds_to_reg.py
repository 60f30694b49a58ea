"""LDS -> registers in MFMA operand layout.

MFMA operand layout (AMD Matrix Instruction Calculator, reference notes §2a): for an operand of
``mi`` rows (the MFMA's M for A, N for B), lane ``L`` holds row ``L % mi`` and a contiguous run of
``kl`` k-values of lane group ``g = L // mi`` (``kl`` = 4 for the gfx942 bf16 MFMAs, 8 for gfx950's).
Which k-values an MFMA sums over is free as long as A and B agree: the tile primitives use that to
read ``e`` consecutive k per lane with one ``ds_read_b128`` (``e = 8``) or ``ds_read_b64`` (``e = 4``)
and feed ``e / kl`` MFMAs from it.  A *k-slice* is what one read covers for one fragment:
``ks = (64 / mi) * e`` k-values; lane ``L`` gets ``[s*ks + g*e, s*ks + g*e + e)``.

Three ways to fill a fragment:

* ``kmajor_reads``: the tile stores rows of k (A, and B of C = A·Bᵀ): one ``ds_read_b128``/``b64``;
* ``tr16_reads`` (gfx950): the tile stores rows of n (B of C = A·B): ``ds_read_b64_tr_b16`` reads
  4 n-consecutive bf16 per lane and transposes within each 16-lane block (dest lane ``i`` element ``e``
  <- source lane ``4e + i/4`` element ``i%4``), two per ``e = 8`` run;
* ``u16_reads`` (any target): the same from single ``ds_read_u16``s, two per dword, packed with one
  ``v_lshl_or_b32`` (the slow path gfx942 has).

``DsReads`` turns a list of reads into code: reads whose lane addresses differ by a constant share an
address VGPR and use the instruction's 16-bit offset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isagen.errors import SpecError
from isagen.tiles import lanexpr as lx
from isagen.tiles.lds_layout import LdsAccess, LdsLayout, access
from isagen.tiles.schedule import Op

READ_BYTES = {"ds_read_b128": 16, "ds_read_b64": 8, "ds_read_b64_tr_b16": 8, "ds_read_u16": 2}
MAX_DS_OFFSET = 0xFFFF


@dataclass(frozen=True)
class Fragment:
    """Geometry of one MFMA operand fragment as the reads fill it."""

    mi: int          # rows of the operand (MFMA M or N): 16 or 32
    kl: int          # k per lane per MFMA (2 * a_regs)
    e: int           # k per lane per read: 8 (ds_read_b128) or 4 (ds_read_b64)

    def __post_init__(self):
        if self.mi not in (16, 32):
            raise SpecError(f"MFMA operand of {self.mi} rows: isagen tiles know 16 and 32")
        if self.e % self.kl:
            raise SpecError(f"a read of {self.e} k per lane cannot feed MFMAs taking {self.kl} k per lane")

    @property
    def groups(self) -> int:
        return 64 // self.mi

    @property
    def ks(self) -> int:
        """k-values one read covers for one fragment (a k-slice)."""
        return self.groups * self.e

    @property
    def regs(self) -> int:
        """VGPRs one fragment slice occupies."""
        return self.e // 2

    @property
    def mfmas_per_slice(self) -> int:
        return self.e // self.kl

    def lane_k(self, s: int, lane=None):
        """First k of the lane's run in slice ``s`` (an int array for ``lane`` None: all 64 lanes)."""
        lanes = np.arange(64) if lane is None else lane
        return s * self.ks + (lanes // self.mi) * self.e


@dataclass
class ReadInst:
    """One read instruction of a fragment set: lane ``L`` reads logical ``(row, byte)`` of the tile in
    ``layout`` that starts at LDS byte ``base``."""

    key: tuple                # how the kernel names it: (stage, fragment, slice[, part])
    row: lx.Expr
    byte: lx.Expr
    base: int
    layout: LdsLayout
    mnemonic: str
    lds: tuple                # the LDS byte range it may touch (for the wait checker)
    what: str

    @property
    def width(self) -> int:
        return READ_BYTES[self.mnemonic]

    @property
    def addr(self) -> lx.Expr:
        """Absolute LDS byte address per lane."""
        return self.layout.offset(self.row, self.byte) + self.base

    def bind(self, regs: dict) -> None:
        """Give the named uniforms of ``row``/``byte`` their SGPRs."""
        self.row, self.byte = lx.bind(self.row, regs), lx.bind(self.byte, regs)


# ------------------------------------------------------------------------------ read lists
def kmajor_reads(name: str, layout: LdsLayout, stages, frag: Fragment, frag_rows, slices, row0: lx.Expr
                 ) -> list[ReadInst]:
    """Fragments of a k-contiguous tile: fragment ``f`` is rows ``row0 + frag_rows[f] + [0, mi)``."""
    mnem = {16: "ds_read_b128", 8: "ds_read_b64"}[frag.e * 2]
    L = lx.lane()
    out = []
    for st, region in enumerate(stages):
        for f, r in enumerate(frag_rows):
            for s in slices:
                row = row0 + r + (L % frag.mi)
                byte = (L // frag.mi + s * frag.groups) * (frag.e * 2)
                out.append(ReadInst((st, f, s), row, byte, region.offset, layout, mnem,
                                    (region.offset, region.offset + region.size), f"{name}[{f}] slice {s} <- lds_{region.name}"))
    return out


def tr16_reads(name: str, layout: LdsLayout, stages, frag: Fragment, frag_cols, slices, col0: lx.Expr
               ) -> list[ReadInst]:
    """Fragments of an n-contiguous tile (rows are k) through ``ds_read_b64_tr_b16``: part ``h`` of
    slice ``s`` fills the fragment's VGPRs ``[2h, 2h+2)`` with k ``g*8 + 4h + [0, 4)``."""
    if frag.e != 8:
        raise SpecError("ds_read_b64_tr_b16 fills runs of 8 k (two per fragment slice)")
    L = lx.lane()
    nb = frag.mi // 16                     # 16-lane blocks per fragment row range
    blk, src = L // 16, L % 16
    g, nsub = blk // nb, blk % nb
    out = []
    for st, region in enumerate(stages):
        for f, c in enumerate(frag_cols):
            for s in slices:
                for h in range(2):
                    krow = (src // 4) + g * 8 + (s * frag.ks + 4 * h)
                    n = col0 + c + nsub * 16 + (src % 4) * 4
                    out.append(ReadInst((st, f, s, h), krow, n * 2, region.offset, layout, "ds_read_b64_tr_b16",
                                        (region.offset, region.offset + region.size),
                                        f"{name}[{f}] slice {s} half {h} <- lds_{region.name} (transposed)"))
    return out


def u16_reads(name: str, layout: LdsLayout, stages, frag: Fragment, frag_cols, slices, col0: lx.Expr
              ) -> list[ReadInst]:
    """Fragments of an n-contiguous tile one bf16 at a time: element ``j`` of the lane's run."""
    L = lx.lane()
    out = []
    for st, region in enumerate(stages):
        for f, c in enumerate(frag_cols):
            for s in slices:
                for j in range(frag.e):
                    krow = (L // frag.mi) * frag.e + (s * frag.ks + j)
                    n = col0 + c + (L % frag.mi)
                    out.append(ReadInst((st, f, s, j), krow, n * 2, region.offset, layout, "ds_read_u16",
                                        (region.offset, region.offset + region.size),
                                        f"{name}[{f}] slice {s} k+{j} <- lds_{region.name} (one bf16)"))
    return out


# ------------------------------------------------------------------------------ code
class DsReads:
    """Address registers and ops for a list of reads.

    ``envs`` lists every value the wave-uniform inputs of the addresses can take (e.g. each wave's
    row offset): two reads share an address VGPR only if their lane addresses differ by the same
    constant in all of them (so the sharing is right for every wave)."""

    def __init__(self, k, name: str, reads: list[ReadInst], envs: list[dict]):
        self.k = k
        self.name = name
        self.reads = {r.key: r for r in reads}
        self.envs = envs
        vals = {r.key: np.stack([lx.evaluate(r.addr, e) for e in envs]) for r in reads}
        self.lanes = {key: tuple(map(tuple, v.tolist())) for key, v in vals.items()}   # for the bank check
        self.groups: list[ReadInst] = []       # representative read of each address VGPR
        self.where: dict = {}                  # key -> (group index, constant offset)
        order = sorted(reads, key=lambda r: int(vals[r.key].min()))
        for r in order:
            v = vals[r.key]
            for gi, rep in enumerate(self.groups):
                d = v - vals[rep.key]
                if (d == d.flat[0]).all() and 0 <= d.flat[0] <= MAX_DS_OFFSET:
                    self.where[r.key] = (gi, int(d.flat[0]))
                    break
            else:
                self.where[r.key] = (len(self.groups), 0)
                self.groups.append(r)
        self.addr = None

    def setup(self, em: lx.Emitter) -> None:
        self.addr = self.k.vgpr(len(self.groups), f"{self.name}_lds_addr")
        for gi, rep in enumerate(self.groups):
            em.emit(rep.addr, dst=self.addr[gi], comment=f"LDS address: {rep.what}")

    def release(self) -> None:
        self.k.free(self.addr)

    def op(self, key, dst) -> Op:
        r = self.reads[key]
        gi, off = self.where[key]

        def f():
            mods = {"offset": off} if off else {}
            inst = getattr(self.k, r.mnemonic)(dst, self.addr[gi], comment=r.what, lanes=self.lanes[key], **mods)
            inst.lds = r.lds
        return Op("ds_read", f, r.what)

    def accesses(self, env: dict, keys=None) -> list[LdsAccess]:
        sel = list(self.reads.values()) if keys is None else [self.reads[k] for k in keys]
        return self.accesses_of(sel, env)

    @staticmethod
    def accesses_of(reads, env: dict) -> list[LdsAccess]:
        """Lane addresses of ``reads`` (ReadInst list) with the uniform inputs from ``env``."""
        return [access(r.what, r.addr, r.width, "read", env, r.mnemonic) for r in reads]
