"""Memory model of the memory-bound kernels: bytes moved against the minimum the operation needs.

    PYTHONPATH=. python bench/memory_model.py [--quick]

For every bundled memory-bound spec (and fp32 variants of the row kernels and of the fp8 quantization) it
runs one launch in the emulator (gfx942, MXFP8 on gfx950; sanitizer on) at the shape listed below and reads
the emulator's counters
(``Module.last_stats``: global bytes read and written by vector memory instructions, counted per lane
that is in range, and the same bytes by the access's width per lane).  It reports

* **ratio** = (global bytes read + written) / the minimum: every input element read once, every
  output element written once (a norm's weight and bias count once in total; fp8 elements are one byte;
  a static quantization's 4-byte scale is read by a scalar load, which the counters do not see);
* **read** and **write** ratios separately, and the ratio against a minimum that lets every workgroup
  read the vectors all rows share (a norm's weight and bias) once;
* **16 B share** = the share of those bytes moved by accesses of 16 contiguous bytes per lane
  (``buffer_load_dwordx4`` / ``buffer_store_dwordx4``);
* the emulator's executed wave-instructions.

The norms stage their weight (and bias) through LDS once per workgroup, so they read it once per
``rows_per_workgroup`` rows (16 in the bundled specs): their ratio is above 1.00 by that and by nothing else, which
the column "shared vectors once per workgroup" shows (the minimum when each workgroup must read the
vectors once; on a GPU those re-reads are L2 hits).  Writes bench/results/memory_model.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import isagen  # noqa: E402
from isagen.api import torch_dtype  # noqa: E402

RESULTS = ROOT / "bench" / "results"

# (spec, parameter overrides, sizes, scalars)
CASES = [
    ("rms_norm_bf16", {}, {"rows": 512, "hidden": 4096}, {}),
    ("rms_norm_bf16", {"dtype": "f32", "waves_per_row": 4}, {"rows": 512, "hidden": 4096}, {}),
    ("add_rms_norm_bf16", {}, {"rows": 512, "hidden": 4096}, {}),
    ("layer_norm_bf16", {}, {"rows": 512, "hidden": 4096}, {}),
    ("dropout_add_layer_norm_bf16", {}, {"rows": 512, "hidden": 2048}, {"p": 0.01, "seed": 1, "offset": 0}),
    ("softmax_bf16", {}, {"rows": 512, "cols": 4096}, {}),
    ("softmax_bf16", {"dtype": "f32", "waves_per_row": 4}, {"rows": 512, "cols": 4096}, {}),
    ("rotary_neox_bf16", {}, {"tokens": 1024, "heads": 16}, {}),
    ("rotary_interleaved_bf16", {}, {"tokens": 1024, "heads": 16}, {}),
    ("silu_bf16", {}, {"n": 1 << 21}, {}),
    ("gelu_bf16", {}, {"n": 1 << 21}, {}),
    ("gelu_tanh_bf16", {}, {"n": 1 << 21}, {}),
    ("relu_bf16", {}, {"n": 1 << 21}, {}),
    ("tanh_bf16", {}, {"n": 1 << 21}, {}),
    ("silu_and_mul_bf16", {}, {"rows": 128, "d": 14336}, {}),
    ("gelu_and_mul_bf16", {}, {"rows": 128, "d": 14336}, {}),
    ("gelu_tanh_and_mul_bf16", {}, {"rows": 128, "d": 14336}, {}),
    ("per_token_quant_fp8_bf16", {}, {"rows": 512, "hidden": 4096}, {}),
    ("per_token_quant_fp8_bf16", {"dtype": "f32", "waves_per_row": 4}, {"rows": 512, "hidden": 4096}, {}),
    ("static_quant_fp8_bf16", {}, {"rows": 512, "hidden": 4096}, {}),
    ("rms_norm_per_token_quant_fp8_bf16", {}, {"rows": 512, "hidden": 4096}, {}),
    ("add_rms_norm_per_token_quant_fp8_bf16", {}, {"rows": 512, "hidden": 4096}, {}),
    ("silu_and_mul_per_token_quant_fp8_bf16", {}, {"rows": 128, "d": 14336}, {}),
    ("mxfp8_quant_bf16", {}, {"rows": 512, "blocks": 128}, {}),
    ("mxfp4_quant_bf16", {}, {"rows": 512, "blocks": 128}, {}),
]
# specs for one target (OCP microscaling); the rest run on gfx942
ONLY_ON = {"mxfp8_quant_bf16": "gfx950", "mxfp4_quant_bf16": "gfx950"}


def shaped(t, sizes):
    return [sizes[d] if isinstance(d, str) else d for d in t.shape]


SHARED = ("weight", "bias")    # vectors every row of a norm needs: a workgroup must read them once


def minimum_bytes(kernel, sizes) -> tuple[int, int, int]:
    """(bytes every input must be read, bytes every output must be written: each element once;
    bytes of the vectors every row shares)."""
    read = written = shared = 0
    for t in kernel.launch.tensors:
        n = 1
        for d in shaped(t, sizes):
            n *= d
        nbytes = n * torch.empty(0, dtype=torch_dtype(t.dtype, kernel.target)).element_size()
        if t.role in ("in", "inout"):
            read += nbytes
            if t.name in SHARED:
                shared += nbytes
        if t.written:
            written += nbytes
    return read, written, shared


def measure(spec, params, sizes, scalars) -> dict:
    k = isagen.build(spec, ONLY_ON.get(spec, "gfx942"), **params)
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for t in k.launch.tensors:
        x = torch.randn(shaped(t, sizes), generator=g)
        if t.fill == "positive":               # a quantization scale
            x = x.abs() + 0.5
        tensors[t.name] = x.to(torch_dtype(t.dtype, k.target))
    values = {s.name: scalars.get(s.name, s.default) for s in k.launch.scalars}
    t0 = time.perf_counter()
    res = k.run(**tensors, **values, backend="emu")
    wall = time.perf_counter() - t0
    st = res.stats
    assert st["reports"] == 0
    need_r, need_w, shared = minimum_bytes(k, sizes)
    moved = st["global_bytes_read"] + st["global_bytes_written"]
    per_wg = need_r + need_w + (st["workgroups"] - 1) * shared     # the shared vectors once per workgroup
    variant = spec + "".join(f" {k}={v}" for k, v in params.items()) + (f" ({k.target})" if spec in ONLY_ON else "")
    return {
        "kernel": variant, "generator_params": dict(k.params), "sizes": sizes,
        "bytes_read": st["global_bytes_read"], "bytes_written": st["global_bytes_written"],
        "min_read": need_r, "min_written": need_w,
        "ratio": moved / (need_r + need_w), "ratio_per_workgroup": moved / per_wg,
        "read_ratio": st["global_bytes_read"] / need_r,
        "write_ratio": st["global_bytes_written"] / need_w,
        "share_16B": st["global_bytes_by_width"].get(16, 0) / moved,
        "bytes_by_width": {str(w): b for w, b in st["global_bytes_by_width"].items()},
        "wave_instructions": st["wave_instructions"], "workgroups": st["workgroups"], "emulator_s": wall,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the first case of each kernel family only")
    args = ap.parse_args(argv)
    rows = []
    for spec, params, sizes, scalars in CASES:
        if args.quick and params:
            continue
        r = measure(spec, params, sizes, scalars)
        rows.append(r)
        print(f"{r['kernel']:<45} ratio {r['ratio']:.4f}  16B {r['share_16B']:.3f}  ({r['emulator_s']:.1f} s)",
              flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    (RESULTS / "memory_model.json").write_text(json.dumps({"measured": stamp, "target": "gfx942",
                                                           "results": rows}, indent=1) + "\n")
    lines = ["# Memory model: global bytes moved / the minimum the operation needs", "",
             f"Measured {stamp} by `bench/memory_model.py` in the emulator (gfx942): bytes counted per lane "
             "in range by every vector memory instruction; minimum = each input element read once, each "
             "output element written once.", "",
             "| kernel | sizes | read / min | written / min | ratio | ratio, shared vectors once per workgroup "
             "| 16 B per lane | wave-instr |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        sz = " ".join(f"{k}={v}" for k, v in r["sizes"].items())
        lines.append(f"| {r['kernel']} | {sz} | {r['read_ratio']:.4f} | {r['write_ratio']:.4f} | "
                     f"**{r['ratio']:.4f}** | {r['ratio_per_workgroup']:.4f} | {100 * r['share_16B']:.1f}% | "
                     f"{r['wave_instructions']:,} |")
    (RESULTS / "memory_model.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
