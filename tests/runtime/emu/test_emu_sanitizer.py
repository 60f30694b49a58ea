"""The sanitizer on small hand-written gfx942 kernels: each category gets a clean kernel (no report, right
result) and the same kernel with one bug planted (a removed s_waitcnt, a shortened s_nop before an
MFMA read, a dropped barrier, a store past a buffer, an uninitialised VGPR, an infinite loop ...).  The
report must name the kernel, the PC (checked against llvm-objdump's address of that instruction), the
instruction, the workgroup, the wave, the lanes and, for memory, the address."""

import numpy as np
import pytest
from emu_support import address_of, build, objdump_addresses
from mem_support import assert_close

from isagen.runtime.emu import Device, EmulatorError

# Two waves exchange data through LDS: out[t] = in[t ^ 64] + 1 for t in 0..127.
EXCHANGE = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  global_load_dword v2, v1, s[4:5]
  {wait_load}
  v_add_f32 v2, 1.0, {addend}
  ds_write_b32 v1, v2
  {wait_lds}
  {barrier}
  v_xor_b32 v3, 0x100, v1
  ds_read_b32 v4, v3{read_off}
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v4, s[6:7]{store_off}
"""
CLEAN = dict(wait_load="s_waitcnt vmcnt(0)", addend="v2", wait_lds="s_waitcnt lgkmcnt(0)", barrier="s_barrier",
             read_off="", store_off="")


def exchange(**planted):
    return build("exchange", EXCHANGE.format(**{**CLEAN, **planted}), args=(("ptr", "inp"), ("ptr", "out")),
                 lds=512, vgprs=16)


def run_exchange(co, dev=None, on_error="collect"):
    dev = dev or Device("gfx942")
    mod = dev.load_module(co)
    x = np.arange(128, dtype=np.float32) * 0.5
    dx, dout = dev.to_device(x, "inp"), dev.to_device(np.zeros(128, np.float32), "out")
    reports = mod.launch("exchange", grid=(1,), block=(128,), args=[dx, dout], on_error=on_error)
    return reports, dev.from_device(dout, 128, np.float32), x, dout


def run_one_wave(co, name, target="gfx942", dtype=np.float32):
    """Launches ``name`` as one 64-lane wave on a zeroed 64-element output: (reports, the output)."""
    dev = Device(target)
    out = dev.to_device(np.zeros(64, dtype))
    reports = dev.load_module(co).launch(name, grid=(1,), block=(64,), args=[out], on_error="collect")
    return reports, dev.from_device(out, 64, dtype)


def only(reports, category):
    assert reports, "expected a report"
    assert {r.category for r in reports} == {category}, [str(r) for r in reports]
    return reports[0]


def test_clean_exchange_reports_nothing_and_computes():
    reports, got, x, _ = run_exchange(exchange())
    assert reports == []
    np.testing.assert_array_equal(got, x[np.arange(128) ^ 64] + 1)


def test_missing_vmcnt_before_use():
    co = exchange(wait_load="")
    reports, *_ = run_exchange(co)
    r = only(reports, "missing-wait")
    assert r.pc == address_of(co, "v_add_f32")
    assert r.instruction.startswith("v_add_f32") and r.kernel == "exchange"
    assert r.workgroup == (0, 0, 0) and r.wave in (0, 1) and r.lanes == tuple(range(64))
    assert "v2" in r.message and "global_load_dword" in r.message and "vmcnt(0)" in r.message
    # raised by default, as one line naming the same place
    with pytest.raises(EmulatorError, match=r"\[missing-wait\] exchange pc 0x[0-9a-f]+ `v_add_f32"):
        run_exchange(co, on_error="raise")


def test_dropped_barrier_is_an_lds_race():
    co = exchange(barrier="")
    r = only(run_exchange(co)[0], "lds-race")
    assert r.pc == address_of(co, "ds_read_b32")
    assert r.workgroup == (0, 0, 0)
    # wave w reads the words of wave 1-w: word (t ^ 64) of its first lane
    assert r.address == 4 * (64 if r.wave == 0 else 0)
    assert f"that wave {1 - r.wave} wrote" in r.message and "no s_barrier" in r.message


def test_barrier_without_lgkmcnt_is_a_race_too():
    co = exchange(wait_lds="")
    r = only(run_exchange(co)[0], "lds-race")
    assert r.pc == address_of(co, "ds_read_b32")
    assert "still outstanding at the s_barrier" in r.message


def test_store_past_the_buffer():
    co = exchange(store_off=" offset:256")
    reports, _, _, dout = run_exchange(co)
    r = only(reports, "oob-global")
    assert r.pc == address_of(co, "global_store_dword")
    # wave 1 (t = 64..127) stores at out + 4*t + 256 >= out + 512: past the 512-byte buffer
    assert r.wave == 1 and r.lanes == tuple(range(64))
    assert r.address == int(dout) + 4 * 64 + 256
    assert "'out'" in r.message and "past the end" in r.message


def test_lds_read_past_the_allocation():
    co = exchange(read_off=" offset:512")
    r = only(run_exchange(co)[0], "oob-lds")
    assert r.pc == address_of(co, "ds_read_b32")
    assert r.address == (4 * (r.lanes[0] + 64 * r.wave) ^ 0x100) + 512


def test_uninitialised_vgpr_read():
    co = exchange(addend="v9")
    r = only(run_exchange(co)[0], "uninitialized")
    assert r.pc == address_of(co, "v_add_f32")
    assert "v9" in r.message and r.lanes == tuple(range(64))


def test_partially_initialised_lanes():
    # v5 written under EXEC = lanes 0..31 only, then read by all lanes
    body = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_mov_b64 exec, 0xffffffff
  v_mov_b32 v5, 1.0
  s_mov_b64 exec, -1
  v_lshlrev_b32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v5, s[4:5]
"""
    co = build("partial", body)
    dev = Device("gfx942")
    out = dev.to_device(np.zeros(64, np.float32))
    r = only(dev.load_module(co).launch("partial", grid=(1,), block=(64,), args=[out], on_error="collect"),
             "uninitialized")
    assert r.pc == address_of(co, "global_store_dword") and r.lanes == tuple(range(32, 64))


