"""``isagen model FILE.co``: a predicted run time, its limiter and a per-SIMD stall breakdown.

    isagen model FILE.co --shape M,N,K [--machine mi355x] [--splitk N] [--out-dtype float32|bfloat16]
                         [--timeline FILE.png|FILE.html] [--json]
    isagen model FILE.co --grid X,Y,Z --block N [--arg buf:BYTES | --arg VALUE ...] [--total-workgroups T]
    isagen model specs/gemm_bf16.yaml --shape M,N,K [--machine mi355x]      (isagen's own GEMM specs)

The first form knows AITER's bf16 GEMM code objects (their arguments, grid and split-K as AITER's
launcher computes them); the second runs any kernel of a code object on the emulator with zero-filled
buffers of the given sizes and predicts a launch of ``T`` such workgroups (default: the grid).  Every
number printed is a prediction of the model (docs/model.md gives its measured accuracy), never a
measurement.
"""

from __future__ import annotations

import json
import sys

from isagen import cmdline
from isagen.cmdline import Choice, File, argument, option
from isagen.model import ModelError
from isagen.model.cu import STALLS
from isagen.model.machines import DEFAULT_MACHINE, MACHINES, get_machine
from isagen.model.timeline import write as write_timeline
from isagen.model.workloads import Prediction, bf16_gemm, isagen_gemm, predict_traced


def _ints(text: str, what: str, n: int | None = None) -> list[int]:
    try:
        vals = [int(x, 0) for x in str(text).replace("x", ",").split(",") if x.strip()]
    except ValueError:
        raise ModelError(f"{what}: expected comma-separated integers, got '{text}'") from None
    if n is not None and len(vals) != n:
        raise ModelError(f"{what}: expected {n} integers, got '{text}'")
    if any(v <= 0 for v in vals):
        raise ModelError(f"{what}: values must be positive, got '{text}'")
    return vals


def render(p: Prediction) -> str:
    d = p.detail
    g = p.grid
    m = get_machine(p.machine)
    lines = [f"kernel     {p.kernel} on {p.machine} ({m.target}, {m.cus} CUs, peak {m.clock_mhz:.0f} MHz; "
             f"modelled at {p.clock_mhz:.0f} MHz)",
             f"launch     {p.shape}; {len(g.rounds)} round(s) of up to {m.cus} x {g.per_cu} workgroups "
             f"(occupancy limited by {g.occupancy_limit or '-'}); L2 miss fraction {g.miss:.2f}",
             f"predicted  {p.us:.2f} us" + (f", {p.tflops:.1f} TFLOP/s" if p.flops else "") +
             f", {p.tb_s:.2f} TB/s of compulsory traffic" + (" (steady state extrapolated over K)" if p.extrapolated
                                                              else ""),
             f"limiter    {p.limiter}",
             "           (a prediction of isagen's timing model, not a measurement; accuracy: docs/model.md)",
             "",
             f"busiest CU of the first round: {d.cycles:.0f} cycles, {len(d.wave_end)} waves",
             f"  {'SIMD':5} {'instr':>7} {'mfma busy':>10} {'valu busy':>10} " +
             " ".join(f"{s:>10}" for s in STALLS)]
    for i, s in enumerate(d.simds):
        cyc = max(d.cycles, 1.0)
        lines.append(f"  {i:<5} {s.instructions:>7} {s.mfma_busy / cyc:>10.0%} {s.valu_busy / cyc:>10.0%} " +
                     " ".join(f"{s.stalls[k]:>10.0f}" for k in STALLS))
    lines.append("  (busy: share of the CU's time; stalls: cycles summed over the SIMD's waves)")
    return "\n".join(lines)


def as_dict(p: Prediction) -> dict:
    d = p.detail
    return {"prediction_not_measurement": True, "kernel": p.kernel, "machine": p.machine, "shape": p.shape,
            "predicted_us": p.us, "tflops": p.tflops if p.flops else None, "tb_s": p.tb_s, "limiter": p.limiter,
            "clock_mhz": p.clock_mhz, "extrapolated": p.extrapolated, "rounds": len(p.grid.rounds),
            "simds": [{"instructions": s.instructions, "mfma_busy": s.mfma_busy, "valu_busy": s.valu_busy,
                       "stalls": s.stalls} for s in d.simds], "cu_cycles": d.cycles}


