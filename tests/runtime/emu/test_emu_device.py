"""The emulator's device API and launch set-up: memory round trips, one-line errors for bad launches,
the initial wave state (packed work-item IDs, workgroup IDs, EXEC of partial waves), code object v5
hidden arguments at the offsets of AMDGPUUsage's table, kernarg preloading, statistics."""

import os

import numpy as np
import pytest
import torch
from emu_support import CLANG, LLD, build, compile_opencl

from isagen.errors import IsagenError, LaunchError
from isagen.runtime.emu import Device


def test_memory_round_trip_and_addresses():
    dev = Device("gfx942")
    x = np.arange(100, dtype=np.float32)
    b = dev.to_device(x, "x")
    assert int(b) == b.addr and b.size == 400
    np.testing.assert_array_equal(dev.from_device(b, (10, 10), np.float32), x.reshape(10, 10))
    np.testing.assert_array_equal(dev.from_device(int(b) + 40, 5, np.float32), x[10:15])   # an inner address
    t = torch.randn(7, dtype=torch.float32).to(torch.bfloat16)
    bt = dev.to_device(t)
    np.testing.assert_array_equal(dev.from_device(bt, 7, np.uint16), t.view(torch.int16).numpy().view(np.uint16))
    with pytest.raises(LaunchError, match="not inside one allocation"):
        dev.from_device(b, 101, np.float32)
    c = dev.to_device(np.zeros(3, np.int32))
    assert int(c) >= int(b) + 400 + 256          # a guard gap keeps an overrun out of the next buffer
    dev.free(b)
    with pytest.raises(LaunchError):
        dev.free(b)


COPY = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v0, s[4:5]
"""


def test_launch_errors_are_one_line():
    dev = Device("gfx942")
    mod = dev.load_module(build("copy", COPY))
    out = dev.to_device(np.zeros(64, np.uint32))
    with pytest.raises(LaunchError, match=r"no kernel named 'nope' in the module \(kernels: copy\)"):
        mod.launch("nope", grid=(1,), block=(64,), args=[out])
    with pytest.raises(LaunchError, match=r"takes 1 arguments \(out:pointer\), got 2"):
        mod.launch("copy", grid=(1,), block=(64,), args=[out, 1])
    with pytest.raises(LaunchError, match="pass a device buffer"):
        mod.launch("copy", grid=(1,), block=(64,), args=[np.zeros(4)])
    with pytest.raises(LaunchError, match="allows at most 256"):
        mod.launch("copy", grid=(1,), block=(512,), args=[out])
    with pytest.raises(LaunchError, match="grid must be"):
        mod.launch("copy", grid=(0,), block=(64,), args=[out])
    with pytest.raises(LaunchError, match="on_error"):
        mod.launch("copy", grid=(1,), block=(64,), args=[out], on_error="ignore")
    with pytest.raises(LaunchError, match="bytes of LDS"):
        mod.launch("copy", grid=(1,), block=(64,), args=[out], shared_bytes=1 << 20)
    with pytest.raises(LaunchError, match="code object is for gfx942, the emulated device is gfx950"):
        Device("gfx950").load_module(build("copy", COPY))
    with pytest.raises(IsagenError):
        dev.load_module(b"not an elf")


IDS = """
  s_load_dwordx2 s[10:11], s[0:1], 0x0
  v_and_b32 v2, 0x3ff, v0
  v_bfe_u32 v3, v0, 10, 10
  v_bfe_u32 v4, v0, 20, 10
  s_mul_i32 s12, s4, 6
  s_mul_i32 s13, s3, 3
  s_add_u32 s12, s12, s13
  s_add_u32 s12, s12, s2
  s_mul_i32 s12, s12, 120
  v_mul_u32_u24 v5, 40, v4
  v_lshl_add_u32 v5, v3, 3, v5
  v_add_u32 v5, v5, v2
  v_add_u32 v6, s12, v5
  v_lshlrev_b32 v6, 4, v6
  s_waitcnt lgkmcnt(0)
  global_store_dwordx4 v6, v[2:5], s[10:11]