def test_missing_lgkmcnt_after_scalar_load():
    co = build("smem", """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_mov_b32 v1, s4
""")
    dev = Device("gfx942")
    r = only(dev.load_module(co).launch("smem", grid=(1,), block=(64,), args=[0], on_error="collect"),
             "missing-wait")
    assert r.pc == address_of(co, "v_mov_b32")
    assert "lgkmcnt(0)" in r.message and "s4" in r.message


MFMA = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_mov_b32 v0, 0x3f803f80
  v_mov_b32 v1, 0x3f803f80
  v_mov_b32 v2, 0x40004000
  v_mov_b32 v3, 0x40004000
  s_nop 1
  v_mfma_f32_16x16x16_bf16 a[0:3], v[0:1], v[2:3], 0
  s_nop {nops}
  v_accvgpr_read_b32 v4, a0
  v_lshlrev_b32 v5, 2, v4
  v_mbcnt_lo_u32_b32 v6, -1, 0
  v_mbcnt_hi_u32_b32 v6, -1, v6
  v_lshlrev_b32 v6, 2, v6
  s_waitcnt lgkmcnt(0)
  global_store_dword v6, v4, s[4:5]
"""


@pytest.mark.parametrize("nops,ok", [(6, True), (5, False), (2, False)])
def test_mfma_result_read_needs_seven_wait_states(nops, ok):
    # 16x16x16 bf16 is a 4-pass XDL MFMA on gfx942: a VALU read of its result needs P+3 = 7 wait states
    # (AMD/LLVM table in the reference notes); s_nop N gives N+1.
    co = build("mfma", MFMA.format(nops=nops), vgprs=8, agprs=4)
    reports, out = run_one_wave(co, "mfma")
    if ok:
        assert reports == []
        # every D element is sum over k of 1.0 * 2.0 = 16 * 2
        np.testing.assert_array_equal(out, np.full(64, 32.0, np.float32))
    else:
        r = only(reports, "hazard")
        assert r.pc == address_of(co, "v_accvgpr_read_b32")
        assert f"{nops + 1} wait state" in r.message and "needs 7" in r.message and "a0" in r.message


def test_valu_write_then_mfma_read_needs_two_wait_states():
    co = build("mfma2", MFMA.format(nops=6).replace("  s_nop 1\n", ""), vgprs=8, agprs=4)
    dev = Device("gfx942")
    reports = dev.load_module(co).launch("mfma2", grid=(1,), block=(64,), args=[dev.to_device(np.zeros(64))],
                                         on_error="collect")
    r = only(reports, "hazard")
    assert r.pc == address_of(co, "v_mfma_f32_16x16x16_bf16") and "needs 2" in r.message


def test_infinite_loop_hits_the_budget():
    co = build("spin", """
  s_mov_b32 s3, 0