# its one-line help is in cli.LAZY, listed without importing this module
@cmdline.command("model", help="Predict a kernel's run time on an AMD Instinct GPU (a model, never a measurement).")
@argument("file", type=File(exists=True))
@option("--shape", help="M,N,K of an AITER bf16 GEMM code object or an isagen GEMM spec")
@option("--machine", help=f"one of {', '.join(MACHINES)} (default: " +
              ", ".join(f"{m} for {t}" for t, m in DEFAULT_MACHINE.items()) + ")")
@option("--splitk", type=int, default=None, help="split-K (default: AITER's heuristic)")
@option("--out-dtype", default="float32", type=Choice(["float32", "bfloat16"]))
@option("--grid", "grid_", help="X,Y,Z workgroups to emulate (any kernel)")
@option("--block", help="work-items per workgroup (any kernel)")
@option("--kernel", "kernel_name", help="kernel name (default: the only one)")
@option("--arg", "args", multiple=True, help="an argument: buf:BYTES (zeroed buffer) or a number")
@option("--total-workgroups", type=int, default=None, help="the launch's workgroups (default: the grid)")
@option("--timeline", type=File(), help="write one CU's wave timeline (.png or .html)")
@option("--json", "as_json", is_flag=True, help="print JSON")
def command(file, shape, machine, splitk, out_dtype, grid_, block, kernel_name, args, total_workgroups, timeline,
            as_json) -> int:
    from isagen.objects.codeobject import read_code_object

    if str(file).endswith((".yaml", ".yml")):          # one of isagen's GEMM specs
        if not shape:
            raise ModelError("a GEMM spec needs --shape M,N,K")
        M, N, K = _ints(shape, "--shape", 3)
        p = isagen_gemm(file, M, N, K, get_machine(machine or "mi355x"))
        print(json.dumps(as_dict(p), indent=1) if as_json else render(p))
        return 0
    co = read_code_object(file)
    m = get_machine(machine or DEFAULT_MACHINE.get(co.mach, "mi300x"))
    if m.target != co.mach:
        raise ModelError(f"--machine {m.name} is {m.target}; {file} is built for {co.mach}")
    if shape:
        M, N, K = _ints(shape, "--shape", 3)
        p = bf16_gemm(file, M, N, K, m, splitk=splitk, out_dtype=out_dtype)
    elif grid_ and block:
        p = _generic(file, co, m, _ints(grid_, "--grid", 3), _ints(block, "--block", 1)[0], kernel_name, args,
                     total_workgroups)
    else:
        raise ModelError("give --shape M,N,K (AITER bf16 GEMM) or --grid X,Y,Z --block N (any kernel)")
    print(json.dumps(as_dict(p), indent=1) if as_json else render(p))
    if timeline and p.replay is not None:
        until = min(p.detail.cycles, 6000.0)
        write_timeline(p.replay(until), timeline, f"{p.kernel} on {p.machine}: one CU, first {until:.0f} cycles "
                                                  f"(model prediction)")
        print(f"timeline   {timeline}", file=sys.stderr)
    return 0


def _generic(file, co, machine, grid, block, kernel_name, args, total):
    import numpy as np

    from isagen.model.trace import Recorder, workgroups
    from isagen.runtime.emu import Device

    names = list(co.kernels)
    name = kernel_name or (names[0] if len(names) == 1 else None)
    if name is None or name not in co.kernels:
        raise ModelError(f"--kernel: choose one of {', '.join(names)}")
    dev = Device(co.mach, sanitize=False)
    mod = dev.load_module(file)
    vals = []
    for a in args:
        if a.startswith("buf:"):
            vals.append(dev.to_device(np.zeros(_ints(a[4:], "--arg buf", 1)[0], np.uint8)))
        else:
            try:
                vals.append(np.int32(int(a, 0)))
            except ValueError:
                try:
                    vals.append(np.float32(float(a)))
                except ValueError:
                    raise ModelError(f"--arg: '{a}' is neither buf:BYTES nor a number") from None
    rec = Recorder()
    mod.trace = rec
    mod.launch(name, grid=tuple(grid), block=(block, 1, 1), args=vals)
    return predict_traced(workgroups(rec.ops(co.mach)), co.kernels[name], machine, threads=block,
                          total_wgs=total)
