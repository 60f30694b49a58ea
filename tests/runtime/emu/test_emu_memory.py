"""Memory semantics: buffer resources and their range check, LDS DMA (buffer_load ... lds) with the
M0 base and the documented inst_offset flag, atomics with lanes colliding on one address, FLAT
accesses into the LDS aperture, scratch (private) memory of a clang kernel, and waves of one
workgroup that take different paths and meet again at a barrier."""

import numpy as np
import pytest
from emu_support import CLANG, LLD, build, compile_opencl

from isagen.runtime.emu import Device

U32 = np.uint32


def launch(co, name, args, block=64, grid=1, dev=None, **kw):
    dev = dev or Device("gfx942")
    reports = dev.load_module(co).launch(name, grid=(grid,), block=(block,), args=args, on_error="collect", **kw)
    return dev, reports


# a raw buffer resource over ``inp`` with num_records from the third argument; stride 0
RSRC = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_load_dword s8, s[0:1], 0x10
  s_waitcnt lgkmcnt(0)
  s_mov_b32 s12, s4
  s_and_b32 s13, s5, 0xffff
  s_mov_b32 s14, s8
  s_mov_b32 s15, 0x00027000
  v_lshlrev_b32 v1, 2, v0
"""


def test_buffer_range_check_loads_zero_and_drops_stores():
    body = RSRC + """
  v_add_u32 v2, -2, v1
  buffer_load_dword v3, v1, s[12:15], 0 offen
  buffer_load_dword v4, v2, s[12:15], 0 offen
  buffer_load_dwordx2 v[6:7], v1, s[12:15], 0 offen offset:4
  s_waitcnt vmcnt(0)
  global_store_dword v1, v3, s[6:7]
  global_store_dword v1, v4, s[6:7] offset:256
  global_store_dword v1, v6, s[6:7] offset:512
  global_store_dword v1, v7, s[6:7] offset:768
  v_mov_b32 v5, 0x77
  buffer_store_dword v5, v1, s[12:15], 0 offen
"""
    co = build("buf", body, args=(("ptr", "inp"), ("ptr", "out"), ("u32", "num")), vgprs=8, sgprs=24)
    dev = Device("gfx942")
    data = np.arange(1000, 1064, dtype=U32)
    din, dout = dev.to_device(data, "inp"), dev.to_device(np.full((4, 64), 9, U32), "out")
    num = 102                     # bytes: dwords 0..24 lie wholly inside, dword 25 straddles the end
    _, reports = launch(co, "buf", [din, dout, np.uint32(num)], dev=dev)
    assert reports == []
    out = dev.from_device(dout, (4, 64), U32)
    lane = np.arange(64)
    inside = 4 * lane + 4 <= num
    np.testing.assert_array_equal(out[0], np.where(inside, data, 0))
    # offset 4*lane - 2 is unaligned: the dword at byte 4*lane-2 (only lanes 1.. are in range); lane 0's
    # offset wraps to 0xfffffffe: out of range
    ok2 = (lane >= 1) & (4 * lane - 2 + 4 <= num)
    b = data.view(np.uint8)
    unaligned = np.array([int.from_bytes(bytes(b[4 * i - 2: 4 * i + 2]), "little") if i else 0 for i in range(64)], U32)
    np.testing.assert_array_equal(out[1], np.where(ok2, unaligned, 0))
    # dwordx2 at 4*lane+4: each dword is range-checked on its own
    np.testing.assert_array_equal(out[2], np.where(4 * lane + 8 <= num, np.roll(data, -1), 0))
    np.testing.assert_array_equal(out[3], np.where(4 * lane + 12 <= num, np.roll(data, -2), 0))
    got = dev.from_device(din, 64, U32)
    np.testing.assert_array_equal(got, np.where(inside, 0x77, data))       # out-of-range stores dropped


def test_buffer_range_beyond_the_allocation_is_reported():
    body = RSRC + """
  buffer_load_dword v3, v1, s[12:15], 0 offen offset:256
  s_waitcnt vmcnt(0)
