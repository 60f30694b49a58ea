"""Accuracy of the fp32 math in the memory-bound kernels, measured against float64.

    PYTHONPATH=. python bench/mem_accuracy.py [--points 262144]

Runs the fp32 kernels (gfx942, in the emulator) on dense inputs and reports, per function, the largest
error against torch's float64 result, in units of the fp32 ulp of the true value (``ulp``) and as an
absolute error, over the range given:

* the activations (``kernels/activations.py``) on ``x`` evenly spaced over [-12, 12] plus 2^14 values
  log-spaced in +-[1e-6, 1] (where relative accuracy near 0 matters: tanh, gelu);
* softmax on rows of 1000 normal values (scale 3), and the same around 1e5, -1e5, 3e9 and -1e10 (as fp32
  holds them: the max is subtracted before the scaling there), rms_norm / layer_norm on rows of 1000 values
  (mean 0.5, std 2).

Errors are in fp32 ulps of the true value where it is a normal fp32 (|ref| >= 1e-30), for the row
operations in ulps of the row's RMS (a LayerNorm output near 0 after the bias has no meaningful relative
error).  The references are float64 formulas without cancellation.  The emulator rounds
``v_exp_f32``, ``v_rcp_f32`` and ``v_rsq_f32`` correctly; the hardware's are within 1 ulp (CDNA3
ISA guide), which can add about 1 ulp per transcendental on the path (docs/kernels.md).  Writes
bench/results/mem_accuracy.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import isagen  # noqa: E402

RESULTS = ROOT / "bench" / "results"
# float64 references written without cancellation (torch's own float64 gelu computes 1 + erf(x/sqrt 2),
# which is 0 for x < -8.3 although gelu(x) is -2e-16 there)
C2 = 2 * (2 / torch.pi) ** 0.5
REF = {"silu": lambda x: x * torch.sigmoid(x),
       "gelu": lambda x: 0.5 * x * torch.special.erfc(-x / 2 ** 0.5),
       "gelu_tanh": lambda x: x * torch.sigmoid(C2 * (x + 0.044715 * x ** 3)),
       "relu": F.relu, "tanh": torch.tanh}


def _spec(tmp: Path, generator: str, name: str, params: dict) -> str:
    body = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in params.items())
    path = tmp / f"{name}.yaml"
    path.write_text(f"kernel: {generator}\nname: {name}\ntargets: [gfx942]\nparams: {{{body}}}\n")
    return str(path)


def ulp32(x: np.ndarray) -> np.ndarray:
    """The fp32 ulp at |x| (the spacing above |x|; the smallest subnormal spacing at 0)."""
    a = np.abs(x).astype(np.float32)
    return (np.nextafter(a, np.float32(np.inf)) - a).astype(np.float64)


def errors(got: torch.Tensor, want: torch.Tensor, per_row_scale: bool = False, x: torch.Tensor | None = None) -> dict:
    """max error in fp32 ulps of the true value (where it is a normal fp32, |ref| >= 1e-30), or for row
    operations in ulps of the row's RMS (outputs near 0 after a bias say nothing relative), and the
    largest absolute error; given the inputs ``x``, also the max error over x >= -3 (the activations'
    working range: below it gelu's tails are < 1e-2 and lose digits, docs/kernels.md)."""
    g, w = got.double().numpy(), want.double().numpy()
    err = np.abs(g - w)
    if per_row_scale:
        scale = np.sqrt((w ** 2).mean(-1, keepdims=True)) * np.ones_like(w)
        ulps = err / ulp32(scale)
        keep = np.isfinite(w)
    else:
        ulps = err / ulp32(w)
        keep = np.isfinite(w) & (np.abs(w) >= 1e-30)
    near = (x.double().numpy() >= -3)[keep] if x is not None else None
    ulps, err, w = ulps[keep], err[keep], w[keep]
    i = int(np.argmax(ulps))
    out = {"max_ulp": float(ulps.max()), "max_abs": float(err.max()), "worst_ref": float(w[i]),
           "points": int(w.size), "ulp_of": "row RMS" if per_row_scale else "value"}
    if near is not None:
        out["max_ulp_x_ge_-3"] = float(ulps[near].max())
    return out


def primitive_kernel():
    """A kernel applying the primitives to x [n]: out[0] = exp (fast), out[1] = exp (precise),
    out[2] = v_rsq_f32 (exact for the emulator; 1 ulp on the hardware)."""
    from isagen.builders.program import KernelBuilder
    from isagen.prims.math import exp_of
    from isagen.prims.rows import lane_and_wave
    from isagen.tiles.buffer import BufferResource
    k = KernelBuilder("prims_acc", "gfx942", workgroup_size=64)
    k.args.pointer("x", "f32", "read_only")
    k.args.pointer("out", "f32", "write_only")
    k.args.value("n", "u32")
    xr, outr = BufferResource(k, "x"), BufferResource(k, "out")
    xr.load_pointer(k.args["x"].offset)
    outr.load_pointer(k.args["out"].offset)
    n = k.sgpr(1, "n", kernel=True)
    k.s_load_dword(n, k.kernarg_ptr, k.args["n"].offset)
    lane, _ = lane_and_wave(k)
    k.wait(lgkmcnt=0, why="arguments")
    nb = k.sgpr(1, "nbytes", kernel=True)
    k.s_lshl_b32(nb, n, 2)
    xr.finish(nb)
    outr.finish(0x7FFFFFF0)
    off, x, y = k.vgpr(1, "off", kernel=True), k.vgpr(1, "xv", kernel=True), k.vgpr(1, "y", kernel=True)
    t = [k.vgpr(2, "t", kernel=True)]
    with k.temps(s="s1") as tt:
        k.s_lshl_b32(tt.s, k.workgroup_id["x"], 8)
        k.v_lshlrev_b32(off, 2, lane)
        k.v_add_u32(off, tt.s, off, comment="element byte offset")
    k.buffer_load_dword(x, off, xr.regs, 0, offen=True)
    k.wait(vmcnt=0, why="x landed")
    for i, kind in enumerate(("fast", "precise", "rsq")):
        if kind == "rsq":
            k.v_rsq_f32(y, x)
        else:
            exp_of(k, [y], [x], [t[0]], kind == "precise")
        with k.temps(a="v1", s="s1") as tt:
            k.s_mul_i32(tt.s, n, 4 * i)
            k.v_add_u32(tt.a, tt.s, off)
            k.buffer_store_dword(y, tt.a, outr.regs, 0, offen=True)
    return k.finish()


def primitives(rows: dict) -> None:
    from isagen.objects.emit import render_assembly
    from isagen.objects.toolchain import assemble
    from isagen.runtime.emu import Device
    prog = primitive_kernel()
    co = assemble(render_assembly(prog), "gfx942", name=prog.name)
    dev = Device("gfx942")
    mod = dev.load_module(co)
    for name, x, fn, cols in (("exp (fast)", np.linspace(-87, 88, 1 << 16, dtype=np.float32), np.exp, 0),
                              ("exp (precise)", np.linspace(-87, 88, 1 << 16, dtype=np.float32), np.exp, 1),
                              ("rsqrt (v_rsq_f32)", np.logspace(-30, 30, 1 << 16).astype(np.float32),
                               lambda v: 1 / np.sqrt(v), 2)):
        n = x.size
        xb, ob = dev.to_device(x), dev.to_device(np.zeros(3 * n, np.float32))
        mod.launch(prog.name, grid=(n // 64, 1, 1), block=(64, 1, 1), args=[xb, ob, np.uint32(n)])
        got = dev.from_device(ob, (3, n), np.float32)[cols]
        rng = "[-87, 88]" if "exp" in name else "[1e-30, 1e30]"
        rows[name] = {"range": rng, **errors(torch.from_numpy(got), torch.from_numpy(fn(x.astype(np.float64))))}
        print(name, rows[name], flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=1 << 18)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="isagen_acc_"))
    rows = {}
    primitives(rows)
    lin = torch.linspace(-12, 12, args.points, dtype=torch.float64)
    small = torch.logspace(-6, 0, 1 << 13, dtype=torch.float64)
    x = torch.cat([lin, small, -small]).float()
    for op in REF:
        k = isagen.build(_spec(tmp, "activation", f"acc_{op}", {"op": op, "dtype": "f32"}), "gfx942")
        out = torch.empty_like(x)
        k.run(x, out, backend="emu")
        rows[op] = {"range": "[-12, 12] and +-[1e-6, 1]", **errors(out, REF[op](x.double()), x=x)}
        print(op, rows[op], flush=True)

    g = torch.Generator().manual_seed(0)
    xs = torch.randn(64, 1000, generator=g) * 3
    k = isagen.build(_spec(tmp, "softmax", "acc_softmax", {"dtype": "f32", "max_cols": 1024, "waves_per_row": 1,
                                                            "waves": 4,
                                                            "rows_per_workgroup": 16}), "gfx942")
    out = torch.empty_like(xs)
    k.run(xs, out, backend="emu")
    rows["softmax"] = {"range": "rows of 1000, N(0, 3^2)", **errors(out, torch.softmax(xs.double(), -1))}
    print("softmax", rows["softmax"], flush=True)
    # |max| above 65536: the max is subtracted before the scaling (isagen.prims.math.exp_shifted)
    xl = torch.randn(64, 1000, generator=g) * 3 + torch.tensor([1e5, -1e5, 3e9, -1e10]).repeat(16)[:, None]
    out = torch.empty_like(xl)
    k.run(xl, out, backend="emu")
    rows["softmax (large)"] = {"range": "rows of 1000, {1e5, -1e5, 3e9, -1e10} + N(0, 3^2)",
                               **errors(out, torch.softmax(xl.double(), -1))}
    print("softmax (large)", rows["softmax (large)"], flush=True)

    xn = torch.randn(64, 1000, generator=g) * 2 + 0.5
    w = torch.randn(1000, generator=g)
    b = torch.randn(1000, generator=g)
    for op in ("rms_norm", "layer_norm"):
        params = {"op": op, "dtype": "f32", "max_hidden": 1024, "waves": 4, "waves_per_row": 2,
                  "rows_per_workgroup": 16,
                  "bias": op == "layer_norm"}
        k = isagen.build(_spec(tmp, "norm", f"acc_{op}", params), "gfx942")
        out = torch.empty_like(xn)
        if op == "rms_norm":
            k.run(xn, w, out, eps=1e-6, backend="emu")
            want = xn.double() * torch.rsqrt((xn.double() ** 2).mean(-1, keepdim=True) + 1e-6) * w.double()
        else:
            k.run(xn, w, b, out, eps=1e-5, backend="emu")
            want = F.layer_norm(xn.double(), (1000,), w.double(), b.double(), 1e-5)
        rows[op] = {"range": "rows of 1000, N(0.5, 2^2)", **errors(out, want, per_row_scale=True)}
        print(op, rows[op], flush=True)

    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    (RESULTS / "mem_accuracy.json").write_text(json.dumps({"measured": stamp, "results": rows}, indent=1) + "\n")
    lines = ["# fp32 accuracy of the memory-bound kernels against float64", "",
             f"Measured {stamp} by `bench/mem_accuracy.py` in the emulator (gfx942, correctly rounded "
             "transcendentals; hardware: each `v_exp_f32`/`v_rcp_f32`/`v_rsq_f32` within 1 ulp).", "",
             "| function | inputs | points | max error (fp32 ulps) | over x >= -3 | ulps of | max abs error |",
             "|---|---|---:|---:|---:|---|---:|"]
    for name, r in rows.items():
        near = f"{r['max_ulp_x_ge_-3']:.2f}" if "max_ulp_x_ge_-3" in r else ""
        lines.append(f"| {name} | {r['range']} | {r['points']} | {r['max_ulp']:.2f} | {near} | {r['ulp_of']} | "
                     f"{r['max_abs']:.3g} |")
    (RESULTS / "mem_accuracy.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
