"""The native block engine (runtime/emu/cgen.py) against the per-instruction numpy handlers it replaces,
bit for bit: every instruction it emits C for, on random registers, random EXEC (all, none, partial
masks), random SCC and VCC, for all waves and for a subset; a long mixed run (EXEC writes, LDS writes
then reads); an LDS access out of range (the run hands over to the numpy handlers, which report it);
and whole GEMMs (Triton's and isagen's gemm_bf16) with the engine forced on against it off.  The first
run on a machine compiles each kernel's generated C (seconds each; cached after)."""

from __future__ import annotations

import numpy as np
import pytest
from emu_support import build

from isagen.runtime.emu import cgen, native
from isagen.runtime.emu.device import Device
from isagen.runtime.emu.executor import RunContext
from isagen.runtime.emu.wave import ALL, Batch

pytestmark = pytest.mark.skipif(native._compiler() is None, reason="no host C compiler")

LDS = 16384
W, G = 6, 2          # waves (3 per workgroup), workgroups

VALU = """
v_mov_b32_e32 v1, v2
v_mov_b32_e32 v1, s5
v_mov_b32_e32 v1, 0x12345678
v_mov_b32_e32 v1, -7
v_not_b32_e32 v1, v2
v_add_u32_e32 v1, v2, v3
v_add_u32_e64 v1, s4, v3
v_add_u32_e32 v1, 0x4d2, v3
v_sub_u32_e32 v1, v2, v3
v_subrev_u32_e32 v1, s6, v3
v_mul_lo_u32 v1, v2, v3
v_mul_hi_u32 v1, v2, s7
v_mul_u32_u24_e32 v1, v2, v3
v_mul_hi_u32_u24_e32 v1, v2, v3
v_mad_u32_u24 v1, v2, v3, v4
v_min_u32_e32 v1, v2, v3
v_max_u32_e32 v1, v2, v3
v_min_i32_e32 v1, v2, v3
v_max_i32_e32 v1, -5, v3
v_lshlrev_b32_e32 v1, v2, v3
v_lshlrev_b32_e32 v1, 4, v3
v_lshrrev_b32_e32 v1, v2, v3
v_ashrrev_i32_e32 v1, v2, v3
v_and_b32_e32 v1, v2, v3
v_or_b32_e32 v1, s8, v3
v_xor_b32_e32 v1, v2, v3
v_xnor_b32_e32 v1, v2, v3
v_bfe_u32 v1, v2, v3, v4
v_bfe_i32 v1, v2, 8, 5
v_bfe_i32 v1, v2, v3, v4
v_bfi_b32 v1, v2, v3, v4
v_alignbit_b32 v1, v2, v3, v4
v_alignbyte_b32 v1, v2, v3, v4
v_perm_b32 v1, v2, v3, v4
v_perm_b32 v1, v2, v3, s9
v_perm_b32 v1, v2, v3, s11
v_lshl_add_u32 v1, v2, v3, v4
v_add_lshl_u32 v1, v2, v3, v4
v_add3_u32 v1, v2, v3, v4
v_add3_u32 v1, v2, s3, 12
v_lshl_or_b32 v1, v2, v3, v4
v_and_or_b32 v1, v2, v3, v4
v_or3_b32 v1, v2, v3, v4
v_xad_u32 v1, v2, v3, v4
v_min3_u32 v1, v2, v3, v4
v_max3_u32 v1, v2, v3, v4
v_lshl_add_u64 v[6:7], v[2:3], 2, v[4:5]
v_lshl_add_u64 v[2:3], v[2:3], 0, s[4:5]
v_lshl_add_u64 v[2:3], s[4:5], 1, v[2:3]
v_lshlrev_b64 v[6:7], v1, v[2:3]
v_lshrrev_b64 v[6:7], v1, v[2:3]
v_lshrrev_b64 v[2:3], 5, v[2:3]
v_cndmask_b32_e32 v1, v2, v3, vcc
v_cndmask_b32_e64 v1, v2, v3, s[6:7]
v_cndmask_b32_e64 v1, 0, 1, s[6:7]
v_add_co_u32_e32 v1, vcc, v2, v3
v_add_co_u32_e64 v1, s[4:5], v2, v3
v_sub_co_u32_e32 v1, vcc, v2, v3
v_subrev_co_u32_e64 v1, s[4:5], 3, v3
v_addc_co_u32_e32 v1, vcc, v2, v3, vcc
v_addc_co_u32_e64 v1, s[4:5], v2, v3, s[6:7]
v_subb_co_u32_e32 v1, vcc, v2, v3, vcc
v_subbrev_co_u32_e64 v1, s[4:5], v2, v3, s[6:7]
v_cmp_gt_i32_e32 vcc, v2, v3
v_cmp_gt_i32_e64 s[2:3], s33, v3
v_cmp_lt_u32_e64 s[4:5], v2, v3
v_cmp_eq_u32_e32 vcc, 7, v3
v_cmp_ne_i32_e64 s[4:5], v2, v3
v_cmp_le_i32_e32 vcc, v2, v3
v_cmp_ge_u32_e32 vcc, v2, v3
v_cmp_gt_u32_e64 exec, v2, v3
v_cmp_o_f32_e32 vcc, v2, v3
v_cmp_u_f32_e64 s[4:5], v2, v3
v_cmp_lt_f32_e32 vcc, v2, v3
v_cmp_eq_f32_e32 vcc, 1.0, v3
v_cmp_le_f32_e32 vcc, v2, v3
v_cmp_gt_f32_e32 vcc, v2, v3
v_cmp_ge_f32_e32 vcc, v2, v3
v_cmp_lg_f32_e32 vcc, v2, v3
v_cmp_neq_f32_e32 vcc, v2, v3
v_cmp_nlt_f32_e32 vcc, v2, v3
v_cmp_nle_f32_e32 vcc, v2, v3
v_cmp_ngt_f32_e32 vcc, v2, v3
v_cmp_nge_f32_e32 vcc, v2, v3
v_cmp_nlg_f32_e32 vcc, v2, v3
v_and_b32_sdwa v1, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD
v_and_b32_sdwa v1, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_2 src1_sel:WORD_0
v_add_u32_sdwa v1, sext(v2), v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_1 src1_sel:WORD_1
v_sub_u32_sdwa v1, v2, sext(v3) dst_sel:DWORD dst_unused:UNUSED_PRESERVE src0_sel:BYTE_3 src1_sel:WORD_1
v_ashrrev_i32_sdwa v1, v2, sext(v3) dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_0 src1_sel:WORD_1
v_or_b32_sdwa v1, s2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_0 src1_sel:BYTE_1
v_mov_b32_sdwa v1, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1
v_mov_b32_sdwa v1, sext(v2) dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_3
v_cndmask_b32_sdwa v1, v2, v3, vcc dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:WORD_1
v_cndmask_b32_sdwa v1, v2, v3, vcc dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_0 src1_sel:WORD_0
"""