"""
    co = build("bufoob", body, args=(("ptr", "inp"), ("ptr", "out"), ("u32", "num")), vgprs=8, sgprs=24)
    dev = Device("gfx942")
    din, dout = dev.to_device(np.zeros(64, U32), "inp"), dev.to_device(np.zeros(4, U32))
    _, reports = launch(co, "bufoob", [din, dout, np.uint32(4096)], dev=dev)   # num_records larger than the buffer
    assert [r.category for r in reports] == ["oob-global"]
    assert reports[0].lanes == tuple(range(0, 64)) and "'inp'" in reports[0].message


LDS_DMA = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_waitcnt lgkmcnt(0)
  s_mov_b32 s12, s4
  s_and_b32 s13, s5, 0xffff
  s_mov_b32 s14, 256
  s_mov_b32 s15, 0x00027000
  v_lshlrev_b32 v1, 2, v0
  s_mov_b32 m0, 128
  s_nop 0
  buffer_load_dword v1, s[12:15], 0 offen offset:8 lds
  {wait}
  v_add_u32 v2, 128, v1
  ds_read_b32 v3, v2
  ds_read_b32 v4, v2 offset:8
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v3, s[6:7]
  global_store_dword v1, v4, s[6:7] offset:256
"""


@pytest.mark.parametrize("inst_offset", [True, False])
def test_lds_dma_m0_base_and_inst_offset_flag(inst_offset):
    co = build("dma", LDS_DMA.format(wait="s_waitcnt vmcnt(0)"), args=(("ptr", "inp"), ("ptr", "out")), lds=1024)
    dev = Device("gfx942", lds_dma_inst_offset=inst_offset)
    data = np.arange(2000, 2064, dtype=U32)
    din, dout = dev.to_device(data), dev.to_device(np.zeros((2, 64), U32))
    _, reports = launch(co, "dma", [din, dout], dev=dev)
    assert reports == []
    out = dev.from_device(dout, (2, 64), U32)
    lane = np.arange(64)
    # lane L loads inp[(4L + 8)/4] = data[L + 2] (8 = inst offset; range 256 bytes: L + 2 < 64)
    loaded = np.where(lane + 2 < 64, data[np.minimum(lane + 2, 63)], 0)
    # ... and writes it to LDS at M0 + 4L (+ 8 when the flag adds the instruction offset)
    lds = np.zeros(300, U32)
    base = (128 + (8 if inst_offset else 0)) // 4
    lds[base: base + 64] = loaded
    np.testing.assert_array_equal(out[0], lds[32: 96])
    np.testing.assert_array_equal(out[1], lds[34: 98])


def test_lds_dma_read_before_vmcnt_is_reported():
    co = build("dma", LDS_DMA.format(wait=""), args=(("ptr", "inp"), ("ptr", "out")), lds=1024)
    dev = Device("gfx942")
    _, reports = launch(co, "dma", [dev.to_device(np.zeros(64, U32)), dev.to_device(np.zeros((2, 64), U32))], dev=dev)
    assert reports and reports[0].category == "missing-wait"
    assert "LDS DMA" in reports[0].message and "vmcnt" in reports[0].message


def test_global_atomics_with_colliding_lanes():
    body = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  v_and_b32 v1, 3, v0
  v_lshlrev_b32 v1, 2, v1
  v_mov_b32 v2, 1
  v_lshlrev_b32 v5, 2, v0
  s_waitcnt lgkmcnt(0)
  global_atomic_add v3, v1, v2, s[4:5] sc0
  v_mov_b32 v6, v0
  v_mov_b32 v7, 7
  global_atomic_cmpswap v8, v1, v[6:7], s[4:5] offset:16 sc0
  s_waitcnt vmcnt(0)
  global_store_dword v5, v3, s[6:7]
  global_store_dword v5, v8, s[6:7] offset:256
