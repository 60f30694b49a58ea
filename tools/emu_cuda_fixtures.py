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
    d = _dir()
    if d is not None and (d / f"gemm_bf16_{target}.co").exists():
        return (d / f"gemm_bf16_{target}.co").read_bytes()
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


def prebuild(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    k = triton_matmul()
    meta = {f.name: getattr(k, f.name) for f in dataclasses.fields(k) if f.name not in ("hsaco", "amdgcn")}
    (out / "triton_matmul.co").write_bytes(k.hsaco)
    (out / "triton_matmul.json").write_text(json.dumps(meta) + "\n")
    for t in TARGETS:
        (out / f"gemm_bf16_{t}.co").write_bytes(gemm_co(t))
    print(f"wrote {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    prebuild(Path(sys.argv[1]))