SALU = """
s_add_u32 s1, s2, s3
s_sub_u32 s1, s2, 0x7b
s_add_i32 s1, s2, s3
s_sub_i32 s1, s2, s3
s_addc_u32 s1, s2, s3
s_subb_u32 s1, s2, s3
s_min_i32 s1, s2, s3
s_min_u32 s1, s2, s3
s_max_i32 s1, s2, -4
s_max_u32 s1, s2, s3
s_cselect_b32 s1, s2, 5
s_and_b32 s1, s2, s3
s_or_b32 s1, s2, s3
s_xor_b32 s1, s2, s3
s_andn2_b32 s1, s2, s3
s_orn2_b32 s1, s2, s3
s_nand_b32 s1, s2, s3
s_nor_b32 s1, s2, s3
s_xnor_b32 s1, s2, s3
s_lshl_b32 s1, s2, s3
s_lshr_b32 s1, s2, s3
s_ashr_i32 s1, s2, s3
s_mul_i32 s1, s2, s3
s_mul_hi_u32 s1, s2, s3
s_lshl1_add_u32 s1, s2, s3
s_lshl2_add_u32 s1, s2, s3
s_lshl3_add_u32 s1, s2, s3
s_lshl4_add_u32 s1, s2, s3
s_pack_ll_b32_b16 s1, s2, s3
s_pack_lh_b32_b16 s1, s2, s3
s_pack_hh_b32_b16 s1, s2, s3
s_add_u32 exec_lo, s2, s3
s_cselect_b64 s[2:3], s[4:5], 0
s_and_b64 s[2:3], s[4:5], s[6:7]
s_and_b64 s[34:35], vcc, s[2:3]
s_or_b64 exec, exec, s[24:25]
s_xor_b64 s[2:3], s[4:5], exec
s_andn2_b64 s[2:3], s[4:5], s[6:7]
s_orn2_b64 s[2:3], s[4:5], s[6:7]
s_nand_b64 s[2:3], s[4:5], s[6:7]
s_nor_b64 s[2:3], s[4:5], s[6:7]
s_xnor_b64 s[2:3], s[4:5], s[6:7]
s_lshl_b64 s[2:3], s[4:5], s6
s_lshr_b64 s[2:3], s[4:5], 33
s_cmp_eq_u32 s1, s2
s_cmp_lg_u32 s31, s29
s_cmp_gt_i32 s1, s2
s_cmp_ge_i32 s1, -3
s_cmp_lt_i32 s1, s2
s_cmp_le_i32 s1, s2
s_cmp_eq_i32 s1, s2
s_cmp_lg_i32 s1, s2
s_cmp_gt_u32 s1, s2
s_cmp_ge_u32 s1, s2
s_cmp_lt_u32 s1, s2
s_cmp_le_u32 s1, s2
s_bitcmp0_b32 s1, s2
s_bitcmp1_b32 s1, s2
s_cmp_eq_u64 s[2:3], s[4:5]
s_cmp_lg_u64 s[2:3], s[4:5]
s_mov_b32 s1, s2
s_mov_b32 s1, 0x12345
s_not_b32 s1, s2
s_mov_b64 s[2:3], s[4:5]
s_mov_b64 exec, s[4:5]
s_not_b64 s[2:3], s[4:5]
s_and_saveexec_b64 s[24:25], s[34:35]
s_or_saveexec_b64 s[2:3], s[4:5]
s_xor_saveexec_b64 s[2:3], s[4:5]
s_andn2_saveexec_b64 s[2:3], s[4:5]
s_orn2_saveexec_b64 s[2:3], s[4:5]
s_nand_saveexec_b64 s[2:3], s[4:5]
s_nor_saveexec_b64 s[2:3], s[4:5]
s_xnor_saveexec_b64 s[2:3], s[4:5]
s_andn1_saveexec_b64 s[2:3], s[4:5]
s_orn1_saveexec_b64 s[2:3], s[4:5]
s_movk_i32 s1, 0x8001
s_cmpk_lt_i32 s1, 0x8000
s_cmpk_eq_u32 s1, 0x1234
s_cmpk_gt_u32 s1, 0xff00
s_addk_i32 s1, 0x7fff
s_mulk_i32 s1, 0xfffd
s_nop 1
"""

