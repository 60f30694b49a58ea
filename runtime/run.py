"""``isagen run SPEC``: build a spec's kernel, run it on random inputs, check it against the spec's torch
reference, and time it.

    isagen run axpy_f32 --shape n=100000                # emulator here; hip on an AMD GPU
    isagen run specs/add_bf16.yaml -D block=128 --backend emu --target gfx950

The first line names the kernel, target, backend, the sizes and where they come from (``--shape``,
the spec's ``shapes:``, or on the emulator its ``emulator_shapes:``, with the hardware sizes beside
them), and the launch's grid; it is printed before the launch, so a long emulation says at once what
it is doing (and on a terminal shows its progress: workgroups done, rate, ETA).  On the emulator's CPU
engine a launch of 256 waves or more then says how long it will take, as one line, terminal or not::

    emulator (cpu): ~848,128 wave-instructions (3,313 per wave x 256 waves, from its first workgroup), estimated ~0.6 s

(the first workgroup runs alone: its instructions per wave times the waves, and its time scaled to
the batches after it; a kernel whose workgroups differ in work, such as causal attention, is
estimated from its first).  Then one line per
output with the max abs/rel error against the reference and pass/fail, then the time: device time
(hip events, median of ``--iters`` launches) on hip, the emulator's wall time and executed
instruction count on emu.  Exit code 0 when every output matches, 1 on a mismatch (2, from the CLI,
for a user error such as a bad spec or shape).

The reference is the spec's ``reference:`` expression, evaluated by torch in float64 over the input
tensors (their values before the launch), the scalars and the sizes; ``torch``, ``F``
(torch.nn.functional), ``math``, ``isagen`` (for references such as
``isagen.prims.random.torch_dropout``) and ``target`` (the kernel's target name: the fp8 formats
differ) are in scope.  On the emulator's cuda engine (``ISAGEN_EMU_DEVICE=cuda``) with CUDA torch it is
evaluated on the GPU (``reference_device``; on CUDA copies of the inputs, the results brought back),
else, or where the expression fails there, on the CPU.  An output matches where
``|out - ref| <= atol + rtol*|ref| + growth`` with the tolerances of its element type
(``TOLERANCES``) or the spec's ``tolerance: {rtol, atol}``.

A spec can instead give each output's allowed error itself: ``tolerance: {bound: <expression>}``, an
expression in the reference's scope evaluated on the inputs in their own dtype (so it can run torch's
own low-precision computation), one value per written output (a number or a tensor that broadcasts to
it); the output matches where ``|out - ref| <= bound``.  The attention spec's is flash-attn's rule,
``isagen.runtime.attention.attention_error_bounds``: O's error at most twice torch's own bf16/fp16 SDPA's.

``growth`` is for outputs that are sums over one of the sizes (a matrix product's k): the spec
declares it (``tolerance: {reduction: k, accumulate: f32}``), and when it does not, a size that the
inputs have and no output has is taken as one (accumulated in f32).  Then
``growth = min(k, LAMBDA*sqrt(k)) * u * mag``, ``u`` the unit round-off of the accumulation type and
``mag`` the reference evaluated on the absolute values of the inputs and scalars (for a matrix
product, ``|A| @ |B|``, computed in float64).  ``k * u * mag`` is the worst-case componentwise bound
of a k-term sum of products in any order (Higham, *Accuracy and Stability of Numerical Algorithms*,
§3.1); rounding errors that are independent and of mean zero (round to nearest on random data) grow
like a random walk instead, and ``LAMBDA*sqrt(k) * u * mag`` bounds the error with probability at
least ``1 - 2k*exp(-LAMBDA**2 (1-u)**2 / 2)`` (Higham & Mary, *A new approach to probabilistic rounding
error analysis*, SIAM J. Sci. Comput. 41(5), 2019, Thm. 3.1).  Both hold under cancellation, where a
bound relative to ``|ref|`` cannot (an output whose exact value is ~1e-7 still carries the rounding
of partial sums of size ~sqrt(k)); the sqrt(k) one keeps the bound tight enough at large k that a
wrong kernel (a K-tile skipped, a tile stored in the wrong place) still fails.
"""

from __future__ import annotations

import importlib
import math
import os
import random
import statistics
import sys
import time
import types
from dataclasses import dataclass, field