"""
    co = build("atom", body, args=(("ptr", "cnt"), ("ptr", "out")), vgprs=12)
    dev = Device("gfx942")
    cnt = dev.to_device(np.array([10, 20, 30, 40, 0, 7, 7, 7], U32))
    out = dev.to_device(np.zeros((2, 64), U32))
    _, reports = launch(co, "atom", [cnt, out], dev=dev)
    assert reports == []
    got = dev.from_device(out, (2, 64), U32)
    lane = np.arange(64)
    # 16 lanes add 1 to each counter, in lane order: lane L sees the counter before its own add
    np.testing.assert_array_equal(got[0], np.array([10, 20, 30, 40])[lane % 4] + lane // 4)
    assert dev.from_device(cnt, 4, U32).tolist() == [26, 36, 46, 56]
    # cmpswap (DATA[0] = new value = lane id, DATA[1] = compare value 7): the first lane to reach each
    # 7 swaps, the rest fail and return what it left
    old = np.array([0, 7, 7, 7])
    exp = np.where(lane < 4, old[lane % 4], np.where(lane % 4 == 0, 0, lane % 4))
    np.testing.assert_array_equal(got[1], exp)
    assert dev.from_device(int(cnt) + 16, 4, U32).tolist() == [0, 1, 2, 3]


def test_flat_access_into_the_lds_aperture():
    body = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_mov_b64 s[8:9], src_shared_base
  v_lshlrev_b32 v1, 2, v0
  v_mov_b32 v2, v1
  v_mov_b32 v3, s9
  v_add_u32 v6, 0x100, v0
  flat_store_dword v[2:3], v6
  s_waitcnt vmcnt(0) lgkmcnt(0)
  ds_read_b32 v4, v1
  s_waitcnt lgkmcnt(0)
  flat_load_dword v5, v[2:3]
  s_waitcnt vmcnt(0) lgkmcnt(0)
  v_add_u32 v4, v4, v5
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v4, s[4:5]
"""
    co = build("flatlds", body, lds=256, vgprs=8)
    dev = Device("gfx942")
    out = dev.to_device(np.zeros(64, U32))
    _, reports = launch(co, "flatlds", [out], dev=dev)
    assert reports == []
    np.testing.assert_array_equal(dev.from_device(out, 64, U32), 2 * (0x100 + np.arange(64)))


def test_divergent_waves_meet_at_a_barrier():
    # wave w of the workgroup adds (w + 1) * 3 to its slot in a scalar loop of w + 1 iterations, then
    # every wave reads the slot of wave (w + 1) % 4 after a barrier
    body = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_readfirstlane_b32 s8, v0
  s_lshr_b32 s8, s8, 6
  s_add_u32 s9, s8, 1
  v_mov_b32 v2, 0
.Lloop:
  v_add_u32 v2, 3, v2
  s_sub_u32 s9, s9, 1
  s_cmp_lg_u32 s9, 0
  s_cbranch_scc1 .Lloop
  v_lshlrev_b32 v1, 2, v0
  ds_write_b32 v1, v2
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_add_u32 v3, 256, v1
  v_and_b32 v3, 0x3ff, v3
  ds_read_b32 v4, v3
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v4, s[4:5]
"""
    co = build("div", body, lds=1024, vgprs=8)
    dev = Device("gfx942")
    out = dev.to_device(np.zeros(256, U32))
    _, reports = launch(co, "div", [out], block=256, dev=dev)
    assert reports == []
    w = np.arange(256) // 64
    np.testing.assert_array_equal(dev.from_device(out, 256, U32), ((w + 1) % 4 + 1) * 3)


@pytest.mark.skipif(not (CLANG and LLD), reason="clang-19 / ld.lld-19 not installed")
def test_scratch_memory_of_a_clang_kernel():
    src = r"""