DS = """
ds_read_b32 v1, v2 offset:16
ds_read_b64 v[4:5], v2
ds_read_b96 v[4:6], v2 offset:4
ds_read_b128 v[4:7], v2 offset:32
ds_read_b64 v[2:3], v2
ds_read2_b32 v[4:5], v2 offset0:1 offset1:9
ds_read2_b64 v[4:7], v2 offset0:2 offset1:3
ds_read2st64_b32 v[4:5], v2 offset1:1
ds_read2st64_b64 v[4:7], v2 offset1:1
ds_read2st64_b64 v[2:5], v2 offset0:1 offset1:2
ds_write_b32 v2, v3 offset:8
ds_write_b64 v2, v[4:5] offset:16
ds_write_b96 v2, v[4:6]
ds_write_b128 v2, v[4:7] offset:64
ds_write2_b32 v2, v3, v4 offset0:2 offset1:5
ds_write2_b64 v2, v[4:5], v[6:7] offset1:1
ds_write2st64_b32 v2, v3, v4 offset0:1 offset1:2
ds_write2st64_b64 v2, v[4:5], v[6:7] offset1:1
"""


def _program(body: str):
    co = build("cg", body, vgprs=64, sgprs=48, lds=LDS)
    dev = Device("gfx942", sanitize=False, array_module="cpu")   # (the CPU engine's)
    mod = dev.load_module(co)
    prog = mod.kernel("cg").program(False)
    steps = [prog.step(i) for i in range(len(prog.insts)) if prog.insts[i].name != "s_endpgm"]
    return dev, prog, steps


