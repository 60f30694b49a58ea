"""Code objects for the cuda emulator engine's tests and bench, and the runs they share.

The GPU machine has no Triton and no AMDGPU assembler, so ``prebuild(DIR)`` compiles them here (a Triton
gfx942 bf16 matmul, isagen's ``gemm_bf16`` for gfx942 and gfx950) and writes them to DIR; the GPU side
points ``$ISAGEN_EMU_CUDA_FIXTURES`` at DIR.  Where Triton / the toolchain are installed they are
compiled directly instead.

    python tools/emu_cuda_fixtures.py DIR
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ENV = "ISAGEN_EMU_CUDA_FIXTURES"
TARGETS = ("gfx942", "gfx950")


def _dir() -> Path | None:
    d = os.environ.get(ENV)
    return Path(d) if d else None


def _prebuilt(name: str) -> bytes | None:
    """The file ``name`` of the prebuilt fixtures (``$ISAGEN_EMU_CUDA_FIXTURES``), or None (build it here)."""
    d = _dir()
    return (d / name).read_bytes() if d is not None and (d / name).exists() else None


def triton_matmul():
    """The Triton gfx942 bf16 matmul (128x128x64 tiles, 4 waves, sizes divisible by 16) of bench/emu_speed.py."""
    from tools.triton_kernels import TritonKernel
    d = _dir()
    if d is not None and (d / "triton_matmul.json").exists():
        meta = json.loads((d / "triton_matmul.json").read_text())
        return TritonKernel(hsaco=(d / "triton_matmul.co").read_bytes(), amdgcn="", **meta)
    from tools.triton_kernels import compile_matmul
    return compile_matmul("gfx942", 128, 128, 64, 4, "bf16", aligned=True)


def gemm_spec():
    from isagen.builders.spec import parse_spec
    return parse_spec((ROOT / "specs" / "gemm_bf16.yaml").read_text(), "gemm_bf16.yaml")


def gemm_co(target: str) -> bytes:
    """isagen's bundled gemm_bf16 (256x256 tiles, 8 waves, C = A·Bᵀ) for ``target``."""
    co = _prebuilt(f"gemm_bf16_{target}.co")
    if co is not None:
        return co
    from isagen.objects.emit import render_assembly
    from isagen.objects.toolchain import assemble
    spec = gemm_spec()
    return assemble(render_assembly(spec.build(target)), target, name=spec.name)


def run_triton(dev, kernel, A, B, M: int, N: int, K: int):
    """C = A @ B (bf16 bits, int16 M x K and K x N arrays or tensors) on ``dev``; returns (module, C buffer,
    launch kwargs) after one launch."""
    mod = dev.load_module(kernel.hsaco)
    a, b = dev.to_device(A), dev.to_device(B)
    c = dev.alloc(M * N * 2, "C")
    kw = dict(grid=kernel.grid(M, N), block=kernel.block, shared_bytes=kernel.shared,
              args=kernel.args(a, b, c, M, N, K))
    mod.launch(kernel.name, **kw)
    return mod, c, kw


def run_gemm(dev, target: str, co: bytes, A, B, M: int, N: int, K: int):
    """C = A · Bᵀ through gemm_bf16 (A M x K, B N x K, bf16 bits); returns (module, C buffer, launch kwargs)."""
    from isagen.builders.contract import evaluate
    spec = gemm_spec()
    info = spec.launch_info(target)
    mod = dev.load_module(co)
    a, b = dev.to_device(A), dev.to_device(B)
    c = dev.alloc(M * N * 2, "C")
    sizes = {"m": M, "n": N, "k": K}
    env = {**info.constants, **sizes}
    args = [a, b, c] + [np.uint32(evaluate(info.source_of(n)[1], env)) for n in
                        ("m", "n", "k", "tiles_m", "tiles_n", "k_tiles", "pad")]
    kw = dict(grid=info.grid_for(sizes, "gemm"), block=info.block, args=args)
    mod.launch(spec.name, **kw)
    return mod, c, kw


# LDS reads of bytes and halves (plain, sign-extended, into one half of the destination) and an unaligned
# dword, at per-lane addresses (some past the 1 KiB allocation) with a per-lane EXEC: a kernel of 3
# workgroups of 2 waves.  Input rows (LDS_SUB_ROWS dwords each, one per work-item): 0-1 the LDS contents,
# 2 the addresses, 3 the EXEC bits, 4 the destinations' previous contents; output row j: the destination
# of LDS_SUB_READS[j].
LDS_SUB_READS = ("ds_read_u8 v40, v3", "ds_read_i8 v41, v3 offset:3", "ds_read_u16 v42, v3 offset:1",
                 "ds_read_i16 v43, v3 offset:2", "ds_read_u8_d16 v44, v3", "ds_read_u8_d16_hi v45, v3 offset:5",
                 "ds_read_i8_d16 v46, v3 offset:7", "ds_read_i8_d16_hi v47, v3", "ds_read_u16_d16 v48, v3 offset:6",
                 "ds_read_u16_d16_hi v49, v3 offset:9", "ds_read_b32 v50, v3 offset:1")
LDS_SUB_ROWS = 384