__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void priv(__global const int* idx, __global int* out) {
  int t = __builtin_amdgcn_workitem_id_x();
  volatile int a[32];
  for (int i = 0; i < 32; i++) a[i] = i * t;
  out[t] = a[idx[t]] + a[(idx[t] + 5) & 31];
}
"""
    co = compile_opencl(src, "-O2")
    from isagen.objects.codeobject import read_code_object
    assert read_code_object(co).kernel("priv").descriptor.private_segment_fixed_size >= 128
    dev = Device("gfx942")
    idx = np.random.default_rng(9).integers(0, 32, 64).astype(np.int32)
    di, do = dev.to_device(idx), dev.to_device(np.zeros(64, np.int32))
    _, reports = launch(co, "priv", [di, do], dev=dev)
    assert reports == []
    t = np.arange(64)
    np.testing.assert_array_equal(dev.from_device(do, 64, np.int32), idx * t + ((idx + 5) & 31) * t)


def test_fences_and_cache_maintenance_run():
    # what compilers emit around agent-scope atomics and fences: cache write-back / invalidate
    co = build("fence", """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v0, s[4:5]
  buffer_wbl2 sc1
  s_waitcnt vmcnt(0)
  buffer_inv sc1
  s_dcache_wb
  s_memtime s[6:7]
  s_waitcnt lgkmcnt(0)
""")
    dev = Device("gfx942")
    out = dev.to_device(np.zeros(64, U32))
    _, reports = launch(co, "fence", [out], dev=dev)
    assert reports == []
    np.testing.assert_array_equal(dev.from_device(out, 64, U32), np.arange(64))


def test_strided_resource_without_idxen_is_range_checked_in_bytes():
    """gfx9: num_records counts bytes unless the instruction uses idxen with a non-zero stride (Mesa's
    NUM_RECORDS note for GFX9; AITER's GEMMs rely on it: stride 4, offen only, num_records = rows *
    row pitch).  The same loads and stores as the raw-buffer test, through a resource with stride 4."""
    body = RSRC.replace("s_and_b32 s13, s5, 0xffff", "s_and_b32 s13, s5, 0xffff\n  s_or_b32 s13, s13, 0x40000") + """
  buffer_load_dword v3, v1, s[12:15], 0 offen
  s_waitcnt vmcnt(0)
  global_store_dword v1, v3, s[6:7]
  v_mov_b32 v5, 0x77
  buffer_store_dword v5, v1, s[12:15], 0 offen
  v_mov_b32 v6, 0
  buffer_load_dword v7, v0, s[12:15], 0 idxen
  s_waitcnt vmcnt(0)
  global_store_dword v1, v7, s[6:7] offset:256
"""
    co = build("bufstr", body, args=(("ptr", "inp"), ("ptr", "out"), ("u32", "num")), vgprs=8, sgprs=24)
    dev = Device("gfx942")
    data = np.arange(1000, 1064, dtype=U32)
    din, dout = dev.to_device(data, "inp"), dev.to_device(np.full((2, 64), 9, U32), "out")
    num = 102
    _, reports = launch(co, "bufstr", [din, dout, np.uint32(num)], dev=dev)
    assert reports == []
    out = dev.from_device(dout, (2, 64), U32)
    lane = np.arange(64)
    inside = 4 * lane + 4 <= num
    np.testing.assert_array_equal(out[0], np.where(inside, data, 0))
    # idxen with stride 4: num_records counts records (index < 102: all 64 lanes), read after the stores
    np.testing.assert_array_equal(out[1], np.where(inside, 0x77, data))
    np.testing.assert_array_equal(dev.from_device(din, 64, U32), np.where(inside, 0x77, data))


SCALAR_ATOMICS = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_waitcnt lgkmcnt(0)
  s_mov_b32 s8, 1
  s_atomic_add s8, s[4:5], 0x0 glc
  s_mov_b32 s9, 3
  s_atomic_dec s9, s[4:5], 0x4 glc
  s_mov_b32 s10, 2
  s_atomic_inc s10, s[4:5], 0x8 glc
  s_add_u32 s12, s2, 10
  s_mov_b32 s13, 0
  s_atomic_cmpswap s[12:13], s[4:5], 0xc glc
  s_mov_b32 s14, 1
  s_mov_b32 s15, 1
  s_atomic_add_x2 s[14:15], s[4:5], 0x10 glc
  s_mov_b32 s16, 5
  s_atomic_dec s16, s[4:5], 0x18
  s_mov_b32 s17, 0x20
  s_atomic_dec s16, s[4:5], s17
  s_waitcnt lgkmcnt(0)
  s_lshl_b32 s18, s2, 5
  v_mov_b32 v1, s18
  v_mov_b32 v2, s8
  global_store_dword v1, v2, s[6:7]
  v_mov_b32 v2, s9
  global_store_dword v1, v2, s[6:7] offset:4
  v_mov_b32 v2, s10
  global_store_dword v1, v2, s[6:7] offset:8
  v_mov_b32 v2, s12
  global_store_dword v1, v2, s[6:7] offset:12
  v_mov_b32 v2, s14
  global_store_dword v1, v2, s[6:7] offset:16
  v_mov_b32 v2, s15
  global_store_dword v1, v2, s[6:7] offset:20
"""


