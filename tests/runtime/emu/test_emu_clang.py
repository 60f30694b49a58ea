"""Small OpenCL C kernels compiled by clang-19 for gfx942 (no device library: builtins only), run in the
emulator against numpy: a vector add, an LDS tree reduction with barriers, and a packed-half kernel.
The sanitizer is on and must report nothing for them."""

import os
import subprocess
import tempfile

import numpy as np
import pytest
from emu_support import CLANG, LLD, compile_opencl

from isagen.runtime.emu import Device

pytestmark = pytest.mark.skipif(not (CLANG and LLD),
                                reason="clang-19 / ld.lld-19 not installed (apt llvm-19 clang-19 lld-19)")

SOURCE = r"""
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define WG 256
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void vadd(__global const float* a, __global const float* b, __global float* c, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * WG + __builtin_amdgcn_workitem_id_x();
  if (i < n) c[i] = a[i] + b[i];
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void reduce(__global const float* in, __global float* out, int n) {
  __local float buf[WG];
  int t = __builtin_amdgcn_workitem_id_x();
  int g = __builtin_amdgcn_workgroup_id_x();
  int i = g * WG + t;
  buf[t] = i < n ? in[i] : 0.0f;
  for (int s = WG / 2; s > 0; s >>= 1) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    if (t < s) buf[t] += buf[t + s];
  }
  if (t == 0) out[g] = buf[0];
}

__attribute__((noinline)) float poly(float x, __global const float* c, int n) {
  float r = 0.0f;
  for (int i = n - 1; i >= 0; i--) r = r * x + c[i];
  return r;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void callk(__global const float* x, __global const float* c, __global float* out, int n) {
  int t = __builtin_amdgcn_workgroup_id_x() * WG + __builtin_amdgcn_workitem_id_x();
  out[t] = poly(x[t], c, n) + poly(-x[t], c, n);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void hfma(__global const half2* a, __global const half2* b, __global const half* s, __global half2* c, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * WG + __builtin_amdgcn_workitem_id_x();
  if (i < n) {
    half k = s[0];
    c[i] = a[i] * b[i] + (half2)(k, -k);
  }
}
"""


@pytest.fixture(scope="module")
def module_bytes():
    return compile_opencl(SOURCE)


def test_vector_add(module_bytes):
    dev = Device("gfx942")
    mod = dev.load_module(module_bytes)
    n = 1000
    rng = np.random.default_rng(5)
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    da, db, dc = dev.to_device(a), dev.to_device(b), dev.to_device(np.zeros(n, np.float32))
    assert mod.launch("vadd", grid=(4,), block=(256,), args=[da, db, dc, np.int32(n)], on_error="collect") == []
    np.testing.assert_array_equal(dev.from_device(dc, n, np.float32), a + b)
    assert mod.last_stats["global_bytes_read"] == 8 * n
    assert mod.last_stats["global_bytes_written"] == 4 * n


def test_lds_tree_reduction_with_barriers(module_bytes):
    dev = Device("gfx942")
    mod = dev.load_module(module_bytes)
    n = 1000
    x = np.random.default_rng(6).standard_normal(n).astype(np.float32)
    dx, do = dev.to_device(x), dev.to_device(np.zeros(4, np.float32))
    assert mod.launch("reduce", grid=(4,), block=(256,), args=[dx, do, np.int32(n)], on_error="collect") == []
    got = dev.from_device(do, 4, np.float32)
    # replay the kernel's own summation order (a pairwise tree over 256 slots) in float32
    ref = []
    for g in range(4):
        buf = np.zeros(256, np.float32)
        chunk = x[g * 256:(g + 1) * 256]
        buf[:chunk.size] = chunk
        s = 128
        while s:
            buf[:s] = buf[:s] + buf[s:2 * s]
            s //= 2
        ref.append(buf[0])
    np.testing.assert_array_equal(got, np.array(ref, np.float32))
    assert mod.last_stats["categories"]["barrier"] > 0


def test_packed_half_fma(module_bytes):
    dev = Device("gfx942")
    mod = dev.load_module(module_bytes)
    n = 700
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(2 * n) * 3).astype(np.float16)
    b = (rng.standard_normal(2 * n) * 3).astype(np.float16)
    bufs = [dev.to_device(a), dev.to_device(b), dev.to_device(np.array([0.3], np.float16)),
            dev.to_device(np.zeros(2 * n, np.float16))]
    assert mod.launch("hfma", grid=(3,), block=(256,), args=bufs + [np.int32(n)], on_error="collect") == []
    got = dev.from_device(bufs[3], 2 * n, np.float16)
    k = np.tile(np.array([0.3, -0.3], np.float16).astype(np.float64), n)
    # a*b+k computed exactly, rounded once to f16 (v_pk_fma_f16 is a fused multiply-add)
    ref = (a.astype(np.float64) * b.astype(np.float64) + k).astype(np.float16)
    np.testing.assert_array_equal(got, ref)


