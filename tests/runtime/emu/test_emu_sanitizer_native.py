"""The sanitizer's LDS race shadow in C (san_native.py) against its numpy path: random multi-wave kernels of
LDS reads and writes (shared, own and other waves' words, replicated and differing data, misaligned
offsets, partial EXEC, barriers with and without waits) must give the same reports (text, place,
counts), the same values read and leave the same shadow state with the C path on and off, and the C
path must have taken accesses (and a race it cannot decide must still be reported through it)."""

import random

import numpy as np
import pytest
from emu_support import address_of, build

from isagen.runtime.emu import Device, san_cgen, san_memo, san_native
from isagen.runtime.emu import sanitizer as S

pytestmark = pytest.mark.skipif(san_native.library() is None, reason=f"no native library: {san_native.why_not()}")

_SHADOW = S._native_shadow
SIZES = {"b32": 4, "b64": 8, "b128": 16}


def _kernel(seed: int) -> str:
    rng = random.Random(seed)
    lines = ["  s_load_dwordx2 s[4:5], s[0:1], 0x0",
             "  v_and_b32 v1, 63, v0",                  # lane
             "  v_xor_b32 v2, 64, v0",                  # the neighbour wave's thread
             "  v_mov_b32 v10, v0", "  v_mov_b32 v11, v1", "  v_mov_b32 v12, v0", "  v_mov_b32 v13, v1",
             "  v_mov_b32 v14, v1", "  v_mov_b32 v15, v1", "  v_mov_b32 v16, v1", "  v_mov_b32 v17, v1",
             "  v_mov_b32 v40, 7", "  v_mov_b32 v41, 7", "  v_mov_b32 v42, 7", "  v_mov_b32 v43, 7",
             "  s_waitcnt lgkmcnt(0)"]
    for sh in (2, 3, 4):                                # addresses for each access size
        lines += [f"  v_lshlrev_b32 v{20 + sh}, {sh}, v1",      # lane's words: every wave the same
                  f"  v_lshlrev_b32 v{24 + sh}, {sh}, v0",      # own words
                  f"  v_lshlrev_b32 v{28 + sh}, {sh}, v2"]      # the neighbour wave's words
    for _ in range(rng.randint(6, 14)):
        r = rng.random()
        if r < 0.3:
            lines.append("  s_waitcnt lgkmcnt(0)")
            if rng.random() < 0.8:
                lines.append("  s_barrier")
            continue
        if r < 0.35:
            lines.append("  s_barrier")
            continue
        if r < 0.4:
            lines.append("  s_mov_b32 exec_lo, 0xff00ffff" if rng.random() < 0.5 else "  s_mov_b64 exec, -1")
            continue
        size = rng.choice(list(SIZES))
        n = SIZES[size]
        sh = n.bit_length() - 1
        addr = f"v{rng.choice((20, 24, 28)) + sh}"
        off = rng.choice((0, 0, n, 4 * n, 512, 4)) if n > 4 else rng.choice((0, 0, 4, 256, 2))
        data = rng.choice((10, 14))                      # per-thread data / the same in every wave
        if rng.random() < 0.5:
            src = f"v{data}" if n == 4 else f"v[{data}:{data + n // 4 - 1}]"
            lines.append(f"  ds_write_{size} {addr}, {src} offset:{off}")
        else:
            dst = "v40" if n == 4 else f"v[40:{40 + n // 4 - 1}]"
            lines.append(f"  ds_read_{size} {dst}, {addr} offset:{off}")
    # the last value read, then all of LDS (after a barrier), out
    lines += ["  s_mov_b64 exec, -1", "  s_waitcnt lgkmcnt(0)", "  v_lshlrev_b32 v3, 4, v0",
              "  global_store_dwordx4 v3, v[40:43], s[4:5]", "  s_barrier",
              "  ds_read_b128 v[40:43], v3", "  ds_read_b128 v[44:47], v3 offset:4096", "  s_waitcnt lgkmcnt(0)",
              "  v_add_u32 v4, 0x1000, v3", "  v_add_u32 v5, 0x2000, v3",
              "  global_store_dwordx4 v4, v[40:43], s[4:5]", "  global_store_dwordx4 v5, v[44:47], s[4:5]"]
    return "\n".join(lines) + "\n"


def _run(co, native: bool, monkeypatch, name="rnd"):
    made: list = []
    orig = _SHADOW
    taken = [0]

    def shadow(san, st):
        made.append(san)
        nat = orig(san, st) if native else None
        if nat is not None:
            access = nat.access

            def counted(*a, **k):
                out = access(*a, **k)
                taken[0] += out[0] == 0
                return out
            nat.access = counted
        return nat
    monkeypatch.setattr(S, "_native_shadow", shadow)
    # (with the block engine on, ISAGEN_EMU_CGEN=force, the accesses inside its runs are made by their C:
    # san_ds.py; counted too)
    _count_c_accesses(monkeypatch, taken)
    dev = Device("gfx942", array_module="cpu")     # the native shadow is the CPU engine's
    out = dev.to_device(np.zeros(3072, np.uint32))
    reports = dev.load_module(co).launch(name, grid=(2,), block=(256,), args=[out], on_error="collect")
    return reports, made, taken[0], dev.from_device(out, 3072, np.uint32)


def _state(san):
    san._settle_reads()
    pend = [(k, w.tolist(), s.tolist(), S._words(f).tolist(), None if v is None else v.tolist())
            for k, w, s, f, v in san.pending_lds]
    return (san.wr_stamp.tolist(), san.rd_stamp.tolist(), san.gen.tolist(), san.wblk.tolist(),
            [x.tolist() for x in san.wbox], [x.tolist() for x in san.rbox], pend, len(san.inflight_reads))


def test_native_lds_shadow_matches_numpy(monkeypatch):
    taken = n_reports = 0
    for seed in range(16):
        co = build("rnd", _kernel(seed), args=(("ptr", "out"),), lds=8192, vgprs=48)
        rep0, san0, _, out0 = _run(co, False, monkeypatch)
        rep1, san1, t, out1 = _run(co, True, monkeypatch)
        assert [(str(r), r.extra) for r in rep1] == [(str(r), r.extra) for r in rep0], seed
        np.testing.assert_array_equal(out1, out0)       # the reads and writes the C path made
        assert len(san0) == len(san1) == 1
        assert _state(san1[0]) == _state(san0[0]), seed
        taken += t
        n_reports += len(rep0)
    assert taken > 20 and n_reports > 20         # both paths were exercised


