"""Rows of a ``[rows, cols]`` tensor in registers: lane layout, buffer windows, tail masks, row loop.

**Layout.**  A row is read by the ``waves_per_row`` waves of one *row group*, 16 bytes per lane per
access (``buffer_load_dwordx4``: 8 bf16/f16 or 4 fp32 elements).  Chunk ``j`` of wave ``w`` (0-based
within the row group), lane ``t`` holds the ``vec`` consecutive elements starting at column

    (j * waves_per_row + w) * 64 * vec + t * vec

so every load or store instruction of a wave covers 1 KiB of the row with no gap, and the
``chunks = cdiv(max_cols, 64 * vec * waves_per_row)`` chunks of a wave cover the widest row the kernel
takes.  The per-lane byte offsets of the chunks are the same for every row (``RowLanes.offsets``).

**Windows.**  Each tensor is read through a raw buffer resource (``isagen.tiles.buffer``) whose base is
the current row and whose ``num_records`` is exactly that row's bytes (``RowWindow``), so lanes whose
16 bytes lie past the row's end load zeros and their stores are dropped: a row of any width needs no
branch and no per-lane address arithmetic.  Rows past the end of the tensor get ``num_records = 0``.
Multi-dword accesses are range-checked per dword, so a row's bytes must be a multiple of 4 (an even
number of 16-bit elements).  The base is 48 bits wide, so tensors of any size work; only one row's
bytes must fit the 32-bit offset.

**Masks.**  Zeros are neutral for sums but not for a max, a mean-centred square or an exp, so kernels
that need it ask ``RowLanes.valid`` for the lanes whose element ``e`` of chunk ``j`` is inside the row:
``chunk_limit(j)`` = cols - (the lane's first column in chunk ``j``), one subtraction per chunk from a
limit computed once, then one compare per element against the inline constant ``e``.

**Loop.**  A workgroup owns ``rows_per_wg`` consecutive rows; its ``groups`` row groups take rows
``first + group``, ``first + group + groups``, ... (``RowLoop``).  Every wave runs the same number of
iterations (rows past the tensor's end run with empty windows), so barriers inside the loop balance.
"""

from __future__ import annotations

from dataclasses import dataclass

from isagen.isa.operands import VCC, Reg
from isagen.prims.convert import ELEMENT_BYTES
from isagen.tiles.buffer import BufferResource

LANES = 64
LANE_ACCESS_BYTES = 16            # bytes per lane per load/store: buffer_load_dwordx4


def log2(x: int) -> int:
    if x < 1 or x & (x - 1):
        raise ValueError(f"{x} is not a power of two")
    return x.bit_length() - 1


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def row_group_problems(p) -> list[tuple[str, str]]:
    """Spec problems of the row-group layout every row kernel shares (``waves``, ``waves_per_row``,
    ``rows_per_workgroup``), as (field, message) pairs for a generator's ``validate``."""
    if p.waves_per_row > p.waves:
        return [("waves_per_row", f"waves_per_row={p.waves_per_row} exceeds waves={p.waves}")]
    groups = p.waves // p.waves_per_row
    if p.rows_per_workgroup % groups:
        return [("rows_per_workgroup", f"rows_per_workgroup={p.rows_per_workgroup} is not a multiple of the "
                                       f"{groups} row groups (waves / waves_per_row = {p.waves}/{p.waves_per_row})")]
    return []


def row_length_requires(size: str, dtype: str, max_param: str | None = None, max_value: int = 0) -> list:
    """Launch requirements on a row length called ``size``: at least 1, at most the kernel's
    ``max_param`` (when it has one), and even for 16-bit elements (see "Windows" above)."""
    requires = [(f"{size} >= 1", f"{size} must be at least 1")]
    if max_param:
        requires.append((f"{size} <= {max_value}", f"{size} is above the kernel's {max_param}={max_value} "
                                                   f"(build one with a larger {max_param})"))
    return requires + even_length_requires(size, dtype)


def even_length_requires(size: str, dtype: str) -> list:
    """16-bit rows must have an even length: multi-dword accesses are range-checked per dword."""
    if ELEMENT_BYTES[dtype] != 2:
        return []
    return [(f"{size} % 2 == 0", f"{size} must be even for {dtype} (rows are range-checked per 4-byte dword)")]