.Lspin:
  s_add_u32 s3, s3, 1
  s_branch .Lspin
""")
    dev = Device("gfx942", max_wave_instructions=20000)
    with pytest.raises(EmulatorError, match=r"\[budget\] spin pc 0x[0-9a-f]+ .*instruction budget of 20000"):
        dev.load_module(co).launch("spin", grid=(2,), block=(64,), args=[0])


def test_barrier_with_one_wave_spinning_hits_the_budget():
    # wave 0 waits at the barrier, wave 1 never arrives
    co = build("halfbar", """
  v_readfirstlane_b32 s3, v0
  s_cmp_eq_u32 s3, 0
  s_cbranch_scc1 .Lwait
.Lspin:
  s_branch .Lspin
.Lwait:
  s_barrier
""")
    dev = Device("gfx942", max_wave_instructions=5000)
    reports = dev.load_module(co).launch("halfbar", grid=(1,), block=(128,), args=[0], on_error="collect")
    r = only(reports, "budget")
    assert r.wave == 1


def test_sanitize_off_runs_the_buggy_kernel_quietly():
    co = exchange(barrier="", wait_load="")
    reports, got, x, _ = run_exchange(co, dev=Device("gfx942", sanitize=False))
    assert reports == []
    # (the emulator executes waves at the same PC in lockstep, so the race happens to resolve)
    np.testing.assert_array_equal(got, x[np.arange(128) ^ 64] + 1)


@pytest.mark.parametrize("nops,ok", [(1, True), (0, False)])
def test_valu_written_sgpr_read_by_valu(nops, ok):
    # gfx940+: an SGPR a VALU wrote (v_cmp_e64's mask) read as an explicit VALU operand needs 2 wait
    # states (LLVM GCNHazardRecognizer, VALUWriteSGPRVALUReadWaitstates; isagen.checks.hazards table)
    co = build("sgprhz", f"""
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_cmp_gt_u32_e64 s[10:11], 32, v0
  s_nop {nops}
  v_cndmask_b32_e64 v1, 0, 1, s[10:11]
  v_lshlrev_b32 v2, 2, v0
  s_waitcnt lgkmcnt(0)
  global_store_dword v2, v1, s[4:5]
""")
    reports, out = run_one_wave(co, "sgprhz", dtype=np.uint32)
    if ok:
        assert reports == []
        np.testing.assert_array_equal(out, (np.arange(64) < 32).astype(np.uint32))
    else:
        r = only(reports, "hazard")
        assert r.pc == address_of(co, "v_cndmask_b32_e64") and "s10" in r.message and "needs 2" in r.message


# Two waves store into one LDS word in the same instruction, then a barrier; {a} and {b} pick the
# address (byte offset) and value each wave stores.
SHARED_WORD = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_readfirstlane_b32 s8, v0
  s_lshr_b32 s8, s8, 6
  s_cmp_eq_u32 s8, 0
  s_cselect_b32 s9, {a0}, {b0}
  s_cselect_b32 s10, {a1}, {b1}
  s_nop 1
  v_mov_b32 v1, s9
  v_mov_b32 v2, s10
  s_mov_b64 exec, 1
  {store} v1, v2
  s_mov_b64 exec, -1
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_mov_b32 v3, 0
  ds_read_b32 v4, v3
  v_lshlrev_b32 v5, 2, v0
  s_waitcnt lgkmcnt(0)
  global_store_dword v5, v4, s[4:5]
"""


