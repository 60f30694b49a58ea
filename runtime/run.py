"""``isagen run SPEC``: build a spec's kernel, run it on random inputs, check it against the spec's torch
reference, and time it.

    isagen run axpy_f32 --shape n=100000                # emulator here; hip on an AMD GPU
    isagen run specs/add_bf16.yaml -D block=128 --backend emu --target gfx950

Prints one line per output with the max abs/rel error against the reference and pass/fail, then the
time: device time (hip events, median of ``--iters`` launches) on hip, the emulator's wall time and
executed instruction count on emu.  Exit code 0 when every output matches, 1 on a mismatch (2, from
the CLI, for a user error such as a bad spec or shape).

The reference is the spec's ``reference:`` expression, evaluated by torch in float64 over the input
tensors (their values before the launch), the scalars and the sizes; ``torch``, ``F``
(torch.nn.functional), ``math`` and ``isagen`` (for references such as
``isagen.prims.random.torch_dropout``) are in scope.  An output matches where
``|out - ref| <= atol + rtol*|ref|`` with the tolerances of its element type (``TOLERANCES``) or the
spec's ``tolerance: {rtol, atol}``.  A spec whose outputs are sums over one of its sizes declares it
(``tolerance: {reduction: k, accumulate: f32}``) and the bound grows by ``k * u * mag``, ``u`` the unit
round-off of the accumulation type and ``mag`` the reference evaluated on the absolute values of the
inputs and scalars (for a matrix product, ``|A| @ |B|``): the componentwise error bound of a sum of k
products in any order (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1), which holds
under cancellation where a bound relative to ``|ref|`` alone cannot.
"""

from __future__ import annotations

import math
import os
import random
import statistics
from dataclasses import dataclass, field

import click

import isagen
from isagen.api import Kernel, build, resolve_spec, torch_dtype
from isagen.builders.spec import load_spec, printable
from isagen.errors import LaunchError, SpecError
from isagen.progress import SLOW_WORK_S, Progress
from isagen.runtime import gpu
from isagen.runtime.backends import BACKENDS, choose_backend

# output element type -> (rtol, atol): the rounding of one result in that type, with headroom
# (torch.testing's defaults for f32/f16/bf16; fp8 by its 3- and 2-bit mantissas)
TOLERANCES = {"f64": (1e-7, 1e-7), "f32": (1.3e-6, 1e-5), "f16": (1e-3, 1e-5), "bf16": (1.6e-2, 1e-5),
              "fp8": (1.25e-1, 1e-3), "bf8": (2.5e-1, 1e-3)}