def lds_sub_reads_co() -> bytes:
    """The LDS sub-dword read kernel above (``lds_sub_reads``: kernarg inp, out; grid 3, block 128, LDS 1 KiB)."""
    co = _prebuilt("lds_sub_reads.co")
    if co is not None:
        return co
    row = 4 * LDS_SUB_ROWS
    prev = "\n".join(f"  v_mov_b32 v{40 + j}, v5" for j in range(len(LDS_SUB_READS)))
    reads = "\n".join(f"  {r}" for r in LDS_SUB_READS)
    stores = "\n".join(f"  v_add_u32 v101, {row * j}, v100\n  global_store_dword v101, v{40 + j}, s[6:7]"
                       for j in range(len(LDS_SUB_READS)))
    body = f"""  s_waitcnt vmcnt(0)
  v_lshlrev_b32 v10, 2, v0
  ds_write_b32 v10, v1
  ds_write_b32 v10, v2 offset:512
  s_waitcnt lgkmcnt(0)
  s_barrier
{prev}
  v_cmp_ne_u32 vcc, 0, v4
  s_and_saveexec_b64 s[20:21], vcc
{reads}
  s_waitcnt lgkmcnt(0)
  s_mov_b64 exec, s[20:21]
{stores}
"""
    return _rows_kernel("lds_sub_reads", LDS_SUB_ROWS, range(1, 6), body, 1024)


def _rows_kernel(name: str, rows: int, regs, body: str, lds: int) -> bytes:
    """A fixture kernel of the LDS tests (kernarg inp, out; workgroups of 128 work-items): the work-item's
    byte offset in an input row (``rows`` dwords) in v100, input row k loaded into v``regs[k]`` (not
    waited for), then ``body``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from emu_support import build
    loads = "\n".join(f"  v_add_u32 v101, {4 * rows * k}, v100\n  global_load_dword v{r}, v101, s[4:5]"
                      for k, r in enumerate(regs))
    src = f"""
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_lshl_b32 s8, s2, 7
  v_add_u32 v100, s8, v0
  v_lshlrev_b32 v100, 2, v100
  s_waitcnt lgkmcnt(0)
{loads}
{body}"""
    return build(name, src, args=(("ptr", "inp"), ("ptr", "out")), vgprs=104, sgprs=32, lds=lds, max_wg=128)


# LDS writes of every size (b8, b16, their d16_hi forms, b32 unaligned, b64, b96, b128, write2 b32/b64)
# into 96-byte slots (one per work-item, a random permutation: no two lanes write the same bytes; some
# slots moved past the 12 KiB allocation) under a random EXEC, over an LDS filled with a pattern first;
# then the whole LDS is stored.  Input rows (LDS_WRITE_ROWS dwords each): 0 the slots' byte addresses,
# 1 the EXEC bits, 2-5 the data registers v22..v25; output: LDS_WRITE_DUMP rows of 128 dwords per
# workgroup (row r, work-item t: LDS dword 128 r + t).  3 workgroups of 2 waves.
LDS_WRITES = ("ds_write_b8 v20, v22", "ds_write_b16 v20, v23 offset:2", "ds_write_b8_d16_hi v20, v24 offset:4",
              "ds_write_b16_d16_hi v20, v25 offset:6", "ds_write_b32 v20, v23 offset:9",
              "ds_write_b64 v20, v[22:23] offset:13", "ds_write2_b32 v20, v24, v25 offset0:6 offset1:7",
              "ds_write_b96 v20, v[22:24] offset:32", "ds_write2_b64 v20, v[22:23], v[24:25] offset0:6 offset1:7",
              "ds_write_b128 v20, v[22:25] offset:64")
LDS_WRITE_ROWS = 384
LDS_WRITE_BYTES = 128 * 96
LDS_WRITE_DUMP = LDS_WRITE_BYTES // 512


def lds_writes_co() -> bytes:
    """The LDS write kernel above (``lds_writes``: kernarg inp, out; grid 3, block 128, LDS 12 KiB)."""
    co = _prebuilt("lds_writes.co")
    if co is not None:
        return co
    row = 4 * LDS_WRITE_ROWS
    fill = "\n".join(f"  v_xor_b32 v11, {0x1000193 * (r + 1) & 0x7FFFFFFF}, v12\n"
                     f"  ds_write_b32 v10, v11 offset:{512 * r}" for r in range(LDS_WRITE_DUMP))
    writes = "\n".join(f"  {w}" for w in LDS_WRITES)
    dump = "\n".join(f"  ds_read_b32 v11, v10 offset:{512 * r}\n  s_waitcnt lgkmcnt(0)\n"
                     f"  v_add_u32 v101, {row * r}, v100\n  global_store_dword v101, v11, s[6:7]"
                     for r in range(LDS_WRITE_DUMP))
    body = f"""  v_lshlrev_b32 v10, 2, v0
  s_mov_b32 s9, 0x9e3779b1
  v_mul_lo_u32 v12, v0, s9
  v_xor_b32 v12, s2, v12
{fill}
  s_waitcnt vmcnt(0) lgkmcnt(0)
  s_barrier
  v_cmp_ne_u32 vcc, 0, v4
  s_and_saveexec_b64 s[20:21], vcc
{writes}
  s_waitcnt lgkmcnt(0)
  s_mov_b64 exec, s[20:21]
  s_barrier
{dump}
"""
    return _rows_kernel("lds_writes", LDS_WRITE_ROWS, (20, 4, 22, 23, 24, 25), body, LDS_WRITE_BYTES)


def prebuild(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    k = triton_matmul()
    meta = {f.name: getattr(k, f.name) for f in dataclasses.fields(k) if f.name not in ("hsaco", "amdgcn")}
    (out / "triton_matmul.co").write_bytes(k.hsaco)
    (out / "triton_matmul.json").write_text(json.dumps(meta) + "\n")
    for t in TARGETS:
        (out / f"gemm_bf16_{t}.co").write_bytes(gemm_co(t))
    (out / "lds_sub_reads.co").write_bytes(lds_sub_reads_co())
    (out / "lds_writes.co").write_bytes(lds_writes_co())
    print(f"wrote {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    prebuild(Path(sys.argv[1]))