@pytest.mark.parametrize("store,wave0,wave1,race", [
    ("ds_write_b32", (0, 7), (0, 7), False),         # the same value: replicated data, no race
    ("ds_write_b32", (0, 7), (0, 8), True),          # different values to one word
    ("ds_write_b16", (0, 7), (2, 8), False),         # different halves of one word
    ("ds_write_b16", (0, 7), (1, 8), True),          # overlapping bytes
])
def test_same_instruction_stores_to_one_lds_word(store, wave0, wave1, race):
    body = SHARED_WORD.format(store=store, a0=wave0[0], a1=wave0[1], b0=wave1[0], b1=wave1[1])
    co = build("shared", body, lds=64)
    dev = Device("gfx942")
    out = dev.to_device(np.zeros(128, np.uint32))
    reports = dev.load_module(co).launch("shared", grid=(1,), block=(128,), args=[out], on_error="collect")
    if race:
        r = only(reports, "lds-race")
        assert r.pc == address_of(co, store) and "different values" in r.message
    else:
        assert reports == []


def test_collect_gives_one_report_per_instruction_with_a_count():
    # the store runs three times (a loop), past the end of the 256-byte buffer each time
    co = build("loop3", """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  v_add_u32 v1, 256, v1
  s_mov_b32 s6, 3
  s_waitcnt lgkmcnt(0)
.Lagain:
  global_store_dword v1, v0, s[4:5]
  s_sub_u32 s6, s6, 1
  s_cmp_lg_u32 s6, 0
  s_cbranch_scc1 .Lagain
""")
    dev = Device("gfx942")
    out = dev.to_device(np.zeros(64, np.float32), "out")
    reports = dev.load_module(co).launch("loop3", grid=(1,), block=(64,), args=[out], on_error="collect")
    assert len(reports) == 1 and reports[0].category == "oob-global"
    assert reports[0].extra["occurrences"] == 3 and "(3 times in this launch)" in str(reports[0])


@pytest.mark.parametrize("copy,reported", [("v_writelane_b32 v5, s40, 3", False), ("v_mov_b32 v5, s40", True)])
def test_spilling_an_undefined_sgpr_is_not_a_read(copy, reported):
    # LLVM spills SGPRs into VGPR lanes with v_writelane, undefined ones included (helper-7's Triton
    # finding); an ordinary move of the undefined s40 is still reported
    co = build("spill", f"""
  v_mov_b32 v5, 0
  {copy}
  s_nop 4
  v_readlane_b32 s41, v5, 3
""")
    dev = Device("gfx942")
    reports = dev.load_module(co).launch("spill", grid=(1,), block=(64,), args=[0], on_error="collect")
    if reported:
        r = only(reports, "uninitialized")
        assert "s40" in r.message and r.pc == address_of(co, "v_mov_b32_e32 v5, s40")
    else:
        assert reports == []


@pytest.mark.parametrize("wait", ["s_waitcnt vmcnt(0)", ""])
def test_overwriting_a_register_a_load_still_writes(wait):
    # without the wait the load's data would land after the v_mov and replace its value (WAW)
    co = build("waw", f"""
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  global_load_dword v2, v1, s[4:5]
  {wait}
  v_mov_b32 v2, 1.0
  global_store_dword v1, v2, s[4:5]
""")
    dev = Device("gfx942")
    buf = dev.to_device(np.zeros(64, np.float32))
    reports = dev.load_module(co).launch("waw", grid=(1,), block=(64,), args=[buf], on_error="collect")
    if wait:
        assert reports == []
        np.testing.assert_array_equal(dev.from_device(buf, 64, np.float32), np.ones(64, np.float32))
    else:
        r = only(reports, "missing-wait")
        assert r.pc == address_of(co, "v_mov_b32") and r.lanes == tuple(range(64)) and r.wave == 0
        assert "overwrites v2" in r.message and "global_load_dword" in r.message and "vmcnt(0)" in r.message