from isagen import cmdline
from isagen.api import Kernel, build, resolve_spec, torch_dtype
from isagen.builders.spec import load_spec, printable
from isagen.cmdline import Choice, IntRange, argument, option
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
# lambda of the probabilistic bound (module docstring): a correct k-term sum exceeds LAMBDA*sqrt(k)*u*mag
# with probability below 2k*exp(-50) ~ 4e-22*k per output, i.e. never in any run of any size here (1e9
# outputs of k = 2^20 fail with probability ~4e-7); below k = LAMBDA**2 the worst case k*u*mag is smaller
LAMBDA = 10.0


@dataclass
class OutputCheck:
    name: str
    max_abs: float
    max_rel: float
    mismatches: int
    numel: int
    rtol: float
    atol: float
    reduction: str = ""          # how the bound grows with the reduction ("" when there is none)
    bound: str = ""              # the spec's tolerance.bound expression, when it gives the bound
    worst: float = 0.0           # the largest |got - want| / bound: the share of its bound the worst element uses

    @property
    def ok(self) -> bool:
        return self.mismatches == 0


@dataclass
class RunPlan:
    """What a run will do, known before it starts: the kernel, backend, sizes (and where each came
    from) and the launch's grid."""

    kernel: Kernel
    backend: str
    sizes: dict
    origin: str                  # where the sizes come from, for the first line (see ``size_origin``)
    grid: tuple
    block: tuple
    tolerance: dict = field(default_factory=dict)      # the spec's tolerance:


@dataclass
class RunReport:
    kernel: Kernel
    backend: str
    sizes: dict
    grid: tuple
    block: tuple
    checks: list = field(default_factory=list)
    origin: str = ""
    time_ms: float | None = None          # hip: device time (median); emu: wall time of the launch
    instructions: int | None = None       # emu: instructions executed
    reference_on: str = "cpu"             # torch's device the reference was evaluated on (reference_device)
    reference_s: float | None = None      # the reference's time (wall, with its magnitude and bounds)

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
        if t.fill.startswith("offsets:"):
            # cumulative offsets 0 = o[0] <= ... <= o[-1] = the size named (random lengths, empty ones too)
            total = sizes[t.fill.split(":", 1)[1]]
            cuts = torch.randint(0, total + 1, (max(shape[0] - 2, 0),), generator=gen).sort().values
            x = torch.cat([torch.zeros(1, dtype=torch.int64), cuts, torch.tensor([total])])[:shape[0]]
            out[t.name] = x.to(dtype).to(device)
            continue
        if t.fill == "e8m0":           # MX block scales: exponents 2^-7 .. 2^7 (bytes 120..134)
            out[t.name] = torch.randint(120, 135, shape, generator=gen, dtype=torch.int32).to(dtype).to(device)
            continue
        if t.fill == "positive":
            out[t.name] = (torch.rand(shape, generator=gen, dtype=torch.float32) * 1.5 + 0.5).to(dtype).to(device)
            continue
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
    if not kernel.reference:
        raise SpecError(f"{kernel.spec_path or kernel.name}: the spec has no 'reference:' to check against")
    return _per_output(kernel, "reference", kernel.reference, inputs, _float64(inputs), scalars, sizes)


def _float64(inputs: dict) -> dict:
    """The inputs as the reference sees them: floating tensors in float64, others (codes, indices) as given."""
    return {n: (t.double() if t.dtype.is_floating_point else t) for n, t in inputs.items()}


def magnitude(kernel, tolerance: dict, inputs: dict, scalars: dict, sizes: dict) -> dict:
    """The ``mag`` of the reduction's growth for each written tensor (float64): the spec's
    ``tolerance.magnitude`` expression, evaluated like the reference, where it gives one (inputs that
    are codes rather than values -- packed fp4 bytes, fp8 or E8M0 bytes in uint8 tensors -- have no
    absolute value the reference could take: ``|codes|`` are the codes), else the reference on the
    absolute values of the inputs and scalars."""
    expression = tolerance.get("magnitude")
    if expression:
        return _per_output(kernel, "tolerance.magnitude", expression, inputs, _float64(inputs), scalars, sizes)
    return reference(kernel, {n: _abs(t) for n, t in inputs.items()}, {n: abs(v) for n, v in scalars.items()},
                     sizes)


def error_bounds(kernel, expression: str, inputs: dict, scalars: dict, sizes: dict) -> dict:
    """The spec's ``tolerance.bound`` for each written tensor (float64): ``expression`` evaluated like the
    reference, but on the inputs in their own dtype."""
    return _per_output(kernel, "tolerance.bound", expression, inputs, dict(inputs), scalars, sizes)


