"""Global -> LDS without VGPRs: ``buffer_load_dword ... lds`` (gfx942) / ``buffer_load_dwordx4 ... lds`` (gfx950).

One LDS-DMA instruction moves ``64 * width`` bytes: lane ``l`` writes ``width`` bytes at LDS address
``M0 + l*width`` (the DMA doc's rule; the instruction offset is left 0 so it cannot matter).  A tile
of ``layout.size`` bytes is therefore ``layout.size / (64*width)`` *blocks*; the workgroup's loader
waves share them, ``blocks_per_wave`` consecutive blocks each.

Because the LDS position of every lane is fixed, the layout's swizzle is realised by choosing which
*global* element each lane loads: the lane that writes physical byte ``p`` of the tile loads the
element the layout stores there (``layout.logical(p)``).  Those per-lane global offsets do not change
during a K loop (the buffer resource's base moves instead, ``BufferResource.advance``), so they are
computed once, one VGPR per block, with masks baked in (a lane whose element is outside the tensor
gets ``OOB_OFFSET`` and loads 0).

M0 is written by SALU; an LDS-DMA reading M0 right after an SALU wrote it needs one wait state.
``ops`` returns the M0 update and the DMA as separate ops so a schedule can put other work between
them (the hazard pass would otherwise insert an ``s_nop 0``).
"""

from __future__ import annotations

from collections.abc import Callable

from isagen.builders.program import KernelBuilder
from isagen.errors import SpecError
from isagen.isa.operands import M0, Reg
from isagen.records import record, value_methods
from isagen.tiles import lanexpr as lx
from isagen.tiles.buffer import OOB_OFFSET, BufferResource
from isagen.tiles.lds_layout import LdsAccess, LdsLayout, access
from isagen.tiles.schedule import Op

DMA_INSTRUCTION = {1: "buffer_load_ubyte_lds", 2: "buffer_load_ushort_lds", 4: "buffer_load_dword_lds",
                   12: "buffer_load_dwordx3_lds", 16: "buffer_load_dwordx4_lds"}