@pytest.mark.parametrize("nops,ok", [("s_nop 7\n  s_nop 7", True), ("s_nop 0", False)])
def test_valu_overwriting_an_mfma_result_too_soon(nops, ok):
    # a VALU write into the MFMA's destination while the MFMA may still write it (a2 is not read after)
    body = MFMA.format(nops=6).replace("  s_nop 6\n", f"  {nops}\n  v_accvgpr_write_b32 a2, 0\n  s_nop 6\n")
    co = build("mfmaw", body, vgprs=8, agprs=4)
    reports, out = run_one_wave(co, "mfmaw")
    if ok:
        assert reports == []
        np.testing.assert_array_equal(out, np.full(64, 32.0, np.float32))
    else:
        r = only(reports, "hazard")
        assert r.pc == address_of(co, "v_accvgpr_write_b32") and "overwrites a2" in r.message
        assert "v_mfma_f32_16x16x16_bf16" in r.message and r.workgroup == (0, 0, 0)


@pytest.mark.parametrize("barrier,race", [("s_barrier", False), ("", True)])
def test_write_after_another_waves_read_is_a_race(barrier, race):
    # each wave reads the other wave's words, then rewrites its own: without a second barrier the
    # other wave may not have read them yet (write-after-read)
    co = build("war", f"""
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  ds_write_b32 v1, v0
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_xor_b32 v2, 0x100, v1
  ds_read_b32 v3, v2
  s_waitcnt lgkmcnt(0)
  {barrier}
  v_mov_b32 v4, -1
  ds_write_b32 v1, v4
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v3, s[4:5]
""", lds=512)
    dev = Device("gfx942")
    out = dev.to_device(np.zeros(128, np.uint32))
    reports = dev.load_module(co).launch("war", grid=(1,), block=(128,), args=[out], on_error="collect")
    if race:
        r = only(reports, "lds-race")
        assert r.pc == address_of(co, "ds_write_b32", 1) and "read" in r.message and "no s_barrier" in r.message
        assert r.address == (0 if r.wave == 0 else 0x100) and r.lanes == tuple(range(64))   # its own words
        assert f"wave {r.wave} writes" in r.message and r.workgroup == (0, 0, 0)
    else:
        assert reports == []
        np.testing.assert_array_equal(dev.from_device(out, 128, np.uint32), np.arange(128) ^ 64)


# gfx950's double-rate MFMA: a 4-pass XDL whose result a VALU may read only after NumPasses + 3 + 1 = 8
# wait states (LLVM's gfx950 delta, PRs #126727/#126132 in the reference notes), one more than gfx942's 7
MFMA950 = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_mov_b32 v0, 0x3f803f80
  v_mov_b32 v1, 0x3f803f80
  v_mov_b32 v2, 0x3f803f80
  v_mov_b32 v3, 0x3f803f80
  v_mov_b32 v4, 0x40004000
  v_mov_b32 v5, 0x40004000
  v_mov_b32 v6, 0x40004000
  v_mov_b32 v7, 0x40004000
  s_nop 1
  v_mfma_f32_16x16x32_bf16 a[0:3], v[0:3], v[4:7], 0
  s_nop {nops}
  v_accvgpr_read_b32 v8, a0
  v_mbcnt_lo_u32_b32 v9, -1, 0
  v_mbcnt_hi_u32_b32 v9, -1, v9
  v_lshlrev_b32 v9, 2, v9
  s_waitcnt lgkmcnt(0)
  global_store_dword v9, v8, s[4:5]