"""


def test_initial_state_ids_3d():
    # block 8x5x3 = 120 work-items (2 waves, the second partial), grid 3x2x2
    co = build("ids", IDS, wg_ids="xyz", workitem_dims=3, vgprs=16)
    dev = Device("gfx942")
    out = dev.to_device(np.full((12, 120, 4), 0xFFFFFFFF, np.uint32))
    reports = dev.load_module(co).launch("ids", grid=(3, 2, 2), block=(8, 5, 3), args=[out], on_error="collect")
    assert reports == []
    got = dev.from_device(out, (12, 120, 4), np.uint32)
    gz, gy, gx, z, y, x = np.meshgrid(range(2), range(2), range(3), range(3), range(5), range(8), indexing="ij")
    flat_wg = (gz * 6 + gy * 3 + gx).reshape(12, 120)
    np.testing.assert_array_equal(got[..., 0], x.reshape(12, 120))
    np.testing.assert_array_equal(got[..., 1], y.reshape(12, 120))
    np.testing.assert_array_equal(got[..., 2], z.reshape(12, 120))
    np.testing.assert_array_equal(got[..., 3], (z * 40 + y * 8 + x).reshape(12, 120))
    assert (flat_wg == np.arange(12)[:, None]).all()


@pytest.fixture(scope="module")
def clang_hidden():
    if not (CLANG and LLD):
        pytest.skip("clang-19 / ld.lld-19 not installed")
    src = r"""
__kernel void hidden(__global uint* out, int pad) {
  __constant uint* p = (__constant uint*)__builtin_amdgcn_implicitarg_ptr();
  uint t = __builtin_amdgcn_workitem_id_x() + 16 * __builtin_amdgcn_workitem_id_y();
  if (t < 32 && __builtin_amdgcn_workgroup_id_x() == 0 && __builtin_amdgcn_workgroup_id_y() == 0)
    out[t] = p[t];
}
__kernel void sizes(__global uint* out) {
  uint t = __builtin_amdgcn_workitem_id_x() + __builtin_amdgcn_workitem_id_y() * __builtin_amdgcn_workgroup_size_x();
  uint g = __builtin_amdgcn_workgroup_id_x() + __builtin_amdgcn_workgroup_id_y() * 3;
  out[g * 64 + t] = __builtin_amdgcn_workgroup_size_x() * 100 + __builtin_amdgcn_workgroup_size_y();
}
"""
    return compile_opencl(src)


def test_hidden_arguments_follow_the_v5_table(clang_hidden):
    dev = Device("gfx942")
    mod = dev.load_module(clang_hidden)
    out = dev.to_device(np.full(32, 0xDEADBEEF, np.uint32))
    assert mod.launch("hidden", grid=(3, 2, 1), block=(16, 4, 1), args=[out, np.int32(0)], on_error="collect") == []
    w = dev.from_device(out, 32, np.uint32)
    b = w.view(np.uint8)
    u16 = lambda off: int(b[off]) | int(b[off + 1]) << 8   # noqa: E731
    # implicitarg_ptr points at the hidden block H; offsets from AMDGPUUsage's table (reference notes)
    assert (w[0], w[1], w[2]) == (3, 2, 1)                  # hidden_block_count_{x,y,z}: u32 at H+0/4/8
    assert (u16(12), u16(14), u16(16)) == (16, 4, 1)        # hidden_group_size_{x,y,z}: u16 at H+12/14/16
    assert (u16(18), u16(20), u16(22)) == (0, 0, 0)         # hidden_remainder_{x,y,z}
    assert (w[40 // 4: 64 // 4] == 0).all()                 # hidden_global_offset_{x,y,z}: u64 at H+40/48/56
    assert u16(64) == 2                                      # hidden_grid_dims: x and y are used


def test_workgroup_size_builtin_reads_hidden_args(clang_hidden):
    dev = Device("gfx942")
    mod = dev.load_module(clang_hidden)
    out = dev.to_device(np.zeros(6 * 64, np.uint32))
    assert mod.launch("sizes", grid=(3, 2, 1), block=(16, 4, 1), args=[out], on_error="collect") == []
    assert (dev.from_device(out, 6 * 64, np.uint32) == 1604).all()


def test_kernarg_preload_and_prologue_agree():
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    triton = pytest.importorskip("triton")
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def axpy(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)
    k = triton.compile(ASTSource(fn=axpy, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "a": "fp32", "n": "i32",
                                                      "BLOCK": "constexpr"}, constexprs={"BLOCK": 256}),
                       target=GPUTarget("hip", "gfx942", 64), options={"num_warps": 2})
    co = k.asm["hsaco"]
    from isagen.objects.codeobject import read_code_object
    assert read_code_object(co).kernel("axpy").descriptor.kernarg_preload_length > 0
    n = 700
    x, y = np.random.default_rng(8).standard_normal((2, n)).astype(np.float32)
    results = []
    for preload in (True, False):
        dev = Device("gfx942", kernarg_preload=preload)
        dx, dy = dev.to_device(x), dev.to_device(y)
        mod = dev.load_module(co)
        assert mod.launch("axpy", grid=(3,), block=(128,), args=[dx, dy, np.float32(1.5), np.int32(n), 0, 0],
                          on_error="collect") == []
        results.append(dev.from_device(dy, n, np.float32))
        scalar = mod.last_stats["scalar_bytes_read"]
        assert (scalar == 0) if preload else (scalar > 0)    # the prologue loads the arguments itself
    ref = 1.5 * x.astype(np.float64) + y
    np.testing.assert_allclose(results[0], ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(results[0], results[1])


def test_stats_and_per_launch_sanitize_override():
    dev = Device("gfx942")
    mod = dev.load_module(build("copy", COPY))
    out = dev.to_device(np.zeros(128, np.uint32))
    mod.launch("copy", grid=(1,), block=(128,), args=[out])
    s = mod.last_stats
    assert s["waves"] == 2 and s["workgroups"] == 1 and s["sanitized"]
    assert s["wave_instructions"] == 2 * 5 and s["categories"]["vmem"] == 2 and s["categories"]["smem"] == 2
    assert s["global_bytes_written"] == 128 * 4 and s["global_bytes_read"] == 0 and s["scalar_bytes_read"] == 16
    np.testing.assert_array_equal(dev.from_device(out, 128, np.uint32), np.arange(128))
    mod.launch("copy", grid=(1,), block=(128,), args=[out], sanitize=False)
    assert not mod.last_stats["sanitized"]


# the unified register file: AGPRs start at the descriptor's accum_offset (8 here, 8 AGPRs after it)
ACC = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_mov_b32 v7, 0x7777
  v_lshlrev_b32 v1, 4, v0
  v_accvgpr_write_b32 a0, v0
  v_accvgpr_write_b32 a7, v1
  v_mov_b32 v2, 0x1234
  v_accvgpr_mov_b32 a3, a0
  s_nop 4
  v_accvgpr_read_b32 v3, a7
  v_accvgpr_read_b32 v2, a3
  v_mov_b32 v4, v7
  v_mov_b32 v5, v0
  s_waitcnt lgkmcnt(0)
  global_store_dwordx4 v1, v[2:5], s[4:5]
"""