def test_call_to_a_function(module_bytes):
    # a non-inlined function: s_getpc/s_swappc into code outside the kernel's symbol, s_setpc back
    dev = Device("gfx942")
    mod = dev.load_module(module_bytes)
    x = np.random.default_rng(8).random(512, np.float32)
    c = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    bufs = [dev.to_device(x), dev.to_device(c), dev.to_device(np.zeros(512, np.float32))]
    assert mod.launch("callk", grid=(2,), block=(256,), args=bufs + [np.int32(4)], on_error="collect") == []
    ref = np.polyval(c[::-1].astype(np.float64), x) + np.polyval(c[::-1].astype(np.float64), -x)
    np.testing.assert_allclose(dev.from_device(bufs[2], 512, np.float32), ref, rtol=1e-5, atol=1e-6)
    assert mod.last_stats["categories"]["branch"] > 0


# HIP C++ compiled as `hipcc --genco` does (clang -x hip --cuda-device-only): the output is a clang offload
# bundle, not a bare ELF; no HIP headers here, so the HIP keywords are spelled as the attributes they are.
HIP_SOURCE = r"""
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
static __attribute__((device)) inline void sync() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
extern "C" __global__ void saxpy_strided(float a, const float* x, float* y, int n) {
  int stride = __builtin_amdgcn_grid_size_x();          // from the dispatch packet
  for (int i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x()
               + __builtin_amdgcn_workitem_id_x(); i < n; i += stride)
    y[i] = a * x[i] + y[i];
}
extern "C" __global__ void block_max(const float* x, float* out) {
  __shared__ float buf[256];
  int t = __builtin_amdgcn_workitem_id_x();
  buf[t] = x[__builtin_amdgcn_workgroup_id_x() * 256 + t];
  sync();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) buf[t] = __builtin_fmaxf(buf[t], buf[t + s]);
    sync();
  }
  if (t == 0) out[__builtin_amdgcn_workgroup_id_x()] = buf[0];
}
"""


@pytest.fixture(scope="module")
def hip_bundle():
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "k.hip"), os.path.join(tmp, "k.co")
        with open(src, "w") as f:
            f.write(HIP_SOURCE)
        subprocess.run([CLANG, "-x", "hip", "--offload-arch=gfx942", "-nogpulib", "-nogpuinc", "--cuda-device-only",
                        "-O3", src, "-o", out], check=True, capture_output=True)
        with open(out, "rb") as f:
            return f.read()


def test_hip_offload_bundle_runs(hip_bundle):
    from isagen.objects.codeobject import read_code_object
    assert hip_bundle.startswith(b"__CLANG_OFFLOAD_BUNDLE__")
    co = read_code_object(hip_bundle)
    assert co.mach == "gfx942" and sorted(co.kernels) == ["block_max", "saxpy_strided"]
    assert "bundle entry hipv4-amdgcn-amd-amdhsa--gfx942" in co.source
    dev = Device("gfx942")
    mod = dev.load_module(hip_bundle)
    n = 5000                                  # 3 workgroups of 256 cover 768 elements: the loop runs 7 times
    rng = np.random.default_rng(9)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    dx, dy = dev.to_device(x), dev.to_device(y)
    assert mod.launch("saxpy_strided", grid=(3,), block=(256,), args=[np.float32(0.75), dx, dy, np.int32(n)],
                      on_error="collect") == []
    # clang contracts a*x+y into one fma: exactly rounded, as float64 then one rounding shows
    np.testing.assert_array_equal(dev.from_device(dy, n, np.float32),
                                  (np.float64(0.75) * x + y.astype(np.float64)).astype(np.float32))
    xs = rng.standard_normal(4 * 256).astype(np.float32)
    dxs, dout = dev.to_device(xs), dev.to_device(np.zeros(4, np.float32))
    assert mod.launch("block_max", grid=(4,), block=(256,), args=[dxs, dout], on_error="collect") == []
    np.testing.assert_array_equal(dev.from_device(dout, 4, np.float32), xs.reshape(4, 256).max(1))