"""


@pytest.mark.parametrize("nops,ok", [(7, True), (6, False)])
def test_gfx950_mfma_result_read_needs_eight_wait_states(nops, ok):
    co = build("mfma950", MFMA950.format(nops=nops), target="gfx950", vgprs=12, agprs=4)
    reports, out = run_one_wave(co, "mfma950", "gfx950")
    if ok:
        assert reports == []
        # every D element is the sum over 32 k of 1.0 * 2.0
        np.testing.assert_array_equal(out, np.full(64, 64.0, np.float32))
    else:
        r = only(reports, "hazard")
        assert r.instruction == "v_accvgpr_read_b32 v8, a0"       # (no gfx950 objdump to check the pc)
        assert "7 wait state" in r.message and "needs 8" in r.message and "a0" in r.message


def test_mfma_passes_and_xdl_come_from_the_target_table():
    """The sanitizer's hazard windows use the ISA layer's MFMA table; an MFMA it lacks is an error
    naming the target and the instruction, never a size guessed from the name."""
    from isagen.errors import TargetError
    from isagen.runtime.emu.sanitizer import MfmaKind
    from isagen.targets import TARGETS
    for t in TARGETS.values():
        for info in t.mfmas:
            kind = MfmaKind(info.mnemonic, t.name)
            assert (kind.passes, kind.xdl) == (info.passes, info.xdl), (t.name, info.mnemonic)
    with pytest.raises(TargetError, match="gfx950 has no MFMA 'v_mfma_f32_32x32x4_xf32'"):
        MfmaKind("v_mfma_f32_32x32x4_xf32", "gfx950")
    with pytest.raises(TargetError, match="gfx942 has no MFMA 'v_mfma_f32_32x32x32_bf16'"):
        MfmaKind("v_mfma_f32_32x32x32_bf16", "gfx942")


# A DS read is in flight until the s_waitcnt lgkmcnt that covers it: the LDS words it reads may be
# sampled at any time before then.  Two waves publish their words (regions A and B), read the other
# wave's words, pass a barrier, and then overwrite words: without the wait before the barrier the other
# wave's read may still be reading them (write-after-read through a barrier).  DS operations of one
# wave complete in order, so lgkmcnt(1) covers the first read and not the second.
PENDING_READ = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  ds_write_b32 v1, v0
  ds_write_b32 v1, v0 offset:512
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_xor_b32 v2, 0x100, v1
  ds_read_b32 v3, v2
  ds_read_b32 v5, v2 offset:512
  {wait}
  s_barrier
  {extra}
  {overwrite}
  s_waitcnt vmcnt(0) lgkmcnt(0)
  global_store_dword v1, v3, s[6:7]
  global_store_dword v1, v5, s[6:7] offset:512
"""
# each wave overwrites its own words (the ones the other wave read) with -1 ...
DS_OVERWRITE = """
  v_mov_b32 v4, -1
  ds_write_b32 {addr}, v4
  ds_write_b32 {addr}, v4 offset:512"""
# ... or, by LDS DMA, with inp[lane] (the wave-uniform LDS base is M0: this wave's words in A, then B;
# with {own} the other wave's, which this wave read itself)
DMA_OVERWRITE = """
  v_readfirstlane_b32 s8, v1
  {own}
  s_mov_b32 s12, s4
  s_and_b32 s13, s5, 0xffff
  s_mov_b32 s14, 512
  s_mov_b32 s15, 0x00027000
  v_and_b32 v6, 0xff, v1
  s_mov_b32 m0, s8
  s_nop 0
  buffer_load_dword v6, s[12:15], 0 offen lds
  s_add_u32 m0, s8, 512
  s_nop 0
  buffer_load_dword v6, s[12:15], 0 offen lds"""
