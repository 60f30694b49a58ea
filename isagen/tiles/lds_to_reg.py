"""LDS -> registers in MFMA operand layout.

MFMA operand layout (AMD Matrix Instruction Calculator, reference notes §2a): for an operand of
``rows`` rows (the MFMA's M for A, N for B), lane ``L`` holds row ``L % rows`` and a contiguous run of
``k_per_mfma`` k-values of lane group ``g = L // rows`` (4 for the gfx942 bf16 MFMAs, 8 for gfx950's).
Which k-values an MFMA sums over is free as long as A and B agree: the tile primitives use that to
read ``k_per_read`` consecutive k per lane with one ``ds_read_b128`` (8) or ``ds_read_b64`` (4) and
feed ``k_per_read / k_per_mfma`` MFMAs from it.  A *k-slice* is what one read covers for one fragment:
``slice_k = (64 / rows) * k_per_read`` k-values; lane ``L`` gets ``k_per_read`` of them from
``s*slice_k + g*k_per_read``.

Three ways to fill a fragment:

* ``kmajor_reads``: the tile stores rows of k (A, and B of C = A·Bᵀ): one ``ds_read_b128``/``b64``;
* ``tr16_reads`` (gfx950): the tile stores rows of n (B of C = A·B): ``ds_read_b64_tr_b16`` reads
  4 n-consecutive bf16 per lane and transposes within each 16-lane block (dest lane ``i`` element ``e``
  <- source lane ``4e + i/4`` element ``i%4``), two per run of 8 k;
* ``u16_reads`` (any target): the same from single ``ds_read_u16``s, two per dword, packed with one
  ``v_lshl_or_b32`` (the slow path gfx942 has).

``DsReads`` turns a list of reads into code: reads whose lane addresses differ by a constant share an
address VGPR and use the instruction's 16-bit offset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from isagen.errors import SpecError
from isagen.isa.operands import Reg
from isagen.records import record, value_methods
from isagen.tiles import lanexpr as lx
from isagen.tiles.lds_layout import LdsAccess, LdsLayout, access
from isagen.tiles.schedule import Op

if TYPE_CHECKING:
    pass

READ_BYTES = {"ds_read_b128": 16, "ds_read_b64": 8, "ds_read_b64_tr_b16": 8, "ds_read_u16": 2}
MAX_DS_OFFSET = 0xFFFF


@value_methods
@record(frozen=True, repr=False, eq=False)
class Fragment:
    """Geometry of one MFMA operand fragment as the reads fill it."""

    rows: int         # rows of the operand (MFMA M or N): 16 or 32
    k_per_mfma: int   # k per lane per MFMA (a_regs * 4 / elem_bytes)
    k_per_read: int   # k per lane per k-slice: 16 bytes (one ds_read_b128), 8 bytes (ds_read_b64), or 32
                      # bytes (two ds_read_b128 *parts*: the 32-byte operand of an fp8 f8f6f4 MFMA)
    elem_bytes: int = 2   # 2: bf16/f16; 1: fp8/bf8

    def __post_init__(self):
        if self.rows not in (16, 32):
            raise SpecError(f"MFMA operand of {self.rows} rows: isagen tiles know 16 and 32")
        if self.k_per_read % self.k_per_mfma:
            raise SpecError(f"a read of {self.k_per_read} k per lane cannot feed MFMAs taking {self.k_per_mfma} k "
                            "per lane")
        if self.read_bytes not in (8, 16, 32):
            raise SpecError(f"a k-slice of {self.read_bytes} bytes per lane: isagen tiles read 8, 16 or 32")

    @property
    def read_bytes(self) -> int:
        """Bytes per lane per k-slice."""
        return self.k_per_read * self.elem_bytes

    @property
    def parts(self) -> int:
        """Read instructions per k-slice (16 bytes at most each)."""
        return max(1, self.read_bytes // 16)

    @property
    def part_bytes(self) -> int:
        return self.read_bytes // self.parts

    @property
    def lane_groups(self) -> int:
        return 64 // self.rows

    @property
    def slice_k(self) -> int:
        """k-values one read covers for one fragment (a k-slice)."""
        return self.lane_groups * self.k_per_read

    @property
    def regs(self) -> int:
        """VGPRs one fragment slice occupies."""
        return self.read_bytes // 4

    @property
    def mfmas_per_slice(self) -> int:
        return self.k_per_read // self.k_per_mfma

    def lane_k(self, s: int, lane=None, part: int = 0):
        """First k of the lane's run in slice ``s`` (an int array for ``lane`` None: all 64 lanes); with
        several parts, part ``h`` is the run of ``part_bytes / elem_bytes`` k at ``(s*parts + h)*lane_groups
        + g`` runs of that size (the parts of a slice are laid out as consecutive one-read slices)."""
        import numpy as np

        lanes = np.arange(64) if lane is None else lane
        run = self.part_bytes // self.elem_bytes
        return (s * self.parts + part) * self.lane_groups * run + (lanes // self.rows) * run


@value_methods
@record(repr=False, eq=False)
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
    """Fragments of a k-contiguous tile: fragment ``f`` is rows ``row0 + frag_rows[f]`` onwards
    (``frag.rows`` of them).  A slice of several parts (32 bytes per lane: fp8 f8f6f4) is read as that
    many one-read slices side by side (keys ``(stage, f, s, part)``); A and B are read alike, so the
    MFMA pairs the same k whatever order its lanes hold them in."""
    pb = frag.part_bytes
    mnem = {16: "ds_read_b128", 8: "ds_read_b64"}[pb]
    L = lx.lane()
    out = []
    for st, region in enumerate(stages):
        for f, r in enumerate(frag_rows):
            for s in slices:
                for h in range(frag.parts):
                    row = row0 + r + (L % frag.rows)
                    byte = (L // frag.rows + (s * frag.parts + h) * frag.lane_groups) * pb
                    key = (st, f, s) if frag.parts == 1 else (st, f, s, h)
                    part = "" if frag.parts == 1 else f" part {h}"
                    out.append(ReadInst(key, row, byte, region.offset, layout, mnem,
                                        (region.offset, region.offset + region.size),
                                        f"{name}[{f}] slice {s}{part} <- lds_{region.name}"))
    return out


def tr16_reads(name: str, layout: LdsLayout, stages, frag: Fragment, frag_cols, slices, col0: lx.Expr
               ) -> list[ReadInst]:
    """Fragments of an n-contiguous tile (rows are k) through ``ds_read_b64_tr_b16``: part ``h`` of
    slice ``s`` fills the fragment's VGPRs ``[2h, 2h+2)`` with k ``g*8 + 4h + [0, 4)``."""
    if frag.k_per_read != 8:
        raise SpecError("ds_read_b64_tr_b16 fills runs of 8 k (two per fragment slice)")
    L = lx.lane()
    nb = frag.rows // 16                   # 16-lane blocks per fragment row range
    blk, src = L // 16, L % 16
    g, nsub = blk // nb, blk % nb
    out = []
    for st, region in enumerate(stages):
        for f, c in enumerate(frag_cols):
            for s in slices:
                for h in range(2):
                    krow = (src // 4) + g * 8 + (s * frag.slice_k + 4 * h)
                    n = col0 + c + nsub * 16 + (src % 4) * 4
                    out.append(ReadInst((st, f, s, h), krow, n * 2, region.offset, layout, "ds_read_b64_tr_b16",
                                        (region.offset, region.offset + region.size),
                                        f"{name}[{f}] slice {s} half {h} <- lds_{region.name} (transposed)"))
    return out


def key_order_tr16_reads(name: str, layout: LdsLayout, stages, d_cols, slices, col0: lx.Expr | None = None
                         ) -> list[ReadInst]:
    """The B operand of ``O += P·V`` (rows = d, k = keys) from a key-major tile with ``ds_read_b64_tr_b16``,
    the keys in the order the lane's P holds them when P is a 16x16 MFMA accumulator turned operand.

    A 16x16 accumulator fed B as src0 gives lane ``L`` (lane group ``g = L / 16``) of tile ``fn`` the
    keys ``16 fn + 4 g + [0, 4)`` (``tiles.mma.acc_coords``); an 8-k operand slice ``s`` (one gfx950
    MFMA) is tiles ``2s`` and ``2s + 1``, so part ``h`` of the V slice brings keys ``16 (2s + h) + 4 g +
    [0, 4)`` of the lane's column ``d``.  A transposing read gives destination lane ``i`` of a 16-lane
    block element ``e`` of source lane ``4e + i/4``: source lane ``src`` reads key row ``.. + src/4`` at
    columns ``(src % 4) * 4 ..``, which lands column ``i``, keys ``e = 0..3``, in lane ``i``.  ``col0``: a
    wave-uniform first column added to ``d_cols`` (a lane expression; 0 by default)."""
    L = lx.lane()
    g, src = L // 16, L % 16

    out = []
    for st, region in enumerate(stages):
        for f, c in enumerate(d_cols):
            for s in slices:
                for h in range(2):
                    krow = src // 4 + g * 4 + 16 * (2 * s + h)
                    n = (src % 4) * 4 + c if col0 is None else (src % 4) * 4 + c + col0
                    out.append(ReadInst((st, f, s, h), krow, n * 2, region.offset, layout, "ds_read_b64_tr_b16",
                                        (region.offset, region.offset + region.size),
                                        f"{name}[{f}] keys {32 * s + 16 * h}.. <- lds_{region.name} (transposed)"))
    return out


def u16_reads(name: str, layout: LdsLayout, stages, frag: Fragment, frag_cols, slices, col0: lx.Expr
              ) -> list[ReadInst]:
    """Fragments of an n-contiguous tile one bf16 at a time: element ``j`` of the lane's run."""
    L = lx.lane()
    out = []
    for st, region in enumerate(stages):
        for f, c in enumerate(frag_cols):
            for s in slices:
                for j in range(frag.k_per_read):
                    krow = (L // frag.rows) * frag.k_per_read + (s * frag.slice_k + j)
                    n = col0 + c + (L % frag.rows)
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
        vals = {r.key: tuple(lx.lane_values(r.addr, e) for e in envs) for r in reads}
        self.lanes = vals                      # per env, the 64 lane addresses (for the bank check)
        self.groups: list[ReadInst] = []       # representative read of each address VGPR
        self.where: dict = {}                  # key -> (group index, constant offset)
        order = sorted(reads, key=lambda r: min(map(min, vals[r.key])))
        for r in order:
            v = vals[r.key]
            for gi, rep in enumerate(self.groups):
                d = _constant_difference(v, vals[rep.key])
                if d is not None and 0 <= d <= MAX_DS_OFFSET:
                    self.where[r.key] = (gi, d)
                    break
            else:
                self.where[r.key] = (len(self.groups), 0)
                self.groups.append(r)
        self.addr: Reg | None = None           # the address VGPRs, one per group (allocated by ``setup``)

    def setup(self, em: lx.Emitter) -> None:
        addr = self.addr = self.k.vgpr(len(self.groups), f"{self.name}_lds_addr")
        for gi, rep in enumerate(self.groups):
            em.emit(rep.addr, dst=addr[gi], comment=f"LDS address: {rep.what}")

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

    def fragment_ops(self, stage: int, f: int, s: int, dst, hi=None) -> list[Op]:
        """Ops that fill fragment ``f``'s k-slice ``s`` (``dst``, ``Fragment.regs`` VGPRs) from LDS
        ``stage``, whichever read list this was built from: one read (``kmajor_reads``), two transposed
        halves (``tr16_reads``), or one ``ds_read_u16`` per k (``u16_reads``: even k into ``dst``, odd k
        into ``hi``, to be joined by ``join_u16_pairs`` once the reads have landed)."""
        if (stage, f, s) in self.reads:
            return [self.op((stage, f, s), dst)]
        parts: list[tuple[int, int, int, int]] = []      # keys of the read list's parts, in order
        while (stage, f, s, len(parts)) in self.reads:
            parts.append((stage, f, s, len(parts)))
        mnem = self.reads[parts[0]].mnemonic
        if mnem in ("ds_read_b64_tr_b16", "ds_read_b128", "ds_read_b64"):
            w = READ_BYTES[mnem] // 4
            return [self.op(key, dst[w * h:w * h + w]) for h, key in enumerate(parts)]
        return [self.op(key, dst[j // 2] if j % 2 == 0 else hi[j // 2]) for j, key in enumerate(parts)]

    def accesses(self, env: dict, keys=None) -> list[LdsAccess]:
        sel = list(self.reads.values()) if keys is None else [self.reads[k] for k in keys]
        return self.accesses_of(sel, env)

    @staticmethod
    def accesses_of(reads, env: dict) -> list[LdsAccess]:
        """Lane addresses of ``reads`` (ReadInst list) with the uniform inputs from ``env``."""
        return [access(r.what, r.addr, r.width, "read", env, r.mnemonic) for r in reads]


def _constant_difference(v, w) -> int | None:
    """``v - w`` when it is the same in every lane of every env (``v``, ``w``: per env, the lane values),
    else None."""
    d = v[0][0] - w[0][0]
    for xs, ys in zip(v, w):
        for x, y in zip(xs, ys):
            if x - y != d:
                return None
    return d


def join_u16_pairs(k, dst, hi, pairs: int, what: str) -> None:
    """After ``u16_reads`` have landed: the odd k of each pair (in ``hi``) into the high half of its
    dword in ``dst`` (``v_lshl_or_b32``).  Reading it straight into the high half
    (``ds_read_u16_d16_hi``) would write a register an outstanding DS load is writing too."""
    for v in range(pairs):
        k.v_lshl_or_b32(dst[v], hi[v], 16, dst[v], comment=f"{what}: k pair {v} (high half into place)")
