"""The LDS bank check among the project's checks (``finish()``): DS / LDS-DMA instructions emitted with
``lanes=`` are analysed per wave variant by ``isagen.checks.lds_banks``; a conflict is a check failure naming
the instruction, its comment and the worst phase.  Planted conflicts (a strided ds_read_b128, the GEMM
with its LDS swizzle removed) are found; conflict-free accesses pass and are summarised in the .s."""

import dataclasses

import pytest

from isagen.builders.program import KernelBuilder
from isagen.builders.registry import params_from
from isagen.errors import CheckError, ISAError
from isagen.kernels.gemm import PARAMS, GemmKernel, hot_loops, make_plan
from isagen.objects.emit import render_assembly
from isagen.tiles.lds_layout import NO_SWIZZLE


def kernel(lanes, target="gfx942"):
    k = KernelBuilder("banks", target, workgroup_size=64)
    k.lds(16 * 1024, "buf")
    addr, dst = k.vgpr(1, "addr"), k.vgpr(4, "val")
    k.v_lshlrev_b32(addr, 4, k.tid, comment="lane * 16")
    k.ds_read_b128(dst, addr, lanes=lanes, comment="tile row")
    k.wait(lgkmcnt=0, why="the read")
    k.free(addr, dst, k.tid)
    return k


def test_conflict_free_access_passes_and_is_summarised():
    program = kernel([[16 * lane for lane in range(64)]]).finish()
    (row,) = program.lds_banks
    assert row.conflict_free and row.instruction == "ds_read_b128" and row.variants == 1 and row.width == 16
    assert "LDS banks (gfx942 phase rules): 1 instructions with declared lane addresses (1 ds_read_b128), " \
           "every wave variant: conflict-free" in render_assembly(program)


def test_a_strided_read_is_refused_naming_the_instruction():
    """Lanes 256 bytes apart: the 8 lanes of a gfx942 ds_read_b128 phase all start in bank 0 (8-way);
    the other wave variant (lanes 16 bytes apart) is clean, so 1 of 2 variants conflicts."""
    strided = [256 * lane for lane in range(64)]
    good = [16 * lane for lane in range(64)]
    with pytest.raises(CheckError, match=r"banks: LDS bank conflict: #\d+ ds_read_b128 \(tile row\): 1 of 2 wave "
                                         r"variants: b128: 64 cycles for 8 phases .*: 8-way"):
        kernel([good, strided]).finish()
    program = kernel([good, strided]).finish(force=True)
    assert "LDS bank conflict" in program.rejected
    text = render_assembly(program)
    assert "1 with conflicts" in text and "//   #" in text
    # gfx950 (64 banks; 16 lanes per b128 phase): the same stride is 16-way
    with pytest.raises(CheckError, match=r"1 of 1 wave variants: b128: .*16-way"):
        kernel([strided], "gfx950").finish()


def test_lanes_are_validated():
    k = KernelBuilder("v", "gfx942", workgroup_size=64)
    r = k.vgpr(1, "r")
    with pytest.raises(ISAError, match="v_mov_b32: no LDS bank model"):
        k.v_mov_b32(r, 0, lanes=[[0] * 64])
    with pytest.raises(ISAError, match="lanes= on ds_read_b32: 3 addresses, expected 64"):
        k.ds_read_b32(r, r, lanes=[[0, 4, 8]])


def test_the_gemm_without_its_swizzle_has_hot_loop_conflicts():
    """The check sees what the swizzle is for: with the layouts' swizzle removed, the GEMM's fragment
    reads in the hot loop conflict (the kernel would still compute the right C)."""
    p = {k: v.default for k, v in PARAMS.items()}
    plan = make_plan(params_from(p, "g"), "gfx950")
    plain = dataclasses.replace(plan, layout_a=plan.layout_a.with_swizzle(NO_SWIZZLE),
                                layout_b=plan.layout_b.with_swizzle(NO_SWIZZLE))
    program = GemmKernel(plain, "g").build().finish(force=True)
    assert "LDS bank conflict" in program.rejected
    bad = [r for r in program.lds_banks if not r.conflict_free]
    in_loop = {id(i) for body in hot_loops(program) for i in body}
    assert bad and all(r.instruction == "ds_read_b128" for r in bad)
    assert any(id(program.items[r.position]) in in_loop for r in bad)
    assert all(r.conflict_free for r in program.lds_banks if r.op == "write")     # the DMA writes are linear