READ_A, READ_B = "ds_read_b32 v3, v2", "ds_read_b32 v5, v2 offset:512"


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("wait,overwrite,extra,races", [
    pytest.param("s_waitcnt lgkmcnt(0)", "ds", "", [], id="clean"),
    pytest.param("", "ds", "", [("ds_write_b32", 2, READ_A), ("ds_write_b32", 3, READ_B)], id="no-wait"),
    # DS operations of a wave complete in order: lgkmcnt(1) covers the first read, not the second
    pytest.param("s_waitcnt lgkmcnt(1)", "ds", "", [("ds_write_b32", 3, READ_B)], id="lgkmcnt1"),
    # a read no wait has covered is still in flight after a second barrier
    pytest.param("", "ds", "s_barrier", [("ds_write_b32", 2, READ_A), ("ds_write_b32", 3, READ_B)],
                 id="two-barriers"),
    # a wave overwriting the words it read itself: in order within the wave, no hazard
    pytest.param("", "ds-own", "", [], id="own-words"),
    pytest.param("s_waitcnt lgkmcnt(0)", "dma", "", [], id="dma-clean"),
    # nor is this wave's own LDS DMA over them reported (a modelling choice: docs/emulator.md)
    pytest.param("", "dma-own", "", [], id="dma-own-words"),
    pytest.param("", "dma", "", [("buffer_load_dword", 0, READ_A), ("buffer_load_dword", 1, READ_B)],
                 id="dma-no-wait"),
])
def test_read_still_in_flight_at_a_barrier(target, wait, overwrite, extra, races):
    if overwrite.startswith("dma"):
        over = DMA_OVERWRITE.format(own="s_xor_b32 s8, s8, 0x100" if overwrite == "dma-own" else "")
    else:
        over = DS_OVERWRITE.format(addr="v2" if overwrite == "ds-own" else "v1")
    body = PENDING_READ.format(wait=wait, extra=extra, overwrite=over)
    co = build("inflight", body, target=target, args=(("ptr", "inp"), ("ptr", "out")), lds=1024, vgprs=8, sgprs=24)
    dev = Device(target)
    inp = np.arange(1000, 1128, dtype=np.uint32)
    din, dout = dev.to_device(inp, "inp"), dev.to_device(np.zeros(256, np.uint32), "out")
    reports = dev.load_module(co).launch("inflight", grid=(1,), block=(128,), args=[din, dout], on_error="collect")
    if not races:
        assert reports == []
        # every wave got the words the other wave published before they were overwritten
        t = np.arange(128)
        np.testing.assert_array_equal(dev.from_device(dout, 256, np.uint32), np.concatenate([t ^ 64, t ^ 64]))
        return
    assert {r.category for r in reports} == {"lds-race"}, [str(r) for r in reports]
    assert len(reports) == len(races)
    for r, (mnemonic, nth, read) in zip(sorted(reports, key=lambda r: r.pc), races):
        if target == "gfx942":                 # (llvm-objdump-19, the reference for the PC, has no gfx950)
            assert r.pc == address_of(co, mnemonic, nth)
        assert r.instruction.startswith(mnemonic) and r.kernel == "inflight" and r.workgroup == (0, 0, 0)
        # wave w overwrites its own words, which wave 1 - w read: the first is word 64*w (+ 512 in B)
        assert r.address == 256 * r.wave + (512 if read == READ_B else 0) and r.lanes == tuple(range(64))
        assert f"wave {r.wave} writes" in r.message and f"that wave {1 - r.wave} read (`{read}`" in r.message
        assert "still outstanding at the s_barrier" in r.message and "lgkmcnt" in r.message