def test_race_inside_native_accesses_is_reported(monkeypatch):
    # four waves store their own words and read their neighbour's with no barrier between: every
    # access is the common case the C path takes; the read is a race it hands to the numpy checks
    body = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  v_xor_b32 v2, 0x100, v1
  ds_write_b32 v1, v0
  s_waitcnt lgkmcnt(0)
  ds_read_b32 v3, v2
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v3, s[4:5]
"""
    co = build("rnd", body, args=(("ptr", "out"),), lds=2048, vgprs=8)
    reports, _, taken, _ = _run(co, True, monkeypatch)
    assert taken >= 1                  # the write went through the C path
    assert {r.category for r in reports} == {"lds-race"}
    r = reports[0]
    assert r.pc == address_of(co, "ds_read_b32") and "no s_barrier" in r.message
    assert f"that wave {r.wave ^ 1} wrote" in r.message


# ---------------------------------------------------------------- the native block engine (san_cgen.py)

_PRE = "  s_load_dwordx2 s[4:5], s[0:1], 0x0\n  v_lshlrev_b32 v1, 2, v0\n"
_POST = "  s_waitcnt vmcnt(0) lgkmcnt(0)\n  global_store_dword v1, v5, s[4:5]\n"
CGEN_KERNELS = {
    # (body, the category reported and the instruction it names, or None for a clean kernel)
    "uninit": ("  v_add_u32 v2, v1, v0\n  v_xor_b32 v3, v2, v7\n  v_and_b32 v5, v3, v1\n",
               ("uninitialized", "v_xor_b32", "v7")),
    "sgpr_hazard": ("  v_cmp_gt_u32_e64 s[10:11], 32, v0\n  v_cndmask_b32_e64 v5, 0, 1, s[10:11]\n"
                    "  v_add_u32 v5, v5, v0\n", ("hazard", "v_cndmask_b32_e64", "needs 2")),
    "sgpr_ok": ("  v_cmp_gt_u32_e64 s[10:11], 32, v0\n  v_add_u32 v2, v1, v0\n  v_xor_b32 v3, v2, v1\n"
                "  v_cndmask_b32_e64 v5, 0, 1, s[10:11]\n  v_add_u32 v5, v5, v3\n", None),
    "missing_wait": ("  s_waitcnt lgkmcnt(0)\n  global_load_dword v2, v1, s[4:5]\n  v_add_u32 v3, v1, v0\n"
                     "  v_xor_b32 v4, v2, v3\n  v_and_b32 v5, v4, v1\n", ("missing-wait", "v_xor_b32", "vmcnt(0)")),
    "partial_lanes": ("  s_mov_b64 exec, 0xffffffff\n  v_mov_b32 v6, 1\n  v_add_u32 v2, v1, v0\n  s_mov_b64 exec, -1\n"
                      "  v_add_u32 v3, v1, v0\n  v_xor_b32 v5, v6, v3\n",
                      ("uninitialized", "v_xor_b32", "v6")),
}


def _launch_cgen(co, mode, monkeypatch, sanitize=True):
    """(report texts, reports, the buffer after, calls of sanitized native runs)."""
    from isagen.runtime.emu import san_cgen
    monkeypatch.setenv("ISAGEN_EMU_CGEN", mode)
    calls = [0]
    orig = san_cgen.SanPlan.run_handler

    def counting(self, run):
        fn = orig(self, run)

        def counted(st, ws):
            calls[0] += 1
            fn(st, ws)
        return counted
    monkeypatch.setattr(san_cgen.SanPlan, "run_handler", counting)
    dev = Device("gfx942", sanitize=sanitize, array_module="cpu")   # (the CPU engine's block engine)
    buf = dev.to_device(np.arange(128, dtype=np.uint32) * 3)
    reports = dev.load_module(co).launch("cg", grid=(1,), block=(128,), args=[buf], on_error="collect")
    return [(str(r), r.extra) for r in reports], reports, dev.from_device(buf, 128, np.uint32), calls[0]


@pytest.mark.parametrize("name", list(CGEN_KERNELS))
def test_checks_fire_inside_native_runs(name, monkeypatch):
    from isagen.runtime.emu import cgen
    body, want = CGEN_KERNELS[name]
    co = build("cg", _PRE + body + _POST, args=(("ptr", "buf"),), vgprs=8)
    ref, _, out_ref, _ = _launch_cgen(co, "0", monkeypatch)
    got, reports, out, calls = _launch_cgen(co, "force", monkeypatch)
    if calls == 0:
        pytest.skip(f"the native block engine is not available: {cgen.why_not()}")
    assert got == ref
    np.testing.assert_array_equal(out, out_ref)
    if want is None:
        assert reports == []
        t = np.arange(128, dtype=np.uint32)
        np.testing.assert_array_equal(out, (t < 32) + ((4 * t + t) ^ (4 * t)))
    else:
        cat, inst, text = want
        assert {r.category for r in reports} == {cat}, got
        assert reports[0].pc == address_of(co, inst) and text in reports[0].message


# ---------------------------------------------------------------- a run's checks fused (san_cgen.fused_checks)

FUSED_KERNELS = {
    # (body, the first report (category, instruction, text) or None, whether the fused checks decide every
    # execution (False: a pending result or an uninitialised register sends the run to the per-instruction
    # checks))
    "sgpr_hazard": (CGEN_KERNELS["sgpr_hazard"][0], CGEN_KERNELS["sgpr_hazard"][1], True),
    "sgpr_ok": (CGEN_KERNELS["sgpr_ok"][0], None, True),
    # the wait states of SALU instructions (which neither check nor record hazards) between the pair count
    "sgpr_salu_gap1": ("  v_cmp_gt_u32_e64 s[10:11], 32, v0\n  s_mov_b32 s20, 0\n"
                       "  v_cndmask_b32_e64 v5, 0, 1, s[10:11]\n", ("hazard", "v_cndmask_b32_e64", "1 wait state"),
                       True),
    "sgpr_salu_gap2": ("  v_cmp_gt_u32_e64 s[10:11], 32, v0\n  s_mov_b32 s20, 0\n  s_mov_b32 s21, s20\n"
                       "  v_cndmask_b32_e64 v5, 0, 1, s[10:11]\n", None, True),
    "trans_hazard": ("  v_cvt_f32_u32 v2, v0\n  v_rcp_f32 v3, v2\n  v_cvt_u32_f32 v5, v3\n",
                     ("hazard", "v_cvt_u32_f32", "needs 1"), True),
    # an MFMA result read by a VALU of the run that follows it
    "mfma_hazard": ("  s_nop 4\n  v_mfma_f32_4x4x1_16b_f32 v[8:11], v1, v0, 0\n  v_add_u32 v2, v1, v0\n"
                    "  v_xor_b32 v5, v8, v2\n",
                    ("hazard", "v_xor_b32", "needs"), True),
    "uninit": (CGEN_KERNELS["uninit"][0], CGEN_KERNELS["uninit"][1], False),
    # (an EXEC write ends the run after the load: a run holding the load itself is not fused)
    "missing_wait": (CGEN_KERNELS["missing_wait"][0].replace("s[4:5]\n", "s[4:5]\n  s_mov_b64 exec, -1\n", 1),
                     CGEN_KERNELS["missing_wait"][1], False),
    "partial_lanes": (CGEN_KERNELS["partial_lanes"][0], CGEN_KERNELS["partial_lanes"][1], False),
}


@pytest.mark.parametrize("name", list(FUSED_KERNELS))
def test_fused_run_checks(name, monkeypatch):
    """Each check made once per run where that is exact (san_cgen.fused_checks): the same reports as the
    per-instruction checks without the block engine, and the fused path taken (or refused) as expected."""
    from isagen.runtime.emu import cgen, san_cgen
    body, want, decides = FUSED_KERNELS[name]
    co = build("cg", _PRE + body + _POST, args=(("ptr", "buf"),), vgprs=16)
    ref, _, out_ref, _ = _launch_cgen(co, "0", monkeypatch)
    answers: list[bool] = []
    orig = san_cgen.fused_checks

    def counting(steps):
        f = orig(steps)
        if f is None:
            return None

        def g(st, ws):
            r = f(st, ws)
            answers.append(r)
            return r
        return g
    monkeypatch.setattr(san_cgen, "fused_checks", counting)
    got, reports, out, calls = _launch_cgen(co, "force", monkeypatch)
    if calls == 0:
        pytest.skip(f"the native block engine is not available: {cgen.why_not()}")
    assert got == ref
    np.testing.assert_array_equal(out, out_ref)
    assert answers, "no run went through the fused checks"
    assert all(answers) if decides else not all(answers)
    if want is None:
        assert reports == []
    else:
        cat, inst, text = want
        assert reports[0].category == cat and reports[0].pc == address_of(co, inst), got
        assert text in reports[0].message, got


# ---------------------------------------------------------------- MFMAs between sanitized native runs

# bf16 A/B inputs from the lane (v2..v4: v_cvt/v_lshl of v0), then VALU instructions the MFMA follows
# directly (no s_nop between); the 16x16x16 bf16 MFMA is one the native kernel takes.  Under the
# sanitizer an MFMA ends a native run (san_cgen.sanitized_run_ok; taking it into the runs was exact but
# measured no faster: bench/results/emu_sanitizer_cost.md, round 4), so its checks run between them
_MF_IN = ("  v_cvt_f32_u32 v2, v0\n  v_lshlrev_b32 v3, 16, v0\n  v_mov_b32 v4, v2\n  v_mov_b32 v6, v3\n"
          "  v_mov_b32 v7, v2\n  v_add_u32 v12, v1, v0\n  v_add_u32 v13, v1, v0\n")
_MF = "  v_mfma_f32_16x16x16_bf16 v[8:11], v[2:3], v[6:7], {c}\n"
_MF_OUT = "  s_nop 15\n  v_xor_b32 v5, v8, v11\n"
MFMA_KERNELS = {
    # (body, the first report (category, instruction, text in its message) or None for a clean kernel)
    "clean": (_MF_IN + _MF.format(c=0) + "  v_add_u32 v14, v1, v0\n" + _MF_OUT, None),
    "uninit_a": (_MF_IN.replace("  v_mov_b32 v6, v3\n", "") + _MF.format(c=0) + _MF_OUT,
                 ("uninitialized", "v_mfma_f32_16x16x16_bf16", "v6")),
    "uninit_c": (_MF_IN + _MF.format(c="v[8:11]") + _MF_OUT,
                 ("uninitialized", "v_mfma_f32_16x16x16_bf16", "v8")),
    "pending_load": ("  s_waitcnt lgkmcnt(0)\n  global_load_dword v7, v1, s[4:5]\n"
                     + _MF_IN.replace("  v_mov_b32 v7, v2\n", "") + _MF.format(c=0) + _MF_OUT,
                     ("missing-wait", "v_mfma_f32_16x16x16_bf16", "vmcnt(0)")),
    "valu_write_mfma_read": (_MF_IN.replace("  v_add_u32 v12, v1, v0\n  v_add_u32 v13, v1, v0\n", "")
                             + _MF.format(c=0) + _MF_OUT, ("hazard", "v_mfma_f32_16x16x16_bf16", "needs 2")),
    "result_read_by_valu": (_MF_IN + _MF.format(c=0) + "  v_add_u32 v14, v1, v0\n  v_xor_b32 v5, v9, v14\n"
                            + _MF_OUT, ("hazard", "v_xor_b32", "v9")),
    "result_overwritten_by_valu": (_MF_IN + _MF.format(c=0) + "  v_mov_b32 v10, v1\n" + _MF_OUT,
                                   ("hazard", "v_mov_b32_e32 v10", "overwrites v10")),
    "mfma_srcab": (_MF_IN + _MF.format(c=0) + "  v_mfma_f32_16x16x16_bf16 v[12:15], v[8:9], v[6:7], 0\n"
                   + _MF_OUT, ("hazard", "v_mfma_f32_16x16x16_bf16 v[12:15]", "SrcA/B")),
    # half the lanes execute: the MFMA's result counts as written in every lane (mark_v's all_lanes),
    # the VALU results in the executing ones, also where the runs' checks are fused
    "partial_exec": (_MF_IN + "  s_mov_b64 exec, 0xffffffff\n  v_add_u32 v13, v1, v0\n" + _MF.format(c=0)
                     + "  v_mov_b32 v14, v1\n"
                     "  s_mov_b64 exec, -1\n" + _MF_OUT + "  v_xor_b32 v5, v5, v14\n",
                     ("uninitialized", "v_xor_b32_e32 v5, v5, v14", "v14")),
    "mfma_srcc_exact": (_MF_IN + _MF.format(c=0) + _MF.format(c="v[8:11]") + _MF_OUT, "ref"),
    "mfma_srcc_overlap": (_MF_IN + _MF.format(c=0)
                          + "  v_mfma_f32_16x16x16_bf16 v[16:19], v[2:3], v[6:7], v[10:13]\n" + _MF_OUT,
                          ("hazard", "v_mfma_f32_16x16x16_bf16 v[16:19]", "SrcC")),
}


@pytest.mark.parametrize("name", list(MFMA_KERNELS))
def test_mfma_checks_inside_native_runs(name, monkeypatch):
    """MFMA checks (uninitialised A/B/C, a pending load into an operand, the VALU->MFMA, MFMA->VALU and
    MFMA->MFMA hazards) with the block engine forced: every report the same as without the block
    engine, the registers the same as those and as with the sanitizer off."""
    from isagen.runtime.emu import cgen
    body, want = MFMA_KERNELS[name]
    co = build("cg", _PRE + body + _POST, args=(("ptr", "buf"),), vgprs=24)
    ref, _, out_ref, _ = _launch_cgen(co, "0", monkeypatch)
    _, _, out_off, _ = _launch_cgen(co, "force", monkeypatch, sanitize=False)
    got, reports, out, calls = _launch_cgen(co, "force", monkeypatch)
    if calls == 0:
        pytest.skip(f"the native block engine is not available: {cgen.why_not()}")
    assert got == ref
    np.testing.assert_array_equal(out, out_ref)
    np.testing.assert_array_equal(out, out_off)
    if want is None:
        assert reports == []
    elif want != "ref":
        cat, inst, text = want
        assert reports, "nothing reported"
        first = reports[0]
        assert first.category == cat and first.pc == address_of(co, inst), got
        assert text in first.message, got


# ---------------------------------------------------------------- the memo of a run's checks (san_memo.py)

_LOOP_PRE = """  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  v_cvt_f32_u32 v2, v0
  v_lshlrev_b32 v3, 16, v0
  v_mov_b32 v6, v3
  v_mov_b32 v7, v2
  v_mov_b32 v4, 0
  v_mov_b32 v5, 0
  v_mov_b32 v8, 0
  v_mov_b32 v9, 0
  v_mov_b32 v10, 0
  v_mov_b32 v11, 0
  v_mov_b32 v12, 0
  v_mov_b32 v13, 0
  s_mov_b32 s8, 0
  s_waitcnt lgkmcnt(0)