@value_methods
@record(repr=False, eq=False)
class GlobalToLds:
    """A named global->LDS tile copy (``load(lds_tile, global_tile)`` in HipKittens' words).

    ``global_offset(row, byte)`` gives, as a lane expression, the byte offset from the buffer
    resource's base of logical tile element ``(row, byte-within-row)`` (``OOB_OFFSET`` where the lane
    must load nothing).  ``k_coord(row, byte)`` gives its index along the reduction dimension, used by
    ``first_tile_ops`` to zero a leading partial tile.
    """

    k: KernelBuilder
    name: str
    layout: LdsLayout
    stages: list                      # LdsRegion per pipeline stage
    rsrc: BufferResource
    width: int                        # bytes per lane per DMA instruction
    waves: int                        # loader waves in the workgroup
    wave: lx.Expr                     # this wave's index among the loaders (wave-uniform)
    global_offset: Callable
    k_coord: Callable | None = None

    def __post_init__(self) -> None:
        if self.width not in self.k.target.lds_dma_widths or self.width not in DMA_INSTRUCTION:
            raise SpecError(f"{self.name}: {self.k.target.name} has no {self.width}-byte LDS DMA "
                            f"(it has {', '.join(map(str, self.k.target.lds_dma_widths))})")
        if self.width == 12:
            raise SpecError(f"{self.name}: 12-byte LDS DMA writes with a 16-byte lane stride; not supported")
        blocks = self.layout.size // self.block_bytes
        if self.layout.size % self.block_bytes or blocks % self.waves:
            raise SpecError(f"{self.name}: a {self.layout.size}-byte tile is not a whole number of "
                            f"{self.block_bytes}-byte DMA blocks per wave for {self.waves} waves")
        self.blocks_per_wave = blocks // self.waves
        self.voff: Reg | None = None           # per-lane global offsets, one VGPR per block (``setup``)
        self.m0_base: Reg | None = None        # this wave's first block, bytes into the tile (``setup``)
        self._positions: dict = {}             # (j, wave) -> position(j, wave): asked once per DMA
        self._lanes: dict = {}                 # (stage, j) -> every loader wave's lane addresses

    @property
    def block_bytes(self) -> int:
        return 64 * self.width

    @property
    def instruction(self) -> str:
        return DMA_INSTRUCTION[self.width]

    # ------------------------------------------------------------------ the lane model
    def position(self, j: int, wave=None) -> lx.Expr:
        """Physical tile byte that lane writes in this wave's ``j``-th block."""
        key = (j, wave)
        pos = self._positions.get(key)
        if pos is None:
            w = self.wave if wave is None else lx.const(wave)
            pos = self._positions[key] = (w * self.blocks_per_wave + j) * self.block_bytes + lx.lane() * self.width
        return pos

    def coords(self, j: int, wave=None):
        """Logical ``(row, byte-within-row)`` each lane loads in block ``j``."""
        return self.layout.logical(self.position(j, wave))

    def offset_expr(self, j: int, wave=None) -> lx.Expr:
        return self.global_offset(*self.coords(j, wave))

    # ------------------------------------------------------------------ code
    def setup(self, em: lx.Emitter) -> None:
        """Per-lane global offsets (one VGPR per block, kept for the kernel) and this wave's M0 base."""
        k = self.k
        voff = self.voff = k.vgpr(self.blocks_per_wave, f"{self.name}_dma_off")
        for j in range(self.blocks_per_wave):
            em.emit(self.offset_expr(j), dst=voff[j],
                    comment=f"{self.name}: global offset of the element this lane DMAs in block {j}")
        m0_base = self.m0_base = k.sgpr(1, f"{self.name}_m0_base")
        wave = em.emit_uniform(self.wave * (self.blocks_per_wave * self.block_bytes),
                               comment=f"{self.name}: this wave's first block, bytes into the tile")
        k.s_mov_b32(m0_base, wave, comment=f"{self.name}: this wave's first block, bytes into the tile")

    def _registers(self) -> tuple[Reg, Reg]:
        """The per-lane offsets and the M0 base that ``setup`` allocated."""
        if self.voff is None or self.m0_base is None:
            raise RuntimeError(f"{self.name}: setup() must come before the DMAs and release()")
        return self.voff, self.m0_base

    def release(self) -> None:
        self.k.free(*self._registers())

    def lds_range(self, stage: int) -> tuple[int, int]:
        r = self.stages[stage]
        return (r.offset, r.offset + r.size)

    def _m0_op(self, stage: int, j: int) -> Op:
        r = self.stages[stage]
        const = r.offset + j * self.block_bytes

        def f():
            self.k.s_add_u32(M0, self.m0_base, const,
                             comment=f"M0: this wave's block {j} of lds_{r.name} (+{j * self.block_bytes})")
        return Op("m0", f, f"{self.name} m0 {j}")

    def _dma_op(self, stage: int, j: int, voff) -> Op:
        region = self.stages[stage]
        lanes = self._lanes.get((stage, j))
        if lanes is None:      # the same for every tile into this stage
            lanes = self._lanes[stage, j] = tuple(lx.lane_values(self.position(j, w) + region.offset)
                                                  for w in range(self.waves))

        def f():
            inst = getattr(self.k, self.instruction)(voff, self.rsrc.regs, 0, offen=True, lanes=lanes,
                                                     comment=f"{self.name} -> lds_{region.name}, block {j}")
            inst.lds = self.lds_range(stage)
        return Op("dma", f, f"{self.name} dma {j}")

    def ops(self, stage: int, after: Op | None = None) -> list[Op]:
        """M0 and DMA ops for one tile into ``stage``: each DMA after its M0 update with one instruction
        between them (SALU writes M0 -> LDS-DMA: one wait state), each M0 update after the previous
        DMA (``after``: the op before the first M0 update, e.g. another tile's last DMA)."""
        voff, _ = self._registers()
        out = []
        prev = after
        for j in range(self.blocks_per_wave):
            m0 = self._m0_op(stage, j)
            m0.after = prev
            dma = self._dma_op(stage, j, voff[j])
            dma.after, dma.gap = m0, True
            out += [m0, dma]
            prev = dma
        return out

    def first_tile(self, stage: int, em: lx.Emitter, pad: lx.Expr) -> None:
        """Emit the DMA of the first tile with lanes whose reduction index is below ``pad`` (the
        leading partial tile) given ``OOB_OFFSET``: they load zeros."""
        if self.k_coord is None:
            raise ValueError(f"{self.name}: first_tile needs k_coord")
        k = self.k
        voff, _ = self._registers()
        tmp = k.vgpr(1, f"{self.name}_first_off")
        for j in range(self.blocks_per_wave):
            kc = self.k_coord(*self.coords(j))
            masked = lx.where_lt(kc, pad, OOB_OFFSET, lx.VReg(f"{self.name}_off{j}", voff[j]))
            self._m0_op(stage, j)()          # first: the masking VALU fills the M0 -> LDS-DMA wait state
            em.emit(masked, dst=tmp, comment=f"{self.name} block {j}: lanes before the first K element load 0")
            self._dma_op(stage, j, tmp)()
        k.free(tmp)

    # ------------------------------------------------------------------ analysis
    def accesses(self, stage: int, env: dict) -> list[LdsAccess]:
        """The LDS writes of this wave's DMAs into ``stage`` (lane addresses, for the bank analysis)."""
        r = self.stages[stage]
        out = []
        for j in range(self.blocks_per_wave):
            addr = self.position(j) + r.offset
            out.append(access(f"{self.name} DMA block {j} -> stage {stage}", addr, self.width, "write", env,
                              self.instruction))
        return out


def interleaved_copies(stage: int, copies: list[tuple[GlobalToLds, object]], unit: str = "K-tile") -> list[Op]:
    """Ops: one tile of every operand in ``copies`` (``(copy, window step)`` pairs) into LDS ``stage``,
    then each operand's window moved to its next tile (``BufferResource.advance_steps`` by the step, a
    byte count or an SGPR).

    The operands' DMA blocks alternate (A0 B0 A1 B1 ...: M0 is one register, so every M0 update comes
    after the previous DMA whatever the operand, and alternating lets one operand's window advance
    fill the other's last M0 -> DMA gap); each window's advance follows its own last DMA.  The GEMM
    copies A and B; attention copies K and V the same way."""
    blocks = []
    for copy, _ in copies:
        ops = copy.ops(stage)
        blocks.append([ops[i:i + 2] for i in range(0, len(ops), 2)])     # (M0 update, DMA) per block
    out: list[Op] = []
    prev = None
    for i in range(max(len(b) for b in blocks)):
        for operand in blocks:
            if i < len(operand):
                m0, dma = operand[i]
                m0.after = prev
                out += [m0, dma]
                prev = dma
    for (copy, step), operand in zip(copies, blocks):
        prev = operand[-1][1]
        rsrc = copy.rsrc
        for i, salu in enumerate(rsrc.advance_steps(step, f"{rsrc.name}: window to the next {unit}")):
            op = Op("salu", salu, f"{rsrc.name} advance {i}", after=prev)
            out.append(op)
            prev = op
    return out