def _waits_covering_reads_before_barriers(lines: list[str]) -> list[int]:
    """Lines of the `s_waitcnt lgkmcnt(0)`s that stand right before an s_barrier and whose last DS
    instruction before them is a read: the waits that end a wave's reads of LDS other waves write next."""
    found = []
    for i, line in enumerate(lines[:-1]):
        if line.split("//")[0].strip() != "s_waitcnt lgkmcnt(0)" or not lines[i + 1].lstrip().startswith("s_barrier"):
            continue
        last_ds = next((x.strip() for x in reversed(lines[:i]) if x.lstrip().startswith("ds_")), "")
        if last_ds.startswith("ds_read"):
            found.append(i)
    return found


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("spec", ["rms_norm_bf16", "layer_norm_bf16"])
def test_bundled_norm_without_its_waits_before_barriers(spec, target):
    """The norms bring their weight (and bias) to every wave through LDS in rounds (isagen.prims.rows.
    load_vectors_once): each wave copies the pieces it needs out of round n (ds_read_b128), waits for
    the copies, and passes the barrier after which every wave writes round n + 1 over the same LDS.
    Deleting those waits leaves the copies in flight while the next round lands: each deletion must be
    reported at the write that follows its barrier; the kernel as built reports nothing and is right."""
    import torch

    import isagen
    from isagen.objects.toolchain import assemble
    k = isagen.build(spec, target)
    lines = k.assembly.splitlines()
    waits = _waits_covering_reads_before_barriers(lines)
    assert len(waits) >= 3, "the norm no longer stages its vectors through LDS in rounds"
    planted = assemble("\n".join(x for i, x in enumerate(lines) if i not in waits) + "\n", target, name=k.name)
    # the write after each deleted wait's barrier: the nth ds_write_b128 of the kernel
    writes = [i for i, x in enumerate(lines) if x.lstrip().startswith("ds_write_b128")]
    expect = [sum(j < w for j in writes) for w in waits]

    # one workgroup, rows of the kernel's largest size: every round carries data (past the row's end the
    # rounds are zeros, and a write that leaves LDS unchanged cannot change what a read returns)
    rows, hidden = 16, k.params["max_hidden"]
    g = torch.Generator().manual_seed(5)
    x = torch.randn(rows, hidden, generator=g).to(torch.bfloat16)
    vectors = [torch.randn(hidden, generator=g).to(torch.bfloat16) for _ in k.launch.tensors[1:-1]]
    for co in (k.code_object, planted):
        out = torch.zeros_like(x)
        _, values, sizes = k.bind((x, *vectors, out), {"eps": 1e-5})
        dev = Device(target)
        bufs = {id(t): dev.to_device(t.view(torch.int16).numpy()) for t in (x, *vectors, out)}
        scalar = {"f32": np.float32, "i32": np.int32, "u32": np.uint32}
        args = [int(bufs[id(values[a.name])]) if a.kind == "pointer" else scalar[a.dtype](values[a.name])
                for a in k.args]
        reports = dev.load_module(co).launch(k.symbol, grid=k.launch.grid_for(sizes, k.name), block=k.launch.block,
                                             args=args, on_error="collect")
        if co is k.code_object:
            assert reports == []
            w = vectors[0].double()
            xd = x.double()
            if spec == "rms_norm_bf16":
                want = xd * torch.rsqrt((xd * xd).mean(-1, keepdim=True) + 1e-5) * w
            else:
                want = torch.nn.functional.layer_norm(xd, (hidden,), w, vectors[1].double(), 1e-5)
            got = torch.from_numpy(dev.from_device(bufs[id(out)], (rows, hidden), np.int16)).view(torch.bfloat16)
            assert_close(got, want, "bf16", spec, scale=float(want.abs().max()))
            continue
        assert {r.category for r in reports} == {"lds-race"}, [str(r) for r in reports]
        assert len(reports) == len(waits)
        # (llvm-objdump-19, the reference for the PC, has no gfx950)
        pcs = [a for a, text in objdump_addresses(planted) if text.startswith("ds_write_b128")] \
            if target == "gfx942" else None
        for r, nth in zip(sorted(reports, key=lambda r: r.pc), expect):
            if pcs is not None:
                assert r.pc == pcs[nth]
            assert r.instruction.startswith("ds_write_b128") and r.kernel == k.name and r.workgroup == (0, 0, 0)
            assert "read (`ds_read_b128" in r.message          # the copy out of the previous round
            assert "still outstanding at the s_barrier" in r.message
            assert r.address == 1024 * r.wave and r.lanes == tuple(range(64))    # its own 1 KiB piece