"""
_LOOP = ".Lloop:\n{body}  s_add_u32 s8, s8, 1\n  s_cmp_lt_u32 s8, 6\n  s_cbranch_scc1 .Lloop\n"
_LOOP_POST = "  s_waitcnt vmcnt(0) lgkmcnt(0)\n  global_store_dword v1, v5, s[4:5]\n"
_MFC = "  v_mfma_f32_16x16x16_bf16 v[8:11], v[2:3], v[6:7], v[8:11]\n"
_CLEAN_BODY = ("  global_load_dword v4, v1, s[4:5]\n  v_add_u32 v13, v1, v0\n  s_waitcnt vmcnt(0)\n"
               "  v_add_u32 v5, v5, v4\n" + _MFC + "  s_nop 15\n  v_xor_b32 v5, v5, v9\n")
# a clean run of its own at the end of an iteration (the EXEC write ends the run before it)
_TAIL = "  s_mov_b64 exec, -1\n  v_add_u32 v13, v1, v0\n  v_xor_b32 v15, v13, v1\n"
MEMO_KERNELS = {
    # (pre-loop code, loop body, the categories reported)
    "clean": ("", _CLEAN_BODY, set()),
    # the MFMA at the end of an iteration, its result read at the start of the next: only the iterations
    # after the first have the hazard
    "hazard_after_first": ("", "  v_xor_b32 v5, v5, v9\n  global_load_dword v4, v1, s[4:5]\n  s_waitcnt vmcnt(0)\n"
                           "  v_add_u32 v5, v5, v4\n" + _MFC + _TAIL, {"hazard"}),
    # a load at the end of an iteration read at the start of the next with no wait between (vmcnt(1)
    # keeps it the only one outstanding there)
    "missing_wait_after_first": ("", "  v_add_u32 v5, v5, v4\n" + _MFC + "  s_nop 15\n"
                                 "  global_load_dword v4, v1, s[4:5]\n  s_waitcnt vmcnt(1)\n" + _TAIL,
                                 {"missing-wait"}),
    # a register written under half EXEC and read under all of it, every iteration
    "partial_exec": ("", "  s_mov_b64 exec, 0xffffffff\n  v_mov_b32 v14, v1\n  s_mov_b64 exec, -1\n"
                     "  v_add_u32 v5, v5, v14\n" + _MFC + "  s_nop 15\n" + _TAIL, {"uninitialized"}),
    # a VALU write of EXEC read by the MFMA right after it, every iteration, in a run whose checks come
    # from the memo when nothing reports (the writers' stretch is one run: san_cgen.SanPlan._exec_run)
    "valu_exec_write_hazard": ("", "  v_cmpx_le_u32 vcc, 0, v0\n" + _MFC + "  s_nop 15\n" + _TAIL, {"hazard"}),
    # ... with the wait states it needs: clean, its runs' checks from the memo after the first iteration
    "valu_exec_write_waited": ("", "  v_cmpx_le_u32 vcc, 0, v0\n  s_nop 4\n" + _MFC + "  s_nop 15\n" + _TAIL,
                               set()),
    # before the loop, one stretch of first writes split by EXEC writers: v14 written for the first time
    # after an OR into EXEC (all lanes stay on) and before the saveexec, v13 (already initialised) under
    # half EXEC -- the memo takes the stretch in the second launch (signature part (d))
    "first_writes_around_exec_writers": ("  s_or_b64 exec, exec, s[0:1]\n  v_mov_b32 v14, v1\n"
                                         "  v_cmp_gt_u32 vcc, 32, v0\n  s_and_saveexec_b64 s[12:13], vcc\n"
                                         "  v_add_u32 v13, v13, v1\n  s_or_b64 exec, exec, s[12:13]\n",
                                         "  v_add_u32 v5, v5, v14\n" + _CLEAN_BODY, set()),
    # ... v14 written for the first time under half EXEC, then read in the loop under all of it: the
    # memo must not take the stretch (its marks depend on EXEC), every read reports
    "first_write_under_half_exec": ("  v_cmp_gt_u32 vcc, 32, v0\n  s_and_saveexec_b64 s[12:13], vcc\n"
                                    "  v_mov_b32 v14, v1\n  s_or_b64 exec, exec, s[12:13]\n",
                                    "  v_add_u32 v5, v5, v14\n" + _CLEAN_BODY, {"uninitialized"}),
    # every other iteration skips the s_nop between the MFMA and the read of its result: two entry
    # states of the runs after the branch, one with a hazard
    "alternating": ("", _MFC + "  s_and_b32 s9, s8, 1\n  s_cmp_eq_u32 s9, 0\n  s_cbranch_scc1 .Lskip\n"
                    "  s_nop 15\n.Lskip:\n  v_xor_b32 v5, v5, v9\n  s_nop 4\n", {"hazard"}),
    # VALU writes to MFMA registers: before the MFMA of the run (its record drops the VALU entry), after it
    # in the run (the run's MFMA entry reset) and in the next run (an older MFMA entry reset)
    "valu_and_mfma_writes": ("", "  v_mov_b32 v8, 0\n  s_nop 1\n" + _MFC + "  s_nop 15\n  v_mov_b32 v11, v5\n"
                             "  s_mov_b64 exec, -1\n  v_mov_b32 v9, v5\n  v_xor_b32 v5, v5, v10\n", set()),
    # every other iteration waits for the load before the run that reads it: the same hazard records
    # before the run either way (s_nop 1 against s_waitcnt + s_branch), two scoreboard states, one a
    # missing wait
    "wait_alternating": ("", "  global_load_dword v4, v1, s[4:5]\n  s_and_b32 s9, s8, 1\n  s_cmp_eq_u32 s9, 0\n"
                         "  s_cbranch_scc1 .Lnowait\n  s_waitcnt vmcnt(0)\n  s_branch .Ljoin\n.Lnowait:\n"
                         "  s_nop 1\n.Ljoin:\n  v_add_u32 v5, v5, v4\n  v_add_u32 v13, v1, v0\n", {"missing-wait"}),
    # waves not in lockstep: wave w of a workgroup first runs a scalar loop of w + 1 iterations, so the
    # waves reach the main loop at different times (and with different issue-slot counts)
    "diverged": ("  v_readfirstlane_b32 s10, v0\n  s_lshr_b32 s10, s10, 6\n  s_add_u32 s10, s10, 1\n"
                 ".Lpre:\n  v_add_u32 v13, 3, v13\n  s_nop 3\n  s_sub_u32 s10, s10, 1\n  s_cmp_lg_u32 s10, 0\n"
                 "  s_cbranch_scc1 .Lpre\n", _CLEAN_BODY, set()),
    # an MFMA result stored to LDS too early, every iteration, inside a run with a DS instruction (whose
    # handler holds the checks' reports back): each occurrence counted, so the memo must not learn the
    # entry signature of a run whose held checks reported
    "ds_hazard_every_iteration": ("", _MFC + "  ds_write_b32 v1, v9\n  s_nop 15\n  s_waitcnt lgkmcnt(0)\n"
                                  + _TAIL, {"hazard"}),
    # LDS traffic between the runs (lgkmcnt on the scoreboard)
    "lds": ("", "  ds_write_b32 v1, v5\n  s_waitcnt lgkmcnt(0)\n  ds_read_b32 v4, v1\n  v_add_u32 v13, v1, v0\n"
            "  s_waitcnt lgkmcnt(0)\n  v_add_u32 v5, v5, v4\n" + _MFC + "  s_nop 15\n  v_xor_b32 v5, v5, v9\n", set()),
}


def _norm(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (tuple, list)):
        return tuple(_norm(y) for y in x)
    if hasattr(x, "idx") and hasattr(x, "inst"):
        return ("step", x.idx)
    if hasattr(x, "pc"):
        return ("inst", x.pc)
    return x


def _checks_state(san, history: bool = True):
    """Everything the checks and records of a run read or write (the history dicts by key: made first
    where the memo deferred them, Sanitizer.settle; ``history=False`` leaves them out, and deferred)."""
    hist = None
    if history:
        san.settle()
        hist = {d: sorted((k, _norm(v)) for k, v in getattr(san, d).items())
                for d in ("mfma_w", "mfma_c", "valu_w", "trans_w", "any_w", "mfma_p", "mfma_cp")}
    return (san.slot.tolist(), san.issued_all.tolist(), san.done_all.tolist(),
            {k: v.tolist() for k, v in san.pend.items()}, {k: v.tolist() for k, v in san.prod.items()},
            {k: sorted(v) for k, v in san.maybe.items()}, san.any_pending, san.vinit.tolist(), sorted(san.vfull),
            san.sinit.tolist(), sorted(san.sfull), hist, san.exec_w.tolist(), san.m0_w.tolist(), san.exec_w_any,
            _norm(san.exec_w_inst), len(san.pending_lds), len(san.inflight_reads), _norm(san_memo._tail(san)))


_MEMO_CHECKS = san_memo.ChecksMemo.checks
_SAN_INIT = S.Sanitizer.__init__
_RUN_HANDLER = san_cgen.SanPlan.run_handler


def _launch_memo(co, mode, memo, monkeypatch, history: bool = True):
    """(reports, buffer, the checks' state after each memoised run, the final state, memo hits, native runs
    made).  ``history=False``: the states after each run leave out the history dicts, so that the memo's
    deferred records (Sanitizer.deferred) pile up over the launch until the final state makes them."""
    monkeypatch.setenv("ISAGEN_EMU_CGEN", mode)
    monkeypatch.setenv("ISAGEN_EMU_SAN_MEMO", "1" if memo else "0")
    states: list = []
    sans: list = []
    hits = [0]
    exec_memos: list = []       # the memos of the runs with EXEC writers (san_cgen.SanPlan._exec_run)
    depth = [0]
    orig, init = _MEMO_CHECKS, _SAN_INIT

    def checks(self, st, ws, slow):
        # (the state after each outermost run: a run with EXEC writers makes its parts' runs' checks
        # inside its own when the memo does not have them)
        depth[0] += 1
        try:
            hit = orig(self, st, ws, slow)
        finally:
            depth[0] -= 1
        hits[0] += hit
        san = st.san
        if san.tail_at is not None:                     # the memo's trace tail, aged, is the trace's
            t0, tail = san.tail_at
            aged = [(a + san.clk - t0, s) for a, s in zip(tail[::2], tail[1::2]) if a + san.clk - t0 <= san.window]
            assert tuple(x for p in aged for x in p) == san_memo._tail(san)
        if depth[0] == 0:
            states.append(_checks_state(st.san, history))
        return hit

    def made(self, *args):
        init(self, *args)
        sans.append(self)
    runs = [0]

    def handler(self, run):
        runs[0] += 1
        fn = _RUN_HANDLER(self, run)
        if run.parts is not None:
            exec_memos.append(fn.memo)
        return fn
    monkeypatch.setattr(san_memo.ChecksMemo, "checks", checks)
    monkeypatch.setattr(S.Sanitizer, "__init__", made)
    monkeypatch.setattr(san_cgen.SanPlan, "run_handler", handler)
    dev = Device("gfx942", array_module="cpu")
    buf = dev.to_device(np.arange(256, dtype=np.uint32) * 3)
    mod = dev.load_module(co)
    # two launches: the memo of the first is used in the second
    reports = [mod.launch("cg", grid=(2,), block=(128,), args=[buf], on_error="collect") for _ in range(2)]
    assert len(sans) == 2
    return ([[(str(r), r.extra) for r in rep] for rep in reports], dev.from_device(buf, 256, np.uint32), states,
            _checks_state(sans[-1]), hits[0], runs[0], sum(m.hits for m in exec_memos))


def _memo_kernel(name: str):
    """The code object of MEMO_KERNELS[name]: its prologue, then its body in the loop."""
    pre, body, _ = MEMO_KERNELS[name]
    return build("cg", _LOOP_PRE + pre + _LOOP.format(body=body) + _LOOP_POST, args=(("ptr", "buf"),), vgprs=24,
                 lds=1024)


@pytest.mark.parametrize("name", list(MEMO_KERNELS))
def test_memo_of_run_checks(name, monkeypatch):
    """The memo of a run's checks (san_memo.py) against the per-instruction checks: the same reports
    (text, place, occurrences) as the memo off and the block engine off, the same sanitizer state after
    every run and at the end, and the memo used (hits) in the loops."""
    from isagen.runtime.emu import cgen
    co = _memo_kernel(name)
    want = MEMO_KERNELS[name][2]
    ref, out_ref, _, end_ref, _, _, _ = _launch_memo(co, "0", True, monkeypatch)
    off, out_off, states_off, end_off, hits_off, _, _ = _launch_memo(co, "force", False, monkeypatch)
    got, out, states, end, hits, runs, exec_hits = _launch_memo(co, "force", True, monkeypatch)
    if runs == 0:
        pytest.skip(f"the native block engine is not available: {cgen.why_not()}")
    assert got == off == ref
    assert all({r[0].split("]")[0][1:] for r in rep} == want for rep in got), got
    np.testing.assert_array_equal(out, out_ref)
    np.testing.assert_array_equal(out_off, out_ref)
    assert hits_off == 0 and hits > 0
    if name in ("valu_exec_write_waited", "valu_and_mfma_writes", "first_writes_around_exec_writers"):
        assert exec_hits > 0         # a run with EXEC writers had its checks from the memo (and ran in C)
    assert len(states) == len(states_off)
    for i, (a, b) in enumerate(zip(states, states_off)):
        assert a == b, i
    assert end == end_off == end_ref


@pytest.mark.parametrize("name", list(MEMO_KERNELS))
def test_memo_history_deferred_over_a_launch(name, monkeypatch):
    """The memo's history records deferred over the whole launch (nothing reads the history dicts between
    runs here but the runs' own checks): the same reports and final state as the memo off, the deferred
    records of several runs made at once in the end."""
    from isagen.runtime.emu import cgen
    co = _memo_kernel(name)
    piled = [0, 0, 0]           # the most runs deferred at once; hits deferred; records made by settle
    orig, orig_apply = S.Sanitizer.settle, san_memo.ChecksMemo.apply

    def settle(self):
        piled[0] = max(piled[0], len(self.deferred))
        piled[2] += len(self.deferred)
        orig(self)

    def apply(self, st, fresh=None):
        piled[1] += self.history
        orig_apply(self, st, fresh)
    monkeypatch.setattr(S.Sanitizer, "settle", settle)
    monkeypatch.setattr(san_memo.ChecksMemo, "apply", apply)
    off, out_off, states_off, end_off, _, _, _ = _launch_memo(co, "force", False, monkeypatch, history=False)
    got, out, states, end, hits, runs, _ = _launch_memo(co, "force", True, monkeypatch, history=False)
    if runs == 0:
        pytest.skip(f"the native block engine is not available: {cgen.why_not()}")
    assert got == off
    np.testing.assert_array_equal(out, out_off)
    assert hits > 0 and piled[1] > 0 and piled[2] <= piled[1]
    if name in ("clean", "lds", "alternating", "valu_and_mfma_writes"):
        # nothing checks hazards between the loop's runs: records of several runs wait together, and a
        # run's later hits replace its earlier ones
        assert piled[0] >= 2 and piled[2] < piled[1], piled
    assert states == states_off
    assert end == end_off


# ---------------------------------------------------------------- LDS instructions in sanitized native runs (san_ds.py)

def _count_c_accesses(monkeypatch, counter: list) -> None:
    """Add to ``counter[0]`` the LDS accesses the sanitized runs' generated C makes (san_ds.py): the
    records ``DsHook.after`` makes of them."""
    from isagen.runtime.emu import san_ds
    orig_after = san_ds.DsHook.after

    def after(self, st, wsa, wg, bounds, res, stopped):
        n = len(st.san.pending_lds) + len(st.san.unstamped_reads)
        orig_after(self, st, wsa, wg, bounds, res, stopped)
        counter[0] += len(st.san.pending_lds) + len(st.san.unstamped_reads) - n
    monkeypatch.setattr(san_ds.DsHook, "after", after)


def _run_engine(co, mode, monkeypatch, san_native_on=True, name="rnd", grid=(2,), block=(256,)):
    """(reports, sanitizers, accesses the sanitized runs' C made, the buffer) with the block engine ``mode``."""
    monkeypatch.setenv("ISAGEN_EMU_CGEN", mode)
    made: list = []
    in_c = [0]

    def shadow(san, st):
        made.append(san)
        return _SHADOW(san, st) if san_native_on else None
    monkeypatch.setattr(S, "_native_shadow", shadow)
    _count_c_accesses(monkeypatch, in_c)
    dev = Device("gfx942", array_module="cpu")
    n = 3072 * grid[0]
    out = dev.to_device(np.zeros(n, np.uint32))
    reports = dev.load_module(co).launch(name, grid=grid, block=block, args=[out], on_error="collect")
    return reports, made, in_c[0], dev.from_device(out, n, np.uint32)


def _block_engine() -> bool:
    """Whether the native block engine can be built here (a C compiler, the CPU engine); cgen.why_not()
    keeps the reason of the last program that did not go native, whichever it was."""
    from isagen.runtime.emu import native
    return native._compiler() is not None and native.available()


def _ds_run_kernel(seed: int) -> str:
    """_kernel's accesses with VALU instructions between them (so that they form native runs), and
    reads and writes of shared words with no barrier between: races inside the runs."""
    rng = random.Random(1000 + seed)
    lines = _kernel(seed).splitlines()
    out = []
    for ln in lines:
        out.append(ln)
        if "ds_" in ln and rng.random() < 0.7:
            out.append(f"  v_add_u32 v{rng.choice((18, 19))}, v1, v0")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("seed", range(12))
def test_ds_inside_sanitized_native_runs(seed, monkeypatch):
    """Random multi-wave LDS kernels (own, shared and the neighbour wave's words, replicated and differing
    data, misaligned offsets, partial EXEC, barriers with and without waits): with the DS instructions
    inside the sanitized native runs (san_ds.py), the same reports (text, place, counts, order), the same
    memory and the same shadow state as the per-instruction path, with its LDS shadow in C and in numpy."""
    from isagen.runtime.emu import cgen
    co = build("rnd", _ds_run_kernel(seed), args=(("ptr", "out"),), lds=8192, vgprs=48)
    rep0, san0, _, out0 = _run_engine(co, "0", monkeypatch)
    rep_np, san_np, _, out_np = _run_engine(co, "0", monkeypatch, san_native_on=False)
    rep1, san1, in_c, out1 = _run_engine(co, "force", monkeypatch)
    if not _block_engine():
        pytest.skip(f"the native block engine is not available: {cgen.why_not()}")
    ref = [(str(r), r.extra) for r in rep0]
    assert [(str(r), r.extra) for r in rep_np] == ref
    assert [(str(r), r.extra) for r in rep1] == ref, seed
    np.testing.assert_array_equal(out1, out0)
    np.testing.assert_array_equal(out_np, out0)
    assert _state(san1[0]) == _state(san0[0]) == _state(san_np[0]), seed
    # and with the sanitizer's native shadow off, every DS instruction of the runs through numpy
    rep2, san2, in_c2, out2 = _run_engine(co, "force", monkeypatch, san_native_on=False)
    assert [(str(r), r.extra) for r in rep2] == ref
    np.testing.assert_array_equal(out2, out0)
    assert in_c2 == 0 and _state(san2[0]) == _state(san0[0])
    assert in_c > 0                     # the runs' C made accesses


# Planted cases inside native runs (VALU instructions around each access, no s_waitcnt between them), four
# workgroups of four waves; s6 = 0x100 in workgroups 2 and 3, 0 in 0 and 1, so that the C takes a
# workgroup's access where the other workgroups of the same instruction go to the numpy checks
_DS_PRE = """  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_lshr_b32 s6, s2, 1
  s_lshl_b32 s6, s6, 8
  v_and_b32 v1, 63, v0
  v_lshlrev_b32 v8, 2, v0
  v_lshlrev_b32 v9, 2, v1
  v_xor_b32 v2, s6, v8
  v_mov_b32 v10, v0
  v_mov_b32 v11, v1
  v_mov_b32 v12, 0
  v_mov_b32 v13, 0
  v_mov_b32 v14, 0
  v_mov_b32 v15, 0
  s_waitcnt lgkmcnt(0)
"""
# every workgroup's LDS out (after a barrier) at its own place in the buffer
_DS_POST = """  s_mov_b64 exec, -1
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_lshlrev_b32 v3, 4, v0
  ds_read_b128 v[40:43], v3
  ds_read_b128 v[44:47], v3 offset:4096
  s_mul_i32 s7, s2, 0x3000
  s_add_u32 s4, s4, s7
  s_addc_u32 s5, s5, 0
  s_waitcnt lgkmcnt(0)
  v_add_u32 v4, 0x1000, v3
  v_add_u32 v5, 0x2000, v3
  global_store_dwordx4 v3, v[40:43], s[4:5]
  global_store_dwordx4 v4, v[44:47], s[4:5]
  global_store_dwordx4 v5, v[12:15], s[4:5]
"""
DS_KERNELS = {
    # (body, the categories reported)
    "clean": ("""  v_lshlrev_b32 v16, 3, v0
  ds_write_b32 v8, v10
  v_add_u32 v12, v1, v0
  ds_write2st64_b32 v8, v10, v11 offset0:4 offset1:8
  v_add_u32 v13, v1, v0
  ds_write_b64 v16, v[10:11] offset:4096
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_add_u32 v14, v1, v0
  ds_read_b32 v20, v2
  v_add_u32 v15, v1, v0
  ds_read2st64_b32 v[22:23], v9 offset0:0 offset1:2
  ds_read_b128 v[24:27], v9 offset:2048
  ds_read2_b64 v[28:31], v9 offset0:16 offset1:32
  v_add_u32 v16, v1, v0
  s_waitcnt lgkmcnt(0)
  v_add_u32 v12, v20, v22
  v_add_u32 v13, v23, v27
""", set()),
    # a wave reads its neighbour's words (workgroups 2, 3) with no barrier after their write; the read's
    # result then read with no wait: the race (numpy handler, after the C) reported before the
    # missing wait (checks, before the C) of the next instruction
    "race_read": ("""  ds_write_b32 v8, v10
  v_add_u32 v12, v1, v0
  ds_read_b32 v20, v2
  v_add_u32 v13, v20, v0
  v_add_u32 v14, v1, v0
""", {"lds-race", "missing-wait"}),
    # a read still outstanding at the barrier (no s_waitcnt before it), then every wave writes the words
    # its neighbour (2, 3) or itself (0, 1) read: a write-after-read race in workgroups 2 and 3
    "read_in_flight_at_barrier": ("""  ds_write_b32 v8, v10
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_add_u32 v12, v1, v0
  ds_read_b32 v20, v2
  v_add_u32 v13, v1, v0
  s_barrier
  v_add_u32 v14, v1, v0
  ds_write_b32 v8, v11
  v_add_u32 v15, v1, v0
  s_waitcnt lgkmcnt(0)
""", {"lds-race"}),
    # write after read in one barrier generation
    "write_after_read": ("""  ds_read_b32 v20, v2
  v_add_u32 v12, v1, v0
  ds_write_b32 v8, v11
  v_add_u32 v13, v1, v0
  s_waitcnt lgkmcnt(0)
""", {"lds-race"}),
    # every wave of a workgroup writes the lane's word: the same value (the lane) in workgroups 0 and 1
    # (replicated data: no race), the thread id (different values) where s6 is set
    "two_waves_one_word": ("""  v_cmp_ne_u32_e64 s[8:9], s6, 0
  s_nop 4
  v_cndmask_b32_e64 v12, v11, v10, s[8:9]
  v_add_u32 v13, v1, v0
  ds_write_b32 v9, v12
  v_add_u32 v14, v1, v0
  ds_write_b32 v9, v11 offset:1024
  v_add_u32 v15, v1, v0
""", {"lds-race"}),
    # ds_write2: each wave's second element lands on the next wave's first one (workgroups 2, 3)
    "write2_across_waves": ("""  v_add_u32 v12, s6, v8
  v_add_u32 v13, v1, v0
  ds_write2_b32 v12, v10, v11 offset0:0 offset1:64
  v_add_u32 v14, v1, v0
  ds_write2_b32 v8, v10, v11 offset0:0 offset1:64
  v_add_u32 v15, v1, v0
""", {"lds-race"}),
    # an access out of range in workgroups 2 and 3 only, between accesses the C makes
    "out_of_range": ("""  ds_write_b32 v8, v10
  v_lshlrev_b32 v12, 8, v2
  v_add_u32 v13, v1, v0
  ds_write_b32 v12, v11
  v_add_u32 v14, v1, v0
  ds_read_b32 v20, v8
  v_add_u32 v15, v1, v0
  s_waitcnt lgkmcnt(0)
""", {"oob-lds"}),
}


@pytest.mark.parametrize("name", list(DS_KERNELS))
def test_planted_lds_cases_inside_sanitized_native_runs(name, monkeypatch):
    """Planted races, a read in flight at a barrier, two waves writing one word (different values, and
    the same value), a pair write over another wave's words and an access out of range, each inside a
    native run and in some workgroups only: the reports (text, place, counts and order), memory and
    shadow state are those of the per-instruction path, and the C made the other accesses."""
    from isagen.runtime.emu import cgen
    body, cats = DS_KERNELS[name]
    co = build("rnd", _DS_PRE + body + _DS_POST, args=(("ptr", "out"),), lds=8192, vgprs=48)
    grid = (4,)
    rep0, san0, _, out0 = _run_engine(co, "0", monkeypatch, grid=grid)
    rep1, san1, in_c, out1 = _run_engine(co, "force", monkeypatch, grid=grid)
    if not _block_engine():
        pytest.skip(f"the native block engine is not available: {cgen.why_not()}")
    ref = [(str(r), r.extra) for r in rep0]
    assert [(str(r), r.extra) for r in rep1] == ref
    np.testing.assert_array_equal(out1, out0)
    assert _state(san1[0]) == _state(san0[0])
    assert {r.category for r in rep0} == cats, ref
    assert in_c > 0
    rep2, _, _, out2 = _run_engine(co, "force", monkeypatch, san_native_on=False, grid=grid)
    assert [(str(r), r.extra) for r in rep2] == ref
    np.testing.assert_array_equal(out2, out0)


def test_shadow_arrays_reused_across_launches():
    """The LDS shadow's arrays pass from one launch's sanitizer to the next one's on the same device
    (sanitizer._ShadowPool): launches after racy ones report what they report on a fresh device."""
    import gc
    cos = [build("rnd", _kernel(seed), args=(("ptr", "out"),), lds=8192, vgprs=48) for seed in (1, 4, 11)]

    def launch(dev, co):
        out = dev.to_device(np.zeros(3072, np.uint32))
        reps = dev.load_module(co).launch("rnd", grid=(2,), block=(256,), args=[out], on_error="collect")
        return [(str(r), r.extra) for r in reps], dev.from_device(out, 3072, np.uint32)
    fresh = [launch(Device("gfx942", array_module="cpu"), co) for co in cos]
    dev = Device("gfx942", array_module="cpu")
    for k in (0, 1, 2, 1, 0, 2, 2):
        rep, out = launch(dev, cos[k])
        assert rep == fresh[k][0], k
        np.testing.assert_array_equal(out, fresh[k][1])
        gc.collect()
    pool = S._ShadowPool._pools.get(dev)
    assert pool and all(base > 0 for _, base in pool.values())     # generations went on from the last ones