def test_agprs_follow_accum_offset_and_the_allocation_is_enforced():
    dev = Device("gfx942")
    out = dev.to_device(np.zeros((64, 4), np.uint32))
    mod = dev.load_module(build("acc", ACC, vgprs=8, agprs=8))
    assert mod.launch("acc", grid=(1,), block=(64,), args=[out], on_error="collect") == []
    got = dev.from_device(out, (64, 4), np.uint32)
    t = np.arange(64, dtype=np.uint32)
    # a3 <- a0 <- v0 and a7 <- v1 = 16*t: the AGPRs are their own registers, v7 and v0 are untouched
    np.testing.assert_array_equal(got, np.stack([t, 16 * t, np.full(64, 0x7777), t], 1))
    # one register past either half of the allocation is a fault naming it
    for body, words in (("  v_mov_b32 v8, 0", "v8 is past the 8 arch VGPRs"),
                        ("  v_accvgpr_write_b32 a8, 0", "a8 is past the 8 AGPRs")):
        m = dev.load_module(build("over", body, vgprs=8, agprs=8))
        reports = m.launch("over", grid=(1,), block=(64,), args=[out], on_error="collect")
        assert [r.category for r in reports] == ["fault"] and words in reports[0].message, reports


def test_raw_kernarg_bytes_launch_as_packed_args():
    """``launch(kernarg=bytes)`` (a packed struct, as hipModuleLaunchKernel's
    HIP_LAUNCH_PARAM_BUFFER_POINTER passes it) runs the same as ``args`` packed from the metadata."""
    body = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_load_dword s6, s[0:1], 0x8
  s_waitcnt lgkmcnt(0)
  v_lshlrev_b32 v1, 2, v0
  v_add_u32 v2, s6, v0
  global_store_dword v1, v2, s[4:5]
"""
    co = build("rawk", body, args=(("ptr", "out"), ("u32", "add")), vgprs=4, sgprs=8)
    dev = Device("gfx942")
    mod = dev.load_module(co)
    a, b = dev.zeros(256, "a"), dev.zeros(256, "b")
    mod.launch("rawk", args=[a, np.uint32(7)])
    raw = int(b).to_bytes(8, "little") + (7).to_bytes(4, "little")
    assert mod.launch("rawk", kernarg=raw) == []
    np.testing.assert_array_equal(dev.from_device(b, 64, np.uint32), dev.from_device(a, 64, np.uint32))
    np.testing.assert_array_equal(dev.from_device(b, 64, np.uint32), np.arange(64) + 7)
    with pytest.raises(LaunchError, match="either args or kernarg"):
        mod.launch("rawk", args=[a, np.uint32(7)], kernarg=raw)
    with pytest.raises(LaunchError, match="larger than its kernarg segment"):
        mod.launch("rawk", kernarg=raw + bytes(64))