class _Package:
    """A package as a spec's expression sees it: ``isagen.prims.fp8_model.f`` resolves whether or not
    anything imported ``isagen.prims.fp8_model`` before (a module's attribute first, else its
    submodule of that name, imported on first use), so a reference does not depend on what the
    process happened to import earlier."""

    __slots__ = ("_module",)

    def __init__(self, module: types.ModuleType):
        self._module = module

    def __getattr__(self, name: str):
        try:
            value = getattr(self._module, name)
        except AttributeError:
            if not hasattr(self._module, "__path__") or name.startswith("_"):
                raise
            try:
                value = importlib.import_module(f"{self._module.__name__}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{self._module.__name__}.{name}":
                    raise              # the submodule exists but imports something missing: say that
                raise AttributeError(f"module '{self._module.__name__}' has no attribute '{name}'") from None
        return _Package(value) if isinstance(value, types.ModuleType) else value


def _per_output(kernel, what: str, expression: str, inputs: dict, env: dict, scalars: dict, sizes: dict) -> dict:
    """``expression`` evaluated over ``env`` (the input tensors), the scalars, the sizes and the kernel's
    parameters (``causal``), with ``torch``, ``F``, ``math`` and ``isagen`` in scope: one float64 tensor
    per written tensor, broadcast to its shape."""
    import torch

    env = {**env, **scalars, **sizes}
    scope = {**kernel.params, "torch": torch, "F": torch.nn.functional, "math": math,
             "isagen": _Package(sys.modules["isagen"]),
             "target": kernel.target, "__builtins__": {}}
    try:
        value = eval(compile(expression, f"<{what}>", "eval"), scope, env)  # noqa: S307 -- the spec's own expression
    except Exception as e:   # noqa: BLE001 -- any failure of the user's expression is reported as one line
        raise SpecError(f"{kernel.spec_path or kernel.name}: {what} '{expression}' failed: "
                        f"{type(e).__name__}: {e}") from None
    written = [t for t in kernel.launch.tensors if t.written]
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    if len(values) != len(written):
        raise SpecError(f"{kernel.spec_path or kernel.name}: {what} gives {len(values)} value(s) for "
                        f"{len(written)} output(s) ({', '.join(t.name for t in written)})")
    out = {}
    for t, v in zip(written, values):
        shape = tuple(inputs[t.name].shape)
        where = f"{kernel.spec_path or kernel.name}: {what} '{expression}'"
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


def reduction_growth(n: int, accumulate: str = "f32") -> float:
    """The factor of ``mag`` by which the bound of an ``n``-term sum accumulated in ``accumulate``
    grows: ``min(n, LAMBDA*sqrt(n)) * u`` (module docstring)."""
    return min(n, LAMBDA * math.sqrt(n)) * UNIT_ROUNDOFF[accumulate]


def compare(name: str, got, want, dtype: str, tolerance: dict | None = None, sizes: dict | None = None,
            magnitude=None, bound=None) -> OutputCheck:
    """``got`` vs ``want`` elementwise; ``tolerance`` is the spec's (rtol/atol override the dtype's;
    ``reduction``, a size symbol or a tuple of them, adds ``reduction_growth(n) * magnitude`` with
    ``n`` their product, see the module docstring).  ``bound`` (the spec's ``tolerance.bound``, evaluated)
    replaces all of them: ``|got - want| <= bound``."""
    import torch
    tolerance = tolerance or {}
    rtol, atol = TOLERANCES.get(dtype, (1e-5, 1e-5))
    rtol, atol = tolerance.get("rtol", rtol), tolerance.get("atol", atol)
    g = got.detach().cpu().double()
    w = want.detach().cpu().double()
    diff = (g - w).abs()
    nan_ok = torch.isnan(g) & torch.isnan(w)
    same_inf = torch.isinf(w) & (g == w)
    given = "" if bound is None else str(tolerance.get("bound", "given"))
    if bound is not None:
        rtol = atol = 0.0
        bound = bound.detach().cpu().double()
    else:
        bound = atol + rtol * w.abs()
    described = ""
    if tolerance.get("reduction") and not given:
        symbols = tolerance["reduction"]
        symbols = (symbols,) if isinstance(symbols, str) else tuple(symbols)
        n = math.prod(int((sizes or {})[s]) for s in symbols)
        acc = tolerance.get("accumulate", "f32")
        bound = bound + reduction_growth(n, acc) * magnitude.detach().cpu().double().abs()
        what = "*".join(symbols)
        factor = f"{what}" if n <= LAMBDA ** 2 else f"{LAMBDA:g}*sqrt({what})"
        mag_is = "magnitude" if tolerance.get("magnitude") else "ref(|inputs|)"
        described = f"{factor} x u({acc}) x {mag_is}, {what}={n}"
    bad = ~((diff <= bound) | nan_ok | same_inf)
    finite = ~(nan_ok | same_inf)
    d = diff[finite]
    max_abs = float(d.max()) if d.numel() else 0.0
    rel = d / w[finite].abs().clamp_min(torch.finfo(torch.float32).tiny)
    max_rel = float(rel.max()) if rel.numel() else 0.0
    share = d / torch.broadcast_to(bound, diff.shape)[finite]          # 0/0 (exact where nothing is allowed): 0
    worst = float(torch.nan_to_num(share, nan=0.0).max()) if share.numel() else 0.0
    return OutputCheck(name, max_abs, max_rel, int(bad.sum()), g.numel(), rtol, atol, described, given, worst)


def output_tolerance(kernel, spec_tolerance: dict) -> dict:
    """The spec's tolerance, with the reduction taken from the launch contract when the spec names none:
    the sizes the inputs have and no written tensor has are summed over (a GEMM's k), in f32."""
    if spec_tolerance.get("reduction") or spec_tolerance.get("bound"):
        return dict(spec_tolerance)
    tensors = kernel.launch.tensors
    written = {d for t in tensors if t.written for d in t.shape if isinstance(d, str)}
    summed = []
    for t in tensors:
        for d in t.shape:
            if isinstance(d, str) and d not in written and d not in summed:
                summed.append(d)
    if not summed:
        return dict(spec_tolerance)
    return {**spec_tolerance, "reduction": tuple(summed), "accumulate": "f32"}


def size_origin(symbols, given: dict, emulated: dict, shapes: dict) -> str:
    """Where each size came from, in words: ``--shape``, the spec's ``shapes:`` or (on the emulator) its
    ``emulator_shapes:``; for the latter the hardware sizes are named too."""
    def where(s):
        if s in given:
            return "--shape"
        if s in emulated:
            return "the spec's emulator_shapes"
        return "the spec's shapes" if s in shapes else "nowhere"
    groups: dict[str, list[str]] = {}
    for s in symbols:
        groups.setdefault(where(s), []).append(s)
    if len(groups) == 1:
        text = next(iter(groups))
    else:
        text = "; ".join(f"{' '.join(names)}: {origin}" for origin, names in groups.items())
    if "the spec's emulator_shapes" in groups:
        text += "; on hardware " + " ".join(f"{s}={shapes[s]}" for s in symbols if s in shapes)
    return text


def plan_run(spec, *, target: str | None = None, backend: str | None = None, params: dict | None = None,
             shapes: dict | None = None) -> RunPlan:
    """Build ``spec`` and settle the sizes and the grid of its run (nothing is allocated or launched).

    Sizes: ``shapes`` (``--shape``), else on the emulator the spec's ``emulator_shapes:``, else its
    ``shapes:``; the kernel's ``requires`` are checked on them here (``grid_for``).  Without ``target`` the
    emulator runs the default target, or the spec's first when it does not list the default."""
    be = require_device(choose_backend(backend))
    if target is None and be == "emu":
        # a spec for some targets only (MXFP8: OCP fp8) runs on its first when the default is not one of them
        listed = load_spec(resolve_spec(spec)).targets
        target = gpu.default_target() if gpu.default_target() in listed else listed[0]
    kernel = build(spec, target, **(params or {}))
    loaded = load_spec(kernel.spec_path) if kernel.spec_path else None
    symbols = kernel.launch.size_symbols
    given = dict(shapes or {})
    unknown = sorted(set(given) - set(symbols))
    if unknown:
        raise LaunchError(f"{kernel.name}: unknown size(s) {', '.join(unknown)} (it takes: {', '.join(symbols)})")
    negative = [f"{k}={v}" for k, v in given.items() if isinstance(v, int) and v < 0]
    if negative:
        raise LaunchError(f"{kernel.name}: --shape {', '.join(negative)}: a size cannot be negative")
    on_hw = loaded.shapes if loaded else kernel.spec_shapes
    emulated = loaded.emulator_shapes if loaded and be == "emu" else {}
    symbols = [s for s in on_hw if s in symbols] + [s for s in symbols if s not in on_hw]   # the spec's order
    sizes = {}
    for s in symbols:
        for source in (given, emulated, on_hw):
            if s in source:
                sizes[s] = int(source[s])
                break
    missing = [s for s in symbols if s not in sizes]
    if missing:
        raise LaunchError(f"{kernel.name}: no size for {', '.join(missing)} (give --shape {missing[0]}=...)")
    grid = kernel.launch.grid_for(sizes, kernel.name)
    origin = size_origin(symbols, given, emulated, on_hw)
    return RunPlan(kernel, be, sizes, origin, grid, tuple(kernel.launch.block),
                   dict(loaded.tolerance) if loaded else {})


def execute(plan: RunPlan, *, scalars: dict | None = None, iters: int = 10, seed: int = 0) -> RunReport:
    """Run ``plan`` once on random inputs and check it against the reference; time it (module docstring)."""
    import torch
    kernel, be, sizes = plan.kernel, plan.backend, plan.sizes
    device = "cuda" if be == "hip" else "cpu"
    tolerance = output_tolerance(kernel, plan.tolerance)
    check_sizes(kernel, sizes, device, reduction=bool(tolerance.get("reduction")))
    tensors = random_inputs(kernel, sizes, device, seed)
    inputs = {n: t.clone() for n, t in tensors.items()}
    values = random_scalars(kernel, scalars or {}, seed)
    result = kernel.run(**tensors, **values, backend=be, timing=(be == "emu"))
    report = RunReport(kernel, be, sizes, result.grid, result.block, origin=plan.origin)
    stats = result.stats
    if be == "emu":
        report.time_ms = result.time_ms
        report.instructions = _instruction_count(stats)
    def evaluate(where: str) -> tuple[dict, dict, dict]:
        """The reference (and its magnitude and error bounds where the tolerance asks) on torch's ``where``
        device, returned on the CPU."""
        ins = inputs if where == "cpu" else {n: t.to(where) for n, t in inputs.items()}
        want = reference(kernel, ins, values, sizes)
        mag = bounds = {}
        if tolerance.get("reduction"):
            mag = magnitude(kernel, tolerance, ins, values, sizes)
        if tolerance.get("bound"):
            bounds = error_bounds(kernel, tolerance["bound"], ins, values, sizes)
        return tuple({n: t.cpu() for n, t in d.items()} for d in (want, mag, bounds))  # type: ignore[return-value]

    where = reference_device(be)
    t_ref = time.perf_counter()
    try:
        want, mag, bounds = evaluate(where)
    except Exception:       # noqa: BLE001 -- an expression that makes CPU tensors of its own, an op CUDA lacks
        if where == "cpu":
            raise
        where = "cpu"
        want, mag, bounds = evaluate(where)      # ... the same on the CPU (its errors are the spec's)
    report.reference_on, report.reference_s = where, time.perf_counter() - t_ref
    for t in kernel.launch.tensors:
        if t.written:
            report.checks.append(compare(t.name, tensors[t.name], want[t.name], t.dtype, tolerance, sizes,
                                         mag.get(t.name), bounds.get(t.name)))
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


def _abs(t):
    """``t.abs()``, in ``t``'s dtype; 8-bit floats by clearing their sign bit (the same value: CUDA torch
    has no abs for them)."""
    import torch
    if t.dtype.is_floating_point and t.element_size() == 1:
        return (t.view(torch.uint8) & 0x7F).view(t.dtype)
    return t.abs()


def reference_device(be: str) -> str:
    """torch's device for the reference of a run on backend ``be``: "cuda" on the emulator's cuda engine
    (``ISAGEN_EMU_DEVICE=cuda``) where torch has CUDA -- the same expression in float64, which at full
    problem sizes takes the CPU minutes (an 8192^3 block-scaled GEMM's einsums) -- else "cpu"."""
    if be != "emu" or os.environ.get("ISAGEN_EMU_DEVICE", "cpu").strip().lower() != "cuda":
        return "cpu"
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


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


def run_spec(spec, *, target: str | None = None, backend: str | None = None, params: dict | None = None,
             shapes: dict | None = None, scalars: dict | None = None, iters: int = 10, seed: int = 0) -> RunReport:
    """Build ``spec``, run it once on random inputs and check it; time it (see the module docstring)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise LaunchError(f"seed {seed!r}: expected an integer from 0 to 2**64-1 (torch's generator seed)")
    plan = plan_run(spec, target=target, backend=backend, params=params, shapes=shapes)
    return execute(plan, scalars=scalars, iters=iters, seed=seed)


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


def format_plan(p: RunPlan | RunReport) -> str:
    """The first line: kernel, target, backend, the sizes and where they come from, the grid."""
    k = p.kernel
    sizes = " ".join(f"{n}={v}" for n, v in p.sizes.items())
    origin = f" ({p.origin})" if p.origin else ""
    return f"{k.name} [{k.target}, {p.backend}] {sizes}{origin}: grid {p.grid} x block {p.block}"


def format_report(r: RunReport) -> list[str]:
    lines = [format_plan(r)]
    for c in r.checks:
        verdict = "PASS" if c.ok else f"FAIL ({c.mismatches} of {c.numel} elements outside tolerance)"
        growth = f" + {c.reduction}" if c.reduction else ""
        within = f"bound: {c.bound}" if c.bound else f"rtol {c.rtol:g}, atol {c.atol:g}{growth}"
        lines.append(f"  {c.name}: max abs err {c.max_abs:.3g}, max rel err {c.max_rel:.3g} ({within}) {verdict}")
    if r.backend == "hip" and r.time_ms is not None:
        lines.append(f"  time: {r.time_ms * 1e3:.1f} us on the device (median of hip events)")
    elif r.backend == "emu":
        count = f", {r.instructions} wave instructions executed" if r.instructions is not None else ""
        wall = f"{r.time_ms:.1f} ms" if r.time_ms is not None else "-"
        lines.append(f"  time: emulated in {wall} wall{count}")
    lines.append("PASS" if r.ok else "FAIL")
    return lines


# --------------------------------------------------------------------------- the CLI subcommand
# its one-line help is in cli.LAZY, listed without importing this module
@cmdline.command("run")
@argument("spec")
@option("-D", "defines", multiple=True, metavar="NAME=VALUE", help="override a spec parameter (repeatable)")
@option("--shape", multiple=True, metavar="NAME=SIZE",
              help="a run-time size, e.g. --shape n=4096 (default: the spec's shapes:, on the emulator its "
                   "emulator_shapes: where it has them)")
@option("--scalar", multiple=True, metavar="NAME=VALUE", help="a scalar argument (default: random)")
@option("--backend", type=Choice(tuple(BACKENDS)), default=None,
              help="default: $ISAGEN_BACKEND, else hip on a supported AMD GPU, else emu")
@option("--target", default=None, metavar="TARGET",
              help=f"{' or '.join(gpu.SUPPORTED_ARCHS)} (default: the GPU's, else {gpu.DEFAULT_TARGET})")
@option("--iters", type=IntRange(min=0), default=10, help="timed launches on hip (default 10)")
@option("--seed", type=IntRange(0, MAX_SEED), default=0, help="seed of the random inputs (0 to 2**64-1)")
def command(spec, defines, shape, scalar, backend, target, iters, seed) -> int:
    """Build SPEC (a spec file or the name of a bundled spec; cached), run it on random inputs of its
    shapes (hip on an AMD GPU, else the emulator, with the spec's emulator_shapes where it has them),
    compare with the spec's reference, time it.  The first line says which sizes and why.  Exit code 1
    on a mismatch.  An emulator run of more than a few seconds shows its progress (workgroups done,
    rate, ETA) on a terminal.  See docs/runtime.md."""
    path = resolve_spec(spec)
    loaded = load_spec(path, defines)                          # -D parsed by the declared types
    params = {k: loaded.params[k] for k in {o.split("=", 1)[0].strip() for o in defines}}
    sizes = parse_assignments(shape, "--shape", _int)
    values = parse_assignments(scalar, "--scalar", _number)
    plan = plan_run(path, target=target, backend=backend, params=params, shapes=sizes)
    print(format_plan(plan), flush=True)          # before the launch: a long emulation says what it runs
    # the emulator reports its progress to the bar, and on the CPU engine its estimate as a line up front
    with Progress("emulating", delay=SLOW_WORK_S, clock=True, unit="workgroups", notes=True):
        report = execute(plan, scalars=values, iters=iters, seed=seed)
    print("\n".join(format_report(report)[1:]))
    return 0 if report.ok else 1