def _one_run(body: str):
    """``body`` as one C run: the device, program, steps, the run's handler, and the same steps run one
    by one through their numpy handlers (the reference)."""
    dev, prog, steps = _program(body)
    assert all(cgen.covers(s, prog.ctx) for s in steps)
    (h,) = cgen.compile_runs(prog.ctx, [steps])

    def seq(st, ws):
        for s in steps:
            s.fn(st, ws)
    return dev, prog, steps, h, seq


def _threads_over_chunks(monkeypatch) -> None:
    """Every run call spread over two threads in four chunks of workgroups, however small its work."""
    monkeypatch.setenv("ISAGEN_EMU_THREADS", "2")
    monkeypatch.setattr(cgen, "MIN_THREAD_WAVES", 1)
    monkeypatch.setattr(cgen, "THREAD_WORK", 1)
    monkeypatch.setattr(cgen, "CHUNKS", 4)


def _batch(rng, prog, *, lds_addr_reg: int | None = None, write: bool = False, unaligned: bool = False,
           waves: int = W, groups: int = G) -> Batch:
    W, G = waves, groups
    st = Batch(prog.ctx.nregs, W, G, LDS)
    st.V[:] = rng.integers(0, 2**32, st.V.shape, dtype=np.uint64).astype(np.uint32)
    # some small values (shift counts, offsets, widths stay interesting) and some equal pairs
    small = rng.random(st.V.shape) < 0.25
    st.V[small] = rng.integers(0, 40, int(small.sum()))
    st.V[3, :, ::7] = st.V[2, :, ::7]
    st.S[:] = rng.integers(0, 2**32, st.S.shape, dtype=np.uint64).astype(np.uint32)
    st.S[1:4, ::2] = rng.integers(0, 40, (3, (W + 1) // 2))
    st.SCC[:] = rng.integers(0, 2, W)
    # s11: v_perm_b32 selectors, most of them byte shuffles (every selector byte < 8: the C fast path)
    sels = np.array([0x05040100, 0x07060302, 0x03070006, 0x01000504], np.uint32)
    st.S[11] = np.where(rng.random(W) < 0.8, sels[rng.integers(0, 4, W)], st.S[11] & np.uint32(0x0F0F0F0F))
    ex = rng.random((W, 64)) < 0.6
    ex[0] = True          # a full wave, an empty one and partial ones
    ex[1] = False
    st.set_exec(ALL, ex)
    st.wg[:] = np.arange(W) // (W // G)
    st.wg_x = st.wg
    st.wave_in_wg[:] = np.arange(W) % (W // G)
    st.lds[:] = rng.integers(0, 256, st.lds.shape, dtype=np.uint8)
    if lds_addr_reg is not None:
        # distinct 32-byte slots per lane of a workgroup (writes never overlap), in range for every offset
        for g in range(G):
            ws = np.nonzero(st.wg == g)[0]
            slots = rng.permutation(256)[:64 * len(ws)].reshape(len(ws), 64)
            st.V[lds_addr_reg, ws] = (slots * 32 + (rng.integers(0, 16, slots.shape) if unaligned else 0)).astype(
                np.uint32)
    return st


def _state(st) -> list[np.ndarray]:
    return [st.V.copy(), st.S.copy(), st.SCC.copy(), st.EXEC.copy(), st.lds.copy()]


def _run(dev, prog, st, fn, ws) -> tuple[list[np.ndarray], list, tuple[int, int], bool]:
    rc = RunContext("cg", prog, dev, "collect", 10**9)
    rc.batch = st
    st.run = rc
    with np.errstate(all="ignore"):
        try:
            fn(st, ws)
        except Exception as e:        # collect mode: _Abort after an out-of-range report
            if type(e).__name__ != "_Abort":
                raise
    return _state(st), [str(r) for r in rc.reports], (rc.lds_bytes_read, rc.lds_bytes_written), st.exec_all


def _compare(dev, prog, steps, handlers, rng, **kw):
    for s, h in zip(steps, handlers):
        for ws in (ALL, np.array([0, 2, 3, 5])):
            st = _batch(rng, prog, **kw)
            st2 = _batch(np.random.default_rng(0), prog, **kw)         # then the same start as st
            st2.V[:], st2.S[:], st2.SCC[:], st2.EXEC[:], st2.lds[:] = st.V, st.S, st.SCC, st.EXEC, st.lds
            st2.exec_all = st.exec_all
            want = _run(dev, prog, st, s.fn if isinstance(s, cgen.CompiledStep) else s, ws)
            got = _run(dev, prog, st2, h, ws)
            what = s.inst.text if isinstance(s, cgen.CompiledStep) else "run"
            names = ("V", "S", "SCC", "EXEC", "LDS")
            for nm, a, b in zip(names, want[0], got[0]):
                assert np.array_equal(a, b), f"{what}: {nm} differs (ws={ws})"
            assert want[1:] == got[1:], what


@pytest.mark.parametrize("body", [VALU, SALU], ids=["valu", "salu"])
def test_every_alu_instruction_matches_numpy(body):
    dev, prog, steps = _program(body)
    for s in steps:
        assert cgen.covers(s, prog.ctx), s.inst.text
    handlers = cgen.compile_runs(prog.ctx, [[s] for s in steps])
    assert handlers is not None, cgen.why_not()
    _compare(dev, prog, steps, handlers, np.random.default_rng(1))


def test_every_lds_instruction_matches_numpy():
    dev, prog, steps = _program(DS)
    for s in steps:
        assert cgen.covers(s, prog.ctx), s.inst.text
    handlers = cgen.compile_runs(prog.ctx, [[s] for s in steps])
    assert handlers is not None, cgen.why_not()
    for unaligned in (False, True):
        _compare(dev, prog, steps, handlers, np.random.default_rng(2), lds_addr_reg=2, unaligned=unaligned)


def test_sdwa_forms_the_c_does_not_take_stay_numpy():
    """SDWA with a part-dword destination, or a float op, is left to the numpy handlers."""
    _, prog, steps = _program("""
v_and_b32_sdwa v1, v2, v3 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:WORD_1 src1_sel:DWORD
v_add_u32_sdwa v1, v2, v3 dst_sel:BYTE_0 dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:DWORD
v_add_f32_sdwa v1, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD
v_cmp_gt_u32_sdwa vcc, v2, v3 src0_sel:WORD_1 src1_sel:DWORD
""")
    assert [cgen.covers(s, prog.ctx) for s in steps] == [False] * 4


def test_tables_are_all_tested():
    text = VALU + SALU + DS
    names = {line.split()[0].removesuffix("_e32").removesuffix("_e64").removesuffix("_sdwa")
             for line in text.splitlines() if line.strip()}
    table = (set(cgen._V32) | set(cgen._V64) | set(cgen._CARRY) | set(cgen._S2_32) | set(cgen._S2_64)
             | set(cgen._S1_32) | set(cgen._S1_64) | set(cgen._SAVEEXEC) | {"v_cndmask_b32"})
    assert table <= names, sorted(table - names)


def test_mixed_run_and_lds_out_of_range():
    body = """
s_and_saveexec_b64 s[24:25], s[4:5]
v_add_u32_e32 v3, v2, v3
ds_write_b64 v2, v[4:5] offset:8
v_cmp_gt_u32_e64 s[6:7], v3, v5
ds_read2_b32 v[8:9], v2 offset0:2 offset1:3
v_cndmask_b32_e64 v10, v8, v9, s[6:7]
s_or_b64 exec, exec, s[24:25]
ds_write_b32 v2, v10 offset:4
v_mov_b32_e32 v11, v10
ds_read_b32 v12, v2 offset:4
s_nop 0
"""
    dev, prog, steps, h, seq = _one_run(body)
    rng = np.random.default_rng(3)
    _compare(dev, prog, [seq] * 4, [h] * 4, rng, lds_addr_reg=2)
    # lanes past the allocation (in the first, the second or both workgroups): the C run stops before
    # the access, and the numpy handlers run the rest in their order and report it
    for bad in ([(0, 7)], [(3, 7)], [(5, 1), (0, 60)], [(4, 9), (5, 9)]):
        for ws in (ALL, np.array([0, 3, 4, 5])):
            st = _batch(rng, prog, lds_addr_reg=2)
            for w, lane in bad:
                st.V[2, w, lane] = LDS - 6
                st.S[4, w] |= np.uint32(1 << lane) if lane < 32 else np.uint32(0)
                st.S[5, w] |= np.uint32(1 << (lane - 32)) if lane >= 32 else np.uint32(0)
                st.EXEC[w, lane] = True
            st.set_exec(ALL, st.EXEC.copy())
            st2 = _batch(rng, prog, lds_addr_reg=2)
            st2.V[:], st2.S[:], st2.SCC[:], st2.EXEC[:], st2.lds[:] = st.V, st.S, st.SCC, st.EXEC, st.lds
            st2.exec_all = st.exec_all
            want, got = _run(dev, prog, st, seq, ws), _run(dev, prog, st2, h, ws)
            assert want[1] and want[1] == got[1]
            assert want[2:] == got[2:]
            for a, b in zip(want[0], got[0]):
                assert np.array_equal(a, b)


MFMA_RUN = """
v_add_u32_e32 v3, v2, v3
v_mfma_f32_32x32x8_bf16 v[40:55], v[20:21], v[22:23], v[40:55]
ds_write_b64 v2, v[4:5] offset:8
v_mfma_f32_32x32x8_bf16 v[40:55], v[22:23], v[20:21], v[40:55]
v_mov_b32_e32 v20, v23
v_mfma_f32_32x32x8_bf16 v[24:39], v[20:21], v[22:23], 0
s_and_saveexec_b64 s[24:25], s[4:5]
ds_read2_b32 v[8:9], v6 offset0:2 offset1:3
v_mfma_f32_32x32x8_bf16 v[40:55], v[8:9], v[22:23], v[40:55]
s_or_b64 exec, exec, s[24:25]
v_cndmask_b32_e64 v10, v8, v9, s[6:7]
s_nop 0
"""


def test_run_with_mfmas_on_threads_and_lds_out_of_range(monkeypatch):
    """A run with MFMAs among VALU, SALU and LDS instructions (the native MFMA kernel called wave by wave
    from the generated code), its workgroups spread over threads in chunks (two workgroups a chunk
    here): the same bits as the numpy handlers one step at a time over all waves; with LDS accesses out
    of range in several chunks, at different steps, the same reports, LDS byte counts and state."""
    from isagen.runtime.emu import mfma as M
    if not native.available():
        pytest.skip(native.why_not())
    _threads_over_chunks(monkeypatch)
    waves, groups = 24, 8
    dev, prog, steps, h, seq = _one_run(MFMA_RUN)

    def batch(rng):
        st = _batch(rng, prog, lds_addr_reg=2, waves=waves, groups=groups)
        st.V[6] = st.V[2]
        # finite bf16 pairs for the MFMAs' A and B, finite f32 for C (NaN payloads are not compared)
        for r in (20, 21, 22, 23, 4, 5):
            st.V[r] = rng.standard_normal((waves, 64)).astype(np.float32).view(np.uint32) & 0xFFFF0000 | (
                rng.standard_normal((waves, 64)).astype(np.float32).view(np.uint32) >> 16)
        st.V[40:56] = rng.standard_normal((16, waves, 64)).astype(np.float32).view(np.uint32)
        return st

    def copy(st, rng):
        st2 = batch(rng)
        st2.V[:], st2.S[:], st2.SCC[:], st2.EXEC[:], st2.lds[:] = st.V, st.S, st.SCC, st.EXEC, st.lds
        st2.exec_all = st.exec_all
        return st2

    rng = np.random.default_rng(4)
    calls = []
    real = M.mfma
    monkeypatch.setattr(M, "mfma", lambda *a, **k: calls.append(1) or real(*a, **k))
    # waves -> (address register, lane) past the allocation: the ds_write (v2) or the ds_read2 (v6)
    cases = [[], [(1, 2, 7)], [(20, 6, 3)], [(4, 6, 60), (13, 2, 1), (22, 2, 9)], [(0, 2, 0), (23, 6, 63)]]
    for bad in cases:
        for ws in (ALL, np.array([0, 1, 2, 4, 5, 9, 10, 11, 13, 20, 21, 22, 23])):
            st = batch(rng)
            for w, reg, lane in bad:
                st.V[reg, w, lane] = LDS - 6
                st.EXEC[w, lane] = True
                if reg == 6:
                    st.S[4 + lane // 32, w] |= np.uint32(1 << (lane % 32))
            st.set_exec(ALL, st.EXEC.copy())
            st2 = copy(st, rng)
            want = _run(dev, prog, st, seq, ws)
            calls.clear()
            got = _run(dev, prog, st2, h, ws)
            assert bad or not calls       # no stop: every MFMA ran in the generated code
            assert bool(want[1]) == bool(bad) and want[1:] == got[1:], bad
            for nm, a, b in zip(("V", "S", "SCC", "EXEC", "LDS"), want[0], got[0]):
                assert np.array_equal(a, b), f"{nm} differs (bad={bad}, ws={ws})"


GLOBAL = """
global_load_dword v10, v[2:3], off
global_load_dwordx2 v[10:11], v[2:3], off offset:8
global_load_dwordx3 v[10:12], v[2:3], off offset:-4
global_load_dwordx4 v[10:13], v[2:3], off offset:16
v_add_u32_e32 v4, 4, v4
global_load_dword v14, v4, s[6:7] offset:4
global_load_dwordx4 v[16:19], v4, s[6:7]
global_load_dwordx4 v[2:5], v[2:3], off
"""


def test_global_loads_match_numpy(monkeypatch):
    """Global loads in the generated code (64-bit VGPR address; SGPR base + 32-bit VGPR offset; 1-4
    dwords; signed offsets; the destination over the address): the same registers, bytes counted and,
    for lanes outside every allocation (in some workgroups; the run stops before the access there),
    the same reports as the numpy handlers; with threads over chunks of workgroups."""
    _threads_over_chunks(monkeypatch)
    waves, groups = 24, 8
    dev, prog, steps, h, seq = _one_run(GLOBAL)
    size = 4096
    bufs = [dev.alloc(size, name=f"g{i}") for i in range(3)]
    rng = np.random.default_rng(5)
    for b in bufs:
        dev.memory.write_bytes(int(b), rng.integers(0, 256, size, dtype=np.uint8).tobytes())

    def run(st, fn, ws):
        rc = RunContext("cg", prog, dev, "collect", 10**9)
        rc.batch = st
        st.run = rc
        with np.errstate(all="ignore"):
            try:
                fn(st, ws)
            except Exception as e:
                if type(e).__name__ != "_Abort":
                    raise
        return _state(st), [str(r) for r in rc.reports], rc.bytes_read, dict(rc.global_bytes_by_width)

    # waves -> (register, lane, address) outside every allocation: v[2:3] (the 64-bit address), v4 (the offset)
    end = int(bufs[0]) + size
    cases = [[], [(1, 2, 3, end - 2)], [(20, 4, 63, size - 4)], [(5, 2, 0, end + 4096), (14, 4, 7, 10**6)]]
    for bad in cases:
        for ws in (ALL, np.array([0, 1, 3, 4, 5, 9, 10, 11, 14, 20, 21, 23])):
            st = _batch(rng, prog, waves=waves, groups=groups)
            b0 = int(bufs[rng.integers(0, 3)])
            addr = b0 + rng.integers(8, size - 40, (waves, 64)) & ~rng.integers(0, 2, (waves, 64)) * 3
            st.V[2], st.V[3] = addr & 0xFFFFFFFF, addr >> 32
            st.V[4] = rng.integers(0, size - 40, (waves, 64))
            st.S[6], st.S[7] = int(bufs[1]) & 0xFFFFFFFF, int(bufs[1]) >> 32
            for w, reg, lane, a in bad:
                if reg == 2:
                    st.V[2, w, lane], st.V[3, w, lane] = a & 0xFFFFFFFF, a >> 32
                else:
                    st.V[4, w, lane] = a
                st.EXEC[w, lane] = True
            st.set_exec(ALL, st.EXEC.copy())
            st2 = _batch(rng, prog, waves=waves, groups=groups)
            st2.V[:], st2.S[:], st2.SCC[:], st2.EXEC[:], st2.lds[:] = st.V, st.S, st.SCC, st.EXEC, st.lds
            st2.exec_all = st.exec_all
            want, got = run(st, seq, ws), run(st2, h, ws)
            assert bool(want[1]) == bool(bad) and want[1:] == got[1:], bad
            for nm, x, y in zip(("V", "S", "SCC", "EXEC", "LDS"), want[0], got[0]):
                assert np.array_equal(x, y), f"{nm} differs (bad={bad}, ws={ws})"


@pytest.mark.parametrize("n", [256, pytest.param(384, marks=pytest.mark.slow)])
def test_triton_gemm_with_engine_forced(n, monkeypatch):
    """A whole Triton bf16 GEMM (masked tails at 384) gives the same bits with the engine forced on as off."""
    pytest.importorskip("triton")
    from tools.triton_kernels import compile_matmul
    kernel = compile_matmul("gfx942", 128, 128, 64, 4, "bf16", aligned=n % 128 == 0)
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(np.float32).view(np.uint32) >> 16
    b = rng.standard_normal((n, n)).astype(np.float32).view(np.uint32) >> 16
    outs = []
    for m in ("0", "force"):
        monkeypatch.setenv(cgen.ENV, m)
        dev = Device("gfx942", sanitize=False, array_module="cpu")   # (the CPU engine's)
        mod = dev.load_module(kernel.hsaco)
        A, B = dev.to_device(a.astype(np.uint16)), dev.to_device(b.astype(np.uint16))
        C = dev.alloc(n * n * 2, "C")
        reps = mod.launch(kernel.name, args=kernel.args(A, B, C, n, n, n), grid=kernel.grid(n, n),
                          block=kernel.block, shared_bytes=kernel.shared, on_error="collect")
        assert reps == []
        prog = mod.kernel(kernel.name).program(False)
        assert (prog.cgen is not None and prog.cgen.lib is not None) == (m == "force"), cgen.why_not()
        outs.append(dev.from_device(C, (n, n), np.uint16))
    assert np.array_equal(outs[0], outs[1])


@pytest.mark.parametrize("target", ["gfx942", pytest.param("gfx950", marks=pytest.mark.slow)])
def test_isagen_gemm_with_engine_forced(target, monkeypatch):
    """isagen's own gemm_bf16 (256x256x192, C = A.B) gives the same bits with the engine forced on as off."""
    from isagen.builders.contract import evaluate
    from isagen.builders.spec import parse_spec
    from isagen.objects.emit import render_assembly
    from isagen.objects.toolchain import assemble
    spec = parse_spec("kernel: gemm_bf16\nname: gemm_cg\ntargets: [gfx942, gfx950]\nparams: {layout: ab}\n",
                      "cg.yaml")
    co = assemble(render_assembly(spec.build(target)), target, name=spec.name)
    info = spec.launch_info(target)
    M, N, K = 256, 256, 192
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((M, K)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b = (rng.standard_normal((K, N)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    sizes = {"m": M, "n": N, "k": K}
    env = {**info.constants, **sizes}
    outs = []
    for m in ("0", "force"):
        monkeypatch.setenv(cgen.ENV, m)
        dev = Device(target, sanitize=False, array_module="cpu")   # (the CPU engine's)
        mod = dev.load_module(co)
        c = dev.to_device(np.zeros(M * N, np.uint16))
        args = [dev.to_device(a), dev.to_device(b), c] + [
            np.uint32(evaluate(info.source_of(n)[1], env)) for n in ("m", "n", "k", "tiles_m", "tiles_n", "k_tiles",
                                                                    "pad")]
        mod.launch(spec.name, grid=info.grid_for(sizes, "gemm"), block=info.block, args=args)
        prog = mod.kernel(spec.name).program(False)
        assert (prog.cgen is not None and prog.cgen.lib is not None) == (m == "force"), cgen.why_not()
        outs.append(dev.from_device(c, (M * N,), np.uint16))
    assert np.array_equal(outs[0], outs[1])
    ref = a.astype(np.uint32) << 16
    want = ref.view(np.float32).astype(np.float64) @ (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    got = (outs[1].astype(np.uint32) << 16).view(np.float32).reshape(M, N)
    assert np.allclose(got, want, rtol=2.0 ** -7, atol=1e-3 * np.sqrt(K))


def test_the_library_cache_keeps_the_most_recently_used(tmp_path):
    """The generated libraries are trimmed to the newest ``keep`` by modification time; other files of
    the directory (the MFMA kernel's library, partial builds) are left alone."""
    import os

    from isagen.runtime.emu import cgen
    names = [f"blocks_{i:04d}.so" for i in range(10)]
    for age, name in enumerate(names):
        p = tmp_path / name
        p.write_bytes(b"x")
        os.utime(p, (1_000_000 + age, 1_000_000 + age))       # names[9] is the newest
    (tmp_path / "mfma_abc.so").write_bytes(b"x")
    (tmp_path / ".blocks_x.so.1.part").write_bytes(b"x")
    assert cgen.trim_cache(tmp_path, 4) == 6
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(names[6:] + ["mfma_abc.so", ".blocks_x.so.1.part"])
    assert cgen.trim_cache(tmp_path, 4) == 0
    assert cgen.trim_cache(tmp_path / "missing", 4) == 0