@dataclass(frozen=True)
class RowGeometry:
    """Which columns each lane holds (pure numbers; see the module docstring)."""

    dtype: str
    max_cols: int
    waves_per_row: int = 1
    # bytes a lane holds per chunk: 16 (one access), or a multiple of 16 read by consecutive 16-byte
    # accesses (the quantization kernels: 16 elements per lane, so that their fp8 output is 16 bytes)
    lane_bytes: int = LANE_ACCESS_BYTES

    @property
    def esize(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def vec(self) -> int:
        """Elements per lane per chunk."""
        return self.lane_bytes // self.esize

    @property
    def accesses(self) -> int:
        """16-byte accesses per lane per chunk."""
        return self.lane_bytes // LANE_ACCESS_BYTES

    @property
    def span(self) -> int:
        """Columns one chunk covers over the row group's waves."""
        return LANES * self.vec * self.waves_per_row

    @property
    def chunks(self) -> int:
        return cdiv(self.max_cols, self.span)

    @property
    def per_dword(self) -> int:
        """Elements per dword (2 for 16-bit types)."""
        return 4 // self.esize

    @property
    def padded_cols(self) -> int:
        return self.chunks * self.span

    def column(self, wave: int, lane: int, chunk: int, element: int = 0) -> int:
        """The column of element ``element`` (0..vec-1) of ``chunk`` held by ``lane`` of ``wave``."""
        return (chunk * self.waves_per_row + wave) * LANES * self.vec + lane * self.vec + element

    def element_of(self, dword: int, half: int = 0) -> int:
        """Element index within a lane's vector of dword ``dword`` (0..3), half ``half`` (16-bit types)."""
        return dword * self.per_dword + half


class RowLanes:
    """Per-lane registers of the layout: chunk byte offsets and (optionally) the tail limit."""

    def __init__(self, k, geom: RowGeometry, wave_in_row: Reg | None, lane: Reg, *, name: str = "col"):
        self.k = k
        self.geom = geom
        self.lane = lane
        self.wave = wave_in_row
        g = geom
        lb = g.lane_bytes
        self.offsets = k.vgpr(g.chunks, f"{name}_offset", align=1, kernel=True)
        k.comment(f"lane t of wave w (of {g.waves_per_row} per row), chunk j: columns "
                  f"(j*{g.waves_per_row} + w)*{LANES * g.vec} + t*{g.vec}, {lb} bytes at byte "
                  f"(j*{g.waves_per_row} + w)*{LANES * lb} + t*{lb}")
        k.v_lshlrev_b32(self.offsets[0], log2(lb), lane, comment=f"chunk 0: lane x {lb} bytes")
        if g.waves_per_row > 1:
            with k.temps(s="s1") as t:
                k.s_lshl_b32(t.s, wave_in_row, log2(LANES * lb), comment=f"wave in the row x {LANES * lb} bytes")
                k.v_add_u32(self.offsets[0], t.s, self.offsets[0], comment="chunk 0 of this wave")
        step = g.waves_per_row * LANES * lb
        for j in range(1, g.chunks):
            k.v_add_u32(self.offsets[j], j * step, self.offsets[0], comment=f"chunk {j}: {j * step} bytes further")
        self.limit: Reg | None = None

    def make_limit(self, cols: Reg) -> None:
        """``limit`` = cols - (first column of this lane), for ``valid`` (signed)."""
        k, g = self.k, self.geom
        self.limit = k.vgpr(1, "col_limit", kernel=True)
        k.v_lshlrev_b32(self.limit, log2(g.vec), self.lane, comment=f"lane x {g.vec}: its first column in chunk 0")
        if g.waves_per_row > 1:
            with k.temps(s="s1") as t:
                k.s_lshl_b32(t.s, self.wave, log2(LANES * g.vec), comment=f"wave in the row x {LANES * g.vec}")
                k.v_add_u32(self.limit, t.s, self.limit)
        k.v_sub_u32(self.limit, cols, self.limit, comment="columns left from this lane's first: element e of "
                                                          "chunk j is inside the row iff j*span + e < this")

    def count_used(self, cols: Reg) -> None:
        """``used`` (SGPR) = the chunks that hold columns of a ``cols``-wide row: cdiv(cols, span).  Passes
        over the row skip the rest (``past_end``): a row narrower than the registers costs only the
        instructions of its own chunks (its loads past the end are issued but move nothing)."""
        k, span = self.k, self.geom.span
        self.used = k.sgpr(1, "chunks_used", kernel=True)
        k.s_add_u32(self.used, cols, span - 1)
        k.s_lshr_b32(self.used, self.used, log2(span), comment=f"chunks in use: cdiv(cols, {span})")

    def past_end(self, chunk: int, label) -> None:
        """Branch to ``label`` when ``chunk`` holds no column of the row (from chunk 1 on)."""
        if chunk == 0:
            return
        self.k.s_cmp_ge_u32(chunk, self.used, comment=f"scc: chunk {chunk} is past the row's end")
        self.k.s_cbranch_scc1(label)

    def partial_last(self, cols: Reg) -> None:
        """scc = the last chunk in use is partly past the row's end (elements need masks)."""
        with self.k.temps(s="s1") as t:
            self.k.s_and_b32(t.s, cols, self.geom.span - 1, comment=f"scc: cols is not a multiple of {self.geom.span}")

    def chunk_limit(self, chunk: int, dst: Reg) -> Reg:
        """``dst`` = columns left from this lane's first element of ``chunk`` (for ``valid``)."""
        if self.limit is None:
            raise RuntimeError("RowLanes.chunk_limit needs make_limit(cols) first")
        if chunk == 0:
            return self.limit
        self.k.v_subrev_u32(dst, chunk * self.geom.span, self.limit, comment=f"columns left from chunk {chunk}")
        return dst

    def valid(self, limit: Reg, element: int, dst=VCC) -> None:
        """``dst`` (vcc or an SGPR pair) = lanes whose element ``element`` (0..vec-1) of the chunk whose
        ``chunk_limit`` is ``limit`` lies inside the row."""
        self.k.v_cmp_lt_i32(dst, element, limit, comment=f"element {element} inside the row?")


class RowWindow:
    """A buffer resource over one row (or a block of rows) of a tensor, moved row by row."""

    def __init__(self, k, name: str, arg_offset: int):
        self.k = k
        self.name = name
        self.rsrc = BufferResource(k, name)
        self.rsrc.load_pointer(arg_offset)

    @property
    def regs(self) -> Reg:
        return self.rsrc.regs

    def start(self, first_row: Reg | int, row_bytes: Reg | int, records: Reg | int, *, extra=None) -> None:
        """After the pointer has landed: base = pointer + first_row*row_bytes (+ ``extra`` bytes), 48-bit;
        ``num_records`` = ``records``."""
        k = self.k
        with k.temps(lo="s1", hi="s1") as t:
            k.s_mul_i32(t.lo, first_row, row_bytes, comment=f"{self.name}: first row's byte offset, low word")
            k.s_mul_hi_u32(t.hi, first_row, row_bytes, comment=f"{self.name}: high word (tensors past 4 GiB)")
            k.s_add_u32(self.regs[0], self.regs[0], t.lo, comment=f"{self.name}: base += offset")
            k.s_addc_u32(self.regs[1], self.regs[1], t.hi)
        if extra is not None:
            self.rsrc.add_base(extra, f"{self.name}: + {extra if isinstance(extra, int) else extra} bytes")
        self.rsrc.finish(records)

    def advance(self, step: Reg | int) -> None:
        self.rsrc.add_base(step, f"{self.name}: base to the next row")

    def set_records(self, records: Reg | int) -> None:
        self.k.s_mov_b32(self.regs[2], records, comment=f"{self.name}: num_records (0 past the last row)")


def load_chunks(k, regs: Reg, lanes: RowLanes, window: RowWindow, what: str) -> None:
    """One ``buffer_load_dwordx4`` per chunk of the row into ``regs`` (4 dwords per chunk)."""
    for j in range(lanes.geom.chunks):
        k.buffer_load_dwordx4(regs[4 * j:4 * j + 4], lanes.offsets[j], window.regs, 0, offen=True,
                              comment=f"{what}, chunk {j}")


def store_chunk(k, regs: Reg, lanes: RowLanes, window: RowWindow, j: int, what: str) -> None:
    k.buffer_store_dwordx4(regs[4 * j:4 * j + 4], lanes.offsets[j], window.regs, 0, offen=True,
                           comment=f"{what}, chunk {j} (lanes past the row's end are dropped)")


class RowLoop:
    """The rows a workgroup's row groups walk; see the module docstring.

    ``rows`` (SGPR) is the tensor's row count; the workgroup takes rows ``wg*rows_per_wg ..`` and row
    group ``group`` (SGPR) the rows ``first + group + i*groups``.  ``row`` holds the current row;
    ``records`` gives a window's ``num_records`` for it."""

    def __init__(self, k, *, rows: Reg, rows_per_wg: int, groups: int, group: Reg | None, wg_id: Reg):
        self.k = k
        self.groups = groups
        self.rows = rows
        self.row = k.sgpr(1, "row", kernel=True)
        self.trips = k.sgpr(1, "rows_left", kernel=True)
        iters = rows_per_wg // groups
        k.comment(f"rows: workgroup g takes rows g*{rows_per_wg} ..; its {groups} row group(s) take every "
                  f"{groups}th, {iters} each (fewer in the last workgroup)")
        with k.temps(first="s1", left="s1") as t:
            k.s_mul_i32(t.first, wg_id, rows_per_wg, comment="the workgroup's first row")
            k.s_sub_u32(t.left, rows, t.first, comment="rows from there to the end (> 0)")
            if groups > 1:
                k.s_add_u32(t.left, t.left, groups - 1)
                k.s_lshr_b32(self.trips, t.left, log2(groups),
                             comment=f"iterations to cover them: cdiv(rows left, {groups})")
            else:
                k.s_mov_b32(self.trips, t.left, comment="iterations to cover them")
            k.s_min_u32(self.trips, self.trips, iters, comment=f"at most {iters}: the same count in every wave")
            if group is not None and groups > 1:
                k.s_add_u32(self.row, t.first, group, comment="this row group's first row")
            else:
                k.s_mov_b32(self.row, t.first, comment="this wave's first row")
        self.label = k.label("row")

    def records(self, dst: Reg, row_bytes: Reg) -> None:
        """``dst`` = ``row_bytes`` if the current row exists, else 0 (an empty window)."""
        k = self.k
        k.s_cmp_lt_u32(self.row, self.rows, comment="scc: this row exists")
        k.s_cselect_b32(dst, row_bytes, 0, comment="its bytes, or 0: nothing is read or written")

    def top(self) -> None:
        self.k.place(self.label)

    def bottom(self, windows: list[RowWindow], step: Reg) -> None:
        """Move to the next row: row += groups, every window's base += ``step``; loop while rows are left."""
        k = self.k
        k.comment("next row")
        k.s_add_u32(self.row, self.row, self.groups, comment=f"{self.groups} row group(s) further")
        for w in windows:
            w.advance(step)
        k.s_sub_u32(self.trips, self.trips, 1, comment="one row done")
        k.s_cmp_lg_u32(self.trips, 0, comment="scc: more rows")
        k.s_cbranch_scc1(self.label, comment="next row")


def lane_and_wave(k) -> tuple[Reg, Reg]:
    """(lane VGPR = tid & 63, wave SGPR = tid >> 6); frees ``k.tid``."""
    lane = k.vgpr(1, "lane", kernel=True)
    wave = k.sgpr(1, "wave", kernel=True)
    k.v_and_b32(lane, LANES - 1, k.tid, comment="lane within the wave")
    k.v_readfirstlane_b32(wave, k.tid, comment="the wave's first work-item (no VALU wrote tid: no wait state)")
    k.s_lshr_b32(wave, wave, log2(LANES), comment="wave within the workgroup")
    k.free(k.tid)
    return lane, wave


class Pending:
    """The VMEM operations a wave has issued, in order, so a wait for one of them can name the exact
    ``vmcnt``: the number of VMEM operations issued after it (they complete in order).  Counts above
    the counter's maximum are clamped (a stricter wait)."""

    def __init__(self, k) -> None:
        self.k = k
        self.ops: list[str] = []

    def issue(self, tag: str) -> None:
        self.ops.append(tag)

    def reset(self) -> None:
        """Forget everything (after a ``vmcnt(0)``, or where every older operation is known done)."""
        self.ops = []

    def wait_for(self, tag: str, why: str) -> None:
        if tag not in self.ops:
            raise ValueError(f"no pending VMEM operation '{tag}'")
        idx = len(self.ops) - 1 - self.ops[::-1].index(tag)
        younger = len(self.ops) - 1 - idx
        n = min(younger, self.k.target.max_vmcnt)
        self.k.wait(vmcnt=n, why=why + (f" ({younger} younger VMEM operation{'s' * (younger != 1)} may still "
                                         f"be in flight)" if younger else ""))
        del self.ops[:idx + 1]


def load_vectors_once(k, vectors: list[tuple[str, Reg, Reg]], lanes: RowLanes, *, waves: int, wave: Reg,
                      staging: Reg, region) -> None:
    """Bring ``[cols]`` vectors (a norm's weight and bias) into every wave's row layout, reading each
    from memory once per workgroup instead of once per wave.

    ``vectors``: ``(name, buffer resource registers, destination VGPRs)`` with ``lane_bytes / 4 * chunks``
    dwords each (a lane's bytes of a chunk: one ``ds_read_b128`` per 16).
    The workgroup's ``waves`` waves read consecutive 1 KiB pieces (16 bytes per lane) into ``staging``
    (free VGPRs, at least 4 per round), write them to ``region`` (``waves`` KiB of LDS), and after a
    barrier every wave copies the pieces its chunks need (``ds_read_b128``); a second barrier before
    the region is written again.  A vector of ``P`` KiB takes ``cdiv(P, waves)`` rounds."""
    g = lanes.geom
    per_chunk = g.waves_per_row * g.accesses             # 1 KiB pieces of one chunk (all waves of a row group)
    if per_chunk > waves:
        raise ValueError(f"a chunk of {per_chunk} KiB does not fit one staging round of {waves} KiB")
    piece = LANES * LANE_ACCESS_BYTES                        # one wave's 1 KiB
    pieces = g.chunks * per_chunk                       # 1 KiB pieces of the padded vector
    rounds = cdiv(pieces, waves)
    stride = waves * piece
    if staging.count < 4 * rounds:
        raise ValueError(f"staging needs {4 * rounds} VGPRs")
    if region.size < stride:
        raise ValueError(f"the staging region needs {stride} bytes")
    lds = (region.offset, region.offset + region.size)
    pending = Pending(k)
    k.comment(f"{', '.join(n for n, _, _ in vectors)}: read once per workgroup ({waves} KiB per round, "
              f"{rounds} round(s) each), shared through LDS")
    with k.temps(src="v1", addr="v1", lds_w="v1", s="s1") as t:
        k.v_lshlrev_b32(t.src, log2(LANE_ACCESS_BYTES), lanes.lane, comment="lane x 16 bytes")
        k.s_lshl_b32(t.s, wave, log2(piece), comment="wave x 1 KiB")
        k.v_add_u32(t.src, t.s, t.src, comment="this lane's 16 bytes of round 0")
        k.v_add_u32(t.lds_w, region.offset, t.src, comment="where they go in LDS")
        written = False
        for name, rsrc, dst in vectors:
            for n in range(rounds):
                src = t.src
                if n:
                    k.v_add_u32(t.addr, n * stride, t.src, comment=f"{name}: round {n}")
                    src = t.addr
                k.buffer_load_dwordx4(staging[4 * n:4 * n + 4], src, rsrc, 0, offen=True,
                                      comment=f"{name}: round {n} (zeros past the end)")
                pending.issue(f"{name}{n}")
            for n in range(rounds):
                pending.wait_for(f"{name}{n}", f"{name}: round {n} has landed")
                if written:
                    k.wait(lgkmcnt=0, why="this wave's copies out of LDS are done")
                    k.barrier(why="every wave has copied the previous round out of LDS")
                k.ds_write_b128(t.lds_w, staging[4 * n:4 * n + 4], lds=lds, comment=f"{name}: round {n} to LDS")
                written = True
                k.wait(lgkmcnt=0, why=f"{name}: round {n} is in LDS")
                k.barrier(why=f"{name}: round {n} is in LDS for every wave")
                for j in range(g.chunks):
                    first = j * per_chunk                  # the chunk's first piece (wave 0 of the row group)
                    if not n * waves <= first < (n + 1) * waves:
                        continue
                    k.v_add_u32(t.addr, (region.offset - n * stride) & 0xFFFFFFFF, lanes.offsets[j],
                                comment=f"{name}: chunk {j} in round {n}'s LDS copy")
                    dw = 4 * g.accesses
                    for a in range(g.accesses):
                        k.ds_read_b128(dst[dw * j + 4 * a:dw * j + 4 * a + 4], t.addr, offset=LANE_ACCESS_BYTES * a,
                                       lds=lds, comment=f"{name}: chunk {j}" + (f", bytes {16 * a}.." if a else ""))
        k.wait(lgkmcnt=0, why="the vectors are in VGPRs")
