"""isagen.checks.occupancy against published figures and against its own promises.

* VGPRs: AMD's CDNA2/CDNA3 occupancy table for the 512-entry unified file (granule 8): up to 64
  registers 8 waves/SIMD, 72 -> 7, 80 -> 6, 96 -> 5, 128 -> 4, 168 -> 3, 256 -> 2, 512 -> 1.
* SGPRs: LLVM's gfx9 steps (getOccupancyWithNumSGPRs): <= 80 -> 10, <= 88 -> 9, <= 100 -> 8, else 7.
* LDS and workgroups: worked by hand from 64 KiB (gfx942) / 160 KiB (gfx950) per CU, 4 SIMDs, 16
  barriers per CU.
* ``to_next_wave``: freeing what it says gives one more wave, and freeing one unit less does not.
"""

from __future__ import annotations

import itertools

import pytest

from isagen.checks import occupancy as occ
from isagen.targets import GFX942, GFX950

VGPR_TABLE = [(64, 8), (72, 7), (80, 6), (96, 5), (128, 4), (168, 3), (256, 2), (512, 1)]


def _waves(target=GFX942, arch=1, agprs=0, sgprs=16, lds=0, wg=256):
    return occ.occupancy(target, arch_vgprs=arch, agprs=agprs, sgpr_count=sgprs, lds_bytes=lds, workgroup_size=wg)


@pytest.mark.parametrize("target", [GFX942, GFX950], ids=lambda t: t.name)
def test_vgpr_table(target):
    prev = 0
    for top, waves in VGPR_TABLE:
        for regs in (prev + 1, top):
            if regs > 256:       # beyond 256 arch VGPRs the rest are AGPRs
                o = _waves(target, arch=256, agprs=regs - 256)
            else:
                o = _waves(target, arch=regs)
            assert min(o.limits["vgprs"], 8) == waves, (regs, o.limits)   # the table stops at the hardware's 8
            assert o.waves_per_simd == waves
        prev = top


def test_unified_file_with_agprs():
    # 61 arch VGPRs + 4 AGPRs: accum_offset 64, 68 registers -> 72 allocated -> 7 waves
    o = _waves(arch=61, agprs=4)
    assert (o.unified_vgprs, o.allocated_vgprs, o.waves_per_simd) == (68, 72, 7)
    # 60 arch + 4 AGPRs = 64 -> 8 waves; 58 arch + 6 AGPRs: accum 60 + 6 = 66 -> 72 -> 7 waves, although
    # 64 registers would fit 8: the accum_offset alignment costs the wave
    assert _waves(arch=60, agprs=4).waves_per_simd == 8
    o = _waves(arch=58, agprs=6)
    assert (o.unified_vgprs, o.waves_per_simd, o.limited_by, o.vgpr_granule_bound) == (66, 7, "vgprs", True)
    assert _waves(arch=61, agprs=4).vgpr_granule_bound is False       # 65 exact needs 72 anyway


def test_sgpr_steps():
    for count, waves in ((80, 10), (81, 9), (88, 9), (89, 8), (100, 8), (101, 7), (108, 7)):
        assert occ.waves_for_sgprs(count) == waves
    o = _waves(sgprs=106)
    assert (o.waves_per_simd, o.limited_by) == (7, "sgprs")
    assert _waves(sgprs=100).waves_per_simd == 8
    assert occ.allocated_sgprs(GFX942, 21) == 32 and occ.allocated_sgprs(GFX942, 106) == 112


def test_lds_and_workgroup_limits():
    # 4-wave groups with 32 KiB: 2 groups per 64 KiB CU = 8 waves over 4 SIMDs = 2 per SIMD
    o = _waves(lds=32768, wg=256)
    assert (o.limits["lds"], o.waves_per_simd, o.limited_by) == (2, 2, "lds")
    # gfx950's 160 KiB holds 5 of them: 20 waves = 5 per SIMD
    assert _waves(GFX950, lds=32768, wg=256).limits["lds"] == 5
    # 100 bytes round up to the 512-byte granule: 128 groups of 1 wave = 32 per SIMD (hardware: 8)
    o = _waves(lds=100, wg=64)
    assert (o.allocated_lds, o.limits["lds"], o.waves_per_simd) == (512, 32, 8)
    assert "workgroup" not in o.limits                     # one-wave groups hold no barrier
    # 3-wave groups: min(16 barriers, 32 slots // 3 = 10) groups = 30 waves -> 7 per SIMD
    o = _waves(wg=192)
    assert (o.limits["workgroup"], o.waves_per_simd, o.limited_by) == (7, 7, "workgroup")
    assert _waves(wg=1024).limits["workgroup"] == 8        # 2 groups of 16 waves


def test_nothing_binds_reads_hardware():
    o = _waves(arch=20, sgprs=20)
    assert (o.waves_per_simd, o.limited_by, o.to_next_wave) == (8, "hardware", [])


def _apply(kw: dict, **delta) -> dict:
    out = dict(kw)
    for k, v in delta.items():
        out[k] -= v
    return out


def test_to_next_wave_frees_exactly_enough():
    checked = 0
    for target, arch, agprs, sgprs, lds in itertools.product(
            (GFX942, GFX950), (24, 61, 97, 130, 200, 256), (0, 4, 51, 128), (30, 104), (0, 20000, 40000)):
        kw = dict(arch_vgprs=arch, agprs=agprs, sgpr_count=sgprs, lds_bytes=lds)
        o = occ.occupancy(target, workgroup_size=256, **kw)
        if o.waves_per_simd == 8:
            assert o.to_next_wave == []
            continue
        binding = {f for f, w in o.limits.items() if w == o.waves_per_simd}
        assert {s["factor"] for s in o.to_next_wave} == binding
        for step in o.to_next_wave:
            def waves_after(kw2, factor=step["factor"], target=target):
                """the limit of this factor alone after freeing (the other binding ones are separate steps)"""
                return occ.occupancy(target, workgroup_size=256, **kw2).limits[factor]

            if step["factor"] == "vgprs":
                for key, amount in (("arch_vgprs", step["free_vgprs"]), ("agprs", step["free_agprs"])):
                    if amount is None:
                        continue
                    assert waves_after(_apply(kw, **{key: amount})) > o.waves_per_simd, (step, key)
                    assert waves_after(_apply(kw, **{key: amount - 1})) == o.waves_per_simd, (step, key)
                    checked += 1
            elif step["factor"] == "sgprs":
                assert waves_after(_apply(kw, sgpr_count=step["free"])) > o.waves_per_simd
                assert waves_after(_apply(kw, sgpr_count=step["free"] - 1)) == o.waves_per_simd
                checked += 1
            elif step["factor"] == "lds" and step["free"] is not None:
                assert waves_after(_apply(kw, lds_bytes=step["free"])) > o.waves_per_simd
                # one granule less freed is not enough
                g = target.lds_alloc_granule
                assert waves_after(_apply(kw, lds_bytes=step["free"] - g)) == o.waves_per_simd
                checked += 1
    assert checked > 40