# accumulation type -> unit round-off (half an ulp of 1), for ``tolerance.reduction``
UNIT_ROUNDOFF = {"f64": 2.0 ** -53, "f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}


@dataclass
class OutputCheck:
    name: str
    max_abs: float
    max_rel: float
    mismatches: int
    numel: int
    rtol: float
    atol: float
    reduction: str = ""          # how the bound grows with the reduction ("" when the spec declares none)

    @property
    def ok(self) -> bool:
        return self.mismatches == 0


@dataclass
class RunReport:
    kernel: Kernel
    backend: str
    sizes: dict
    grid: tuple
    block: tuple
    checks: list = field(default_factory=list)
    time_ms: float | None = None          # hip: device time (median); emu: wall time of the launch
    instructions: int | None = None       # emu: instructions executed

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def parse_assignments(items, what: str, cast) -> dict:
    out = {}
    for item in items or ():
        for part in str(item).split(","):
            name, sep, text = part.partition("=")
            name = name.strip()
            if not sep or not name.isidentifier():
                raise SpecError(f"{what} {printable(part)}: expected name=value (for example {what} n=4096)")
            try:
                out[name] = cast(text.strip())
            except ValueError:
                raise SpecError(f"{what} {printable(part)}: {text.strip()!r} is not a number") from None
    return out


def _int(text: str) -> int:
    return int(text, 0)


def _number(text: str):
    try:
        return int(text, 0)
    except ValueError:
        return float(text)


def random_inputs(kernel, sizes: dict, device: str = "cpu", seed: int = 0) -> dict:
    """Random tensors for every tensor the kernel takes (outputs too: the kernel must overwrite them)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for t in kernel.launch.tensors:
        missing = [d for d in t.shape if isinstance(d, str) and d not in sizes]
        if missing:
            raise LaunchError(f"{kernel.name}: no size for {', '.join(missing)} (give --shape {missing[0]}=...)")
        shape = [sizes[d] if isinstance(d, str) else d for d in t.shape]
        dtype = torch_dtype(t.dtype, kernel.target)
        if dtype.is_floating_point:
            x = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
        else:
            info = torch.iinfo(dtype)
            x = torch.randint(max(info.min, -100), min(info.max, 100) + 1, shape, generator=gen).to(dtype)
        out[t.name] = x.to(device)
    return out


def random_scalars(kernel, given: dict, seed: int = 0) -> dict:
    rng = random.Random(seed)
    out = {}
    for s in kernel.launch.scalars:
        if s.name in given:
            out[s.name] = given[s.name]
        elif s.default is not None:
            out[s.name] = s.default
        elif s.dtype.startswith("f"):
            out[s.name] = round(rng.uniform(0.5, 2.0), 3) * rng.choice((1, -1))
        else:
            raise LaunchError(f"{kernel.name}: scalar '{s.name}' ({s.dtype}) has no default; "
                              f"give --scalar {s.name}=...")
    unknown = sorted(set(given) - {s.name for s in kernel.launch.scalars})
    if unknown:
        raise LaunchError(f"{kernel.name}: unknown scalar(s) {', '.join(unknown)} "
                          f"(it takes: {', '.join(s.name for s in kernel.launch.scalars) or 'none'})")
    return out


def reference(kernel, inputs: dict, scalars: dict, sizes: dict) -> dict:
    """The spec's reference for each written tensor (float64), from the inputs before the launch."""
    import torch
    if not kernel.reference:
        raise SpecError(f"{kernel.spec_path or kernel.name}: the spec has no 'reference:' to check against")
    env = {n: (t.double() if t.dtype.is_floating_point else t) for n, t in inputs.items()}
    env.update(scalars)
    env.update(sizes)
    scope = {"torch": torch, "F": torch.nn.functional, "math": math, "isagen": isagen, "__builtins__": {}}
    try:
        value = eval(compile(kernel.reference, "<reference>", "eval"), scope, env)  # noqa: S307 -- the spec's own expression
    except Exception as e:   # noqa: BLE001 -- any failure of the user's expression is reported as one line
        raise SpecError(f"{kernel.spec_path or kernel.name}: reference '{kernel.reference}' failed: "
                        f"{type(e).__name__}: {e}") from None
    written = [t for t in kernel.launch.tensors if t.written]
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    if len(values) != len(written):
        raise SpecError(f"{kernel.spec_path or kernel.name}: reference gives {len(values)} value(s) for "
                        f"{len(written)} output(s) ({', '.join(t.name for t in written)})")
    out = {}
    for t, v in zip(written, values):
        shape = tuple(inputs[t.name].shape)
        where = f"{kernel.spec_path or kernel.name}: reference '{kernel.reference}'"
        # a real tensor or number that broadcasts to the output's shape; anything else is the spec's mistake
        if isinstance(v, bool) or not isinstance(v, (torch.Tensor, int, float)):
            raise SpecError(f"{where} gives {_what(v)} for output '{t.name}', not a tensor or a number")
        v = torch.as_tensor(v)
        if v.is_complex() or v.dtype == torch.bool:
            raise SpecError(f"{where} gives a {v.dtype} tensor for output '{t.name}', not a real one")
        try:
            v = torch.broadcast_to(v.to(torch.float64), shape)
        except RuntimeError:
            raise SpecError(f"{where} gives shape {tuple(v.shape)} for output '{t.name}' of shape {shape}") from None
        out[t.name] = v
    return out


def _what(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '…' if len(text) > 40 else text}"


def compare(name: str, got, want, dtype: str, tolerance: dict | None = None, sizes: dict | None = None,
            magnitude=None) -> OutputCheck:
    """``got`` vs ``want`` elementwise; ``tolerance`` is the spec's (rtol/atol override the dtype's;
    ``reduction`` adds ``sizes[reduction] * u * magnitude``, see the module docstring)."""
    import torch
    tolerance = tolerance or {}
    rtol, atol = TOLERANCES.get(dtype, (1e-5, 1e-5))
    rtol, atol = tolerance.get("rtol", rtol), tolerance.get("atol", atol)
    g = got.detach().cpu().double()
    w = want.detach().cpu().double()
    diff = (g - w).abs()
    nan_ok = torch.isnan(g) & torch.isnan(w)
    same_inf = torch.isinf(w) & (g == w)
    bound = atol + rtol * w.abs()
    described = ""
    if tolerance.get("reduction"):
        n = int((sizes or {})[tolerance["reduction"]])
        acc = tolerance.get("accumulate", "f32")
        bound = bound + n * UNIT_ROUNDOFF[acc] * magnitude.detach().cpu().double().abs()
        described = f"{tolerance['reduction']}={n} x u({acc}) x ref(|inputs|)"
    bad = ~((diff <= bound) | nan_ok | same_inf)
    finite = ~(nan_ok | same_inf)
    d = diff[finite]
    max_abs = float(d.max()) if d.numel() else 0.0
    rel = d / w[finite].abs().clamp_min(torch.finfo(torch.float32).tiny)
    max_rel = float(rel.max()) if rel.numel() else 0.0
    return OutputCheck(name, max_abs, max_rel, int(bad.sum()), g.numel(), rtol, atol, described)


def run_spec(spec, *, target: str | None = None, backend: str | None = None, params: dict | None = None,
             shapes: dict | None = None, scalars: dict | None = None, iters: int = 10, seed: int = 0) -> RunReport:
    """Build ``spec``, run it once on random inputs and check it; time it (see the module docstring)."""
    import torch
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise LaunchError(f"seed {seed!r}: expected an integer from 0 to 2**64-1 (torch's generator seed)")
    be = require_device(choose_backend(backend))
    kernel = build(spec, target, **(params or {}))
    symbols = kernel.launch.size_symbols
    unknown = sorted(set(shapes or {}) - set(symbols))
    if unknown:
        raise LaunchError(f"{kernel.name}: unknown size(s) {', '.join(unknown)} (it takes: {', '.join(symbols)})")
    negative = [f"{k}={v}" for k, v in (shapes or {}).items() if isinstance(v, int) and v < 0]
    if negative:
        raise LaunchError(f"{kernel.name}: --shape {', '.join(negative)}: a size cannot be negative")
    sizes = {k: v for k, v in kernel.spec_shapes.items() if k in symbols}
    sizes.update(shapes or {})
    device = "cuda" if be == "hip" else "cpu"
    check_sizes(kernel, sizes, device, reduction=bool(_spec_tolerance(kernel).get("reduction")))
    tensors = random_inputs(kernel, sizes, device, seed)
    inputs = {n: t.clone() for n, t in tensors.items()}
    values = random_scalars(kernel, scalars or {}, seed)
    result = kernel.run(**tensors, **values, backend=be, timing=(be == "emu"))
    report = RunReport(kernel, be, sizes, result.grid, result.block)
    stats = result.stats
    if be == "emu":
        report.time_ms = result.time_ms
        report.instructions = _instruction_count(stats)
    want = reference(kernel, inputs, values, sizes)
    tolerance = _spec_tolerance(kernel)
    mag = {}
    if tolerance.get("reduction"):
        mag = reference(kernel, {n: t.abs() for n, t in inputs.items()},
                        {n: abs(v) for n, v in values.items()}, sizes)
    for t in kernel.launch.tensors:
        if t.written:
            report.checks.append(compare(t.name, tensors[t.name], want[t.name], t.dtype, tolerance, sizes,
                                         mag.get(t.name)))
    if be == "hip" and all(result.grid) and iters > 0:
        times: list[float] = []
        for _ in range(iters + 1):
            ms = kernel.run(**tensors, **values, backend=be, timing=True).time_ms
            # a timed hip launch of a non-empty grid (checked above) always reports its device time
            assert ms is not None, "a timed hip launch returned no time"
            times.append(ms)
        report.time_ms = statistics.median(times[1:])     # the first launch warms up and is not counted
        torch.cuda.synchronize()
    return report


MAX_SEED = 2 ** 64 - 1         # torch.Generator.manual_seed takes a 64-bit seed


def require_device(be: str) -> str:
    """``be``, after checking that hip has a GPU to run on: its inputs go to the device before the
    launch, so say it now, as one line, rather than as torch's CUDA error."""
    if be == "hip":
        ok, why = gpu.rocm_gpu_available()
        if not ok:
            raise LaunchError(f"the hip backend needs a supported AMD GPU: {why} (use --backend emu)")
    return be


def check_sizes(kernel, sizes: dict, device: str = "cpu", reduction: bool = False) -> None:
    """Refuse sizes a run cannot take before anything is allocated: first what the kernel can address
    (the launch contract's ``requires``, e.g. 32-bit buffer offsets, and the dispatch's 32-bit grid,
    through ``grid_for``), then the memory the run needs against what the machine has free.  The run
    holds each tensor twice (the launch's and the pristine copy the reference reads), a float32
    temporary while drawing it, and float64 arrays of its size for the reference (twice with a
    reduction tolerance) and the comparison (four)."""
    import torch
    missing = [d for d in kernel.launch.size_symbols if d not in sizes]
    if missing:
        raise LaunchError(f"{kernel.name}: no size for {', '.join(missing)} (give --shape {missing[0]}=...)")
    kernel.launch.grid_for(sizes, kernel.name)
    need = 0
    for t in kernel.launch.tensors:
        numel = math.prod(sizes[d] if isinstance(d, str) else d for d in t.shape)
        itemsize = torch.empty((), dtype=torch_dtype(t.dtype, kernel.target)).element_size()
        need += numel * (2 * itemsize + 4) + (numel * 8 * (6 if reduction else 5) if t.written else 0)
    free, where = _free_memory(device)
    if free is not None and need > free:
        shown = " ".join(f"{k}={v}" for k, v in sizes.items())
        raise LaunchError(f"{kernel.name}: sizes {shown} need about {need / 2**30:.2f} GiB of {where} for the "
                          f"run, more than the {free / 2**30:.2f} GiB free; give smaller --shape sizes")


def _free_memory(device: str):
    """(bytes free, what) on the device the tensors go to; (None, ...) when it cannot be known."""
    if device == "cuda":
        import torch
        try:
            return torch.cuda.mem_get_info()[0], "GPU memory"
        except Exception:      # noqa: BLE001 -- no answer is not an error: the allocation will tell
            return None, "GPU memory"
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "host memory"
    except (ValueError, OSError, AttributeError):
        return None, "host memory"


def _spec_tolerance(kernel) -> dict:
    """The ``tolerance:`` of the spec the kernel was built from ({} when it has none)."""
    if not kernel.spec_path:
        return {}
    return load_spec(kernel.spec_path).tolerance


def _instruction_count(stats):
    if stats is None:
        return None
    if isinstance(stats, dict):
        for key in ("instructions", "wave_instructions", "executed"):
            if key in stats:
                return int(stats[key])
        return None
    for key in ("instructions", "wave_instructions", "executed"):
        if hasattr(stats, key):
            return int(getattr(stats, key))
    return None


def format_report(r: RunReport) -> list[str]:
    k = r.kernel
    sizes = " ".join(f"{n}={v}" for n, v in r.sizes.items())
    lines = [f"{k.name} [{k.target}, {r.backend}] {sizes}: grid {r.grid} x block {r.block}"]
    for c in r.checks:
        verdict = "PASS" if c.ok else f"FAIL ({c.mismatches} of {c.numel} elements outside tolerance)"
        growth = f" + {c.reduction}" if c.reduction else ""
        lines.append(f"  {c.name}: max abs err {c.max_abs:.3g}, max rel err {c.max_rel:.3g} "
                     f"(rtol {c.rtol:g}, atol {c.atol:g}{growth}) {verdict}")
    if r.backend == "hip" and r.time_ms is not None:
        lines.append(f"  time: {r.time_ms * 1e3:.1f} us on the device (median of hip events)")
    elif r.backend == "emu":
        count = f", {r.instructions} wave instructions executed" if r.instructions is not None else ""
        wall = f"{r.time_ms:.1f} ms" if r.time_ms is not None else "-"
        lines.append(f"  time: emulated in {wall} wall{count}")
    lines.append("PASS" if r.ok else "FAIL")
    return lines


# --------------------------------------------------------------------------- the CLI subcommand
@click.command("run", short_help="run a spec's kernel on random inputs and check it against its torch reference")
@click.argument("spec")
@click.option("-D", "defines", multiple=True, metavar="NAME=VALUE", help="override a spec parameter (repeatable)")
@click.option("--shape", multiple=True, metavar="NAME=SIZE",
              help="a run-time size, e.g. --shape n=4096 (default: the spec's shapes:)")
@click.option("--scalar", multiple=True, metavar="NAME=VALUE", help="a scalar argument (default: random)")
@click.option("--backend", type=click.Choice(tuple(BACKENDS)), default=None,
              help="default: $ISAGEN_BACKEND, else hip on a supported AMD GPU, else emu")
@click.option("--target", default=None, metavar="TARGET",
              help=f"{' or '.join(gpu.SUPPORTED_ARCHS)} (default: the GPU's, else {gpu.DEFAULT_TARGET})")
@click.option("--iters", type=click.IntRange(min=0), default=10, help="timed launches on hip (default 10)")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, help="seed of the random inputs (0 to 2**64-1)")
def command(spec, defines, shape, scalar, backend, target, iters, seed) -> int:
    """Build SPEC (a spec file or the name of a bundled spec; cached), run it on random inputs of its
    shapes (hip on an AMD GPU, else the emulator), compare with the spec's reference, time it.  Exit
    code 1 on a mismatch.  An emulator run of more than a few seconds shows a progress bar on a
    terminal.  See docs/runtime.md."""
    path = resolve_spec(spec)
    loaded = load_spec(path, defines)                          # -D parsed by the declared types
    params = {k: loaded.params[k] for k in {o.split("=", 1)[0].strip() for o in defines}}
    with Progress("emulating", delay=SLOW_WORK_S, clock=True):             # the emulator reports its workgroups
        report = run_spec(path, target=target, backend=backend, params=params,
                          shapes=parse_assignments(shape, "--shape", _int),
                          scalars=parse_assignments(scalar, "--scalar", _number), iters=iters, seed=seed)
    print("\n".join(format_report(report)))
    return 0 if report.ok else 1