def test_scalar_atomics_of_several_waves_on_one_counter():
    """s_atomic_{add,dec,inc,cmpswap,add_x2} with and without glc, one wave in each of 4 workgroups on the
    same words: every serialisation gives the same multiset of returned values and the same final memory
    (the ISA's definitions, written out here: dec wraps 0 -> data, inc wraps at data to 0)."""
    co = build("satom", SCALAR_ATOMICS, args=(("ptr", "ctr"), ("ptr", "out")), vgprs=4, sgprs=24)
    dev = Device("gfx942")
    n = 4
    init = np.zeros(10, U32)
    init[0], init[1], init[2], init[3] = 7, 1, 1, 0
    init[4], init[5] = 0xFFFFFFFF, 0               # 64-bit 0xffffffff
    init[6] = 2                                    # dec without glc, data 5, once per wave: 2,1,0,5 -> 4
    init[8] = 100                                  # s_atomic_dec with soffset s17 = 0x20: word 8
    ctr, out = dev.to_device(init, "ctr"), dev.to_device(np.zeros((n, 8), U32), "out")
    _, reports = launch(co, "satom", [ctr, out], grid=n, dev=dev)
    assert reports == []
    got = dev.from_device(out, (n, 8), U32)
    mem = dev.from_device(ctr, 10, U32)

    def serial(start, step, k=n):
        olds, v = [], start
        for _ in range(k):
            olds.append(v)
            v = step(v)
        return olds, v

    olds, fin = serial(7, lambda o: o + 1)
    assert sorted(got[:, 0]) == sorted(olds) and mem[0] == fin
    olds, fin = serial(1, lambda o: 3 if o == 0 or o > 3 else o - 1)
    assert sorted(got[:, 1]) == sorted(olds) and mem[1] == fin
    olds, fin = serial(1, lambda o: 0 if o >= 2 else o + 1)
    assert sorted(got[:, 2]) == sorted(olds) and mem[2] == fin
    # cmpswap: exactly one wave finds 0 and stores 10 + its workgroup id; the others see that value
    winner = [w for w in range(n) if got[w, 3] == 0]
    assert len(winner) == 1 and mem[3] == 10 + winner[0]
    assert all(got[w, 3] == 10 + winner[0] for w in range(n) if w != winner[0])
    olds, fin = serial(0xFFFFFFFF, lambda o: o + 0x1_0000_0001)
    got64 = got[:, 4].astype(np.uint64) | (got[:, 5].astype(np.uint64) << np.uint64(32))
    assert sorted(got64.tolist()) == sorted(olds)
    assert int(mem[4]) | (int(mem[5]) << 32) == fin
    _, fin = serial(2, lambda o: 5 if o == 0 or o > 5 else o - 1)
    assert mem[6] == fin
    _, fin = serial(100, lambda o: 5 if o == 0 or o > 5 else o - 1)   # soffset form: 100 > 5 wraps to 5 first
    assert mem[8] == fin
