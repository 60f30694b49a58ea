"""Build a kernel once, launch it on torch tensors: ``isagen.build(spec, target=None, **params)``.

    import torch, isagen
    axpy = isagen.build("axpy_f32")              # a spec name from specs/, or a path to a .yaml
    x, y = torch.randn(4096), torch.randn(4096)
    axpy(x, y, alpha=2.0)                        # y = 2*x + y, on the GPU or in the emulator

``build`` loads the spec (keyword parameters override its ``params:`` exactly like ``-D name=value``),
generates the program, assembles it, and stores the code object with what a launch needs in the
on-disk cache (``isagen.objects.cache``); the next build of the same spec content, parameters, target, isagen
source and assembler (isagen's own by default, or LLVM) loads it from there without generating
anything.

The launch contract is the generator's ``launch(p, target) -> isagen.builders.contract.LaunchInfo`` (docs/specs.md,
"Launch contract"): tensors with their element types, shapes in size symbols and roles, scalars, which
tensor/scalar/size feeds each kernel argument, the grid as expressions over the sizes, the workgroup
size.  It is stored, resolved, in the cache entry next to the kernel argument layout.

``Kernel.__call__`` checks every tensor (dtype, shape, contiguity, device) and scalar, computes the
grid, packs the kernel arguments with the kernel's ``KernArgs`` and launches on the chosen backend
(``isagen.runtime.backends``: hip on an AMD GPU, the emulator elsewhere).
"""

from __future__ import annotations

import contextlib
import difflib
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from isagen import __version__
from isagen.builders.contract import LaunchInfo, evaluate, names_in
from isagen.builders.kernarg import ELEMENT_TYPES, KernArgs
from isagen.builders.spec import bundled_specs_dir, load_spec
from isagen.errors import IsagenError, LaunchError, SpecError
from isagen.objects import assembler as assemblers
from isagen.objects import cache, toolchain
from isagen.objects.cache import source_hash
from isagen.objects.emit import render_assembly
from isagen.progress import SLOW_WORK_S, Progress
from isagen.runtime import gpu
from isagen.runtime.backends import get_backend
from isagen.targets import DEFAULT_TARGET, Target, get_target

# isagen element type -> torch dtype name (fp8 formats differ per target: see torch_dtype)
_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64", "i32": "int32",
                 "u32": "uint32", "i8": "int8", "u8": "uint8", "i64": "int64", "u64": "uint64",
                 "i16": "int16", "u16": "uint16"}
_FP8 = {("fp8", "fnuz"): "float8_e4m3fnuz", ("bf8", "fnuz"): "float8_e5m2fnuz",
        ("fp8", "ocp"): "float8_e4m3fn", ("bf8", "ocp"): "float8_e5m2"}


def torch_dtype(dtype: str, target: str = DEFAULT_TARGET):
    """The torch dtype of an isagen element type on ``target`` (fp8/bf8: FNUZ on gfx942, OCP on gfx950)."""
    import torch
    if dtype in ("fp8", "bf8"):
        return getattr(torch, _FP8[(dtype, get_target(target).fp8_format)])
    if dtype not in _TORCH_DTYPES:
        raise SpecError(f"unknown element type '{dtype}' (known: {', '.join(ELEMENT_TYPES)})")
    return getattr(torch, _TORCH_DTYPES[dtype])


# --------------------------------------------------------------------------- the launch description
def layout_of(args: KernArgs) -> list[dict]:
    return [{"name": a.name, "kind": a.kind, "dtype": a.dtype, "offset": a.offset, "size": a.size,
             "access": a.access} for a in args]


def args_from_layout(layout: list[dict]) -> KernArgs:
    """Rebuild a ``KernArgs`` from its stored layout, checking every offset and size still agree."""
    args = KernArgs()
    for a in layout:
        arg = (args.pointer(a["name"], a["dtype"], a["access"]) if a["kind"] == "pointer"
               else args.value(a["name"], a["dtype"]))
        if (arg.offset, arg.size) != (a["offset"], a["size"]):
            raise LaunchError(f"kernel argument '{a['name']}': stored layout (offset {a['offset']}, size {a['size']}) "
                              f"disagrees with isagen's (offset {arg.offset}, size {arg.size})")
    return args


@dataclass
class RunResult:
    """What ``Kernel.run`` returns: the outputs and how the launch went."""

    outputs: tuple
    backend: str
    grid: tuple
    block: tuple
    time_ms: float | None = None        # device time (hip) or emulator wall time (emu), when timed
    stats: object = None                # the emulator's counters (emu only)


# --------------------------------------------------------------------------- the built kernel
class Kernel:
    """A built kernel: its code object and everything a launch needs.  Call it on tensors."""

    def __init__(self, *, name: str, target: str, code_object: bytes, assembly: str, args: KernArgs,
                 launch: LaunchInfo, params: dict | None = None, spec_shapes: dict | None = None,
                 reference: str | None = None, key: str = "", path=None, spec_path: str | None = None):
        self.name = name                  # the spec's name: the kernel symbol and the op name
        self.symbol = name
        self.target = target
        self.code_object = code_object
        self.assembly = assembly
        self.args = args
        self.launch = launch
        self.params = dict(params or {})
        self.spec_shapes = dict(spec_shapes or {})   # default run-time sizes (isagen run)
        self.reference = reference                    # the spec's torch expression
        self.key = key
        self.path = path                              # the cache entry directory
        self.spec_path = spec_path
        self._check_contract()

    def _check_contract(self):
        """The launch contract and the kernel arguments must agree (a generator bug otherwise)."""
        sizes = set(self.launch.size_symbols) | set(self.launch.constants)
        for a in self.args:
            kind, src = self.launch.source_of(a.name)
            where = f"{self.name}: kernel argument '{a.name}'"
            if kind == "tensor":
                t = next(t for t in self.launch.tensors if t.name == src)
                if a.kind != "pointer":
                    raise SpecError(f"{where} is a {a.dtype} value but the launch contract feeds it tensor '{src}'")
                if a.dtype != t.dtype:
                    raise SpecError(f"{where} points to {a.dtype} but tensor '{src}' is {t.dtype}")
            elif a.kind == "pointer":
                raise SpecError(f"{where} is a pointer but no tensor of the launch contract feeds it")
            elif kind == "size":
                unknown = names_in(src) - sizes
                if unknown:
                    raise SpecError(f"{where} is fed '{src}', but {', '.join(sorted(unknown))} is neither a tensor, "
                                    f"a scalar nor a size of the launch contract")

    def __repr__(self):
        sig = ", ".join([f"{t.name}: {t.dtype}[{', '.join(map(str, t.shape))}]" for t in self.launch.tensors] +
                        [f"{s.name}: {s.dtype}" for s in self.launch.scalars])
        return f"<isagen.Kernel {self.name}({sig}) for {self.target}>"

    @property
    def tensors(self):
        return self.launch.tensors

    @property
    def scalars(self):
        return self.launch.scalars

    # ------------------------------------------------------------------ binding and validation
    def bind(self, tensors: tuple, scalars: dict, backend=None):
        """Check a call's arguments; return (tensors by name, kernel argument values, sizes)."""
        import torch
        info = self.launch
        if len(tensors) > len(info.tensors):
            raise LaunchError(f"{self.name} takes {len(info.tensors)} tensor(s) "
                              f"({', '.join(t.name for t in info.tensors)}), got {len(tensors)}")
        bound = dict(zip((t.name for t in info.tensors), tensors))
        for t in info.tensors:
            if t.name in scalars:
                if t.name in bound:
                    raise LaunchError(f"{self.name}: tensor '{t.name}' given twice (by position and by name)")
                bound[t.name] = scalars.pop(t.name)
        missing = [t.name for t in info.tensors if t.name not in bound]
        if missing:
            raise LaunchError(f"{self.name}: missing tensor argument(s): {', '.join(missing)}")
        scalar_names = [s.name for s in info.scalars]
        unknown = sorted(set(scalars) - set(scalar_names))
        if unknown:
            raise LaunchError(f"{self.name}: unknown argument(s) {', '.join(unknown)} "
                              f"(scalars: {', '.join(scalar_names) or 'none'})")
        scalar_values = {}
        for s in info.scalars:
            if s.name in scalars:
                if isinstance(scalars[s.name], torch.Tensor):
                    raise LaunchError(f"{self.name}: scalar '{s.name}' ({s.dtype}) must be a Python number, "
                                      f"got a torch.Tensor (pass .item())")
                scalar_values[s.name] = scalars[s.name]
                problem = s.problem(scalars[s.name])
                if problem:
                    raise LaunchError(f"{self.name}: scalar '{s.name}' {problem}")
            elif s.default is not None:
                scalar_values[s.name] = s.default
            else:
                raise LaunchError(f"{self.name}: missing scalar argument '{s.name}' ({s.dtype})")

        sizes: dict[str, int] = {}
        device = None
        for tp in info.tensors:
            t = bound[tp.name]
            if not isinstance(t, torch.Tensor):
                raise LaunchError(f"{self.name}: argument '{tp.name}' must be a torch.Tensor, got {type(t).__name__}")
            # the kernel reads and writes dense row-major memory: a nested or sparse tensor's storage is
            # not its logical elements (and asking a sparse tensor for its strides raises)
            if t.is_nested:
                raise LaunchError(f"{self.name}: tensor '{tp.name}' is a nested tensor; pass a dense tensor "
                                  f"(for example .to_padded_tensor(0))")
            if t.layout != torch.strided:
                raise LaunchError(f"{self.name}: tensor '{tp.name}' has layout {t.layout}; the kernel takes a "
                                  f"dense tensor (pass .to_dense())")
            want = torch_dtype(tp.dtype, self.target)
            if t.dtype != want:
                fp8 = (f" (the {tp.dtype} format of {self.target})" if tp.dtype in ("fp8", "bf8") else "")
                raise LaunchError(f"{self.name}: tensor '{tp.name}' has dtype {t.dtype}, expected {want}{fp8}")
            if tp.fill == "positive" and t.device.type == "cpu" and t.numel():
                # a scale: checked where reading it costs nothing (a GPU tensor is not read back, see
                # docs/kernels.md for what the kernel does with a bad one)
                bad = ~(torch.isfinite(t) & (t > 0))
                if bool(bad.any()):
                    raise LaunchError(f"{self.name}: tensor '{tp.name}' must hold finite positive values, got "
                                      f"{t.reshape(-1)[bad.reshape(-1)][0].item()!r}")
            if t.dim() != len(tp.shape):
                raise LaunchError(f"{self.name}: tensor '{tp.name}' has shape {tuple(t.shape)}, expected "
                                  f"{len(tp.shape)} dimension(s) [{', '.join(map(str, tp.shape))}]")
            for axis, (dim, got) in enumerate(zip(tp.shape, t.shape)):
                if isinstance(dim, int):
                    if got != dim:
                        raise LaunchError(f"{self.name}: tensor '{tp.name}' has size {got} in dimension {axis}, "
                                          f"expected {dim}")
                elif dim in sizes and sizes[dim] != got:
                    first = next(o.name for o in info.tensors if dim in o.shape)
                    raise LaunchError(f"{self.name}: tensor '{tp.name}' has shape {tuple(t.shape)} ({dim}={got}), "
                                      f"but tensor '{first}' has {dim}={sizes[dim]}")
                else:
                    sizes[dim] = int(got)
            if not t.is_contiguous():
                raise LaunchError(f"{self.name}: tensor '{tp.name}' is not contiguous (shape {tuple(t.shape)}, "
                                  f"strides {t.stride()}); pass .contiguous()")
            if backend is not None:
                backend.check_device(tp.name, t)
            if device is None:
                device = t.device
            elif t.device != device:
                raise LaunchError(f"{self.name}: tensor '{tp.name}' is on {t.device} but "
                                  f"'{info.tensors[0].name}' is on {device}")

        env = {**info.constants, **sizes}
        values = {}
        for a in self.args:
            kind, src = info.source_of(a.name)
            if kind == "tensor":
                values[a.name] = bound[src]
            elif kind == "scalar":
                values[a.name] = scalar_values[src]
            else:
                values[a.name] = evaluate(src, env, f"{self.name}: kernel argument '{a.name}'")
        # convert every value now, so a bad scalar is reported before anything runs
        try:
            self.args.pack(**{k: (0 if info.source_of(k)[0] == "tensor" else v) for k, v in values.items()})
        except LaunchError as e:
            raise LaunchError(f"{self.name}: {e}") from None
        return bound, values, sizes

    # ------------------------------------------------------------------ launching
    def run(self, *tensors, backend: str | None = None, timing: bool = False, progress: bool = False,
            **scalars) -> RunResult:
        """Launch on ``backend`` (default: ``ISAGEN_BACKEND``, else hip on a supported AMD GPU, else the
        emulator) and report how it went.  ``progress=True``: an emulator launch that takes more than
        two seconds shows its workgroups done, rate and ETA on stderr (a bar on a terminal, a line every
        few seconds elsewhere); a hip launch is over before there is anything to show."""
        be = get_backend(backend)
        bound, values, sizes = self.bind(tensors, dict(scalars), be)
        grid = self.launch.grid_for(sizes, self.name)
        return self._launch(be, bound, values, grid, [t.name for t in self.launch.tensors if t.written],
                            timing=timing, progress=progress)

    def launch_with(self, tensors: dict, values: dict, grid, outputs, *, backend: str | None = None,
                    timing: bool = False, progress: bool = False) -> RunResult:
        """Launch with kernel argument values the caller computed, for front ends that take more than
        the launch contract describes (``isagen.runtime.attention``: strided views, varlen batches).

        ``tensors``: name -> tensor, each contiguous (the emulator copies its bytes); ``values``: every
        kernel argument by name, a tensor of ``tensors`` for a pointer; ``outputs``: the names of the
        tensors the kernel writes.  The contract's shapes and grid rule are not consulted: the caller
        answers for them.  The tensors' devices and the values' types and ranges are checked here, as
        ``run`` checks its own."""
        be = get_backend(backend)
        for name, t in tensors.items():
            be.check_device(name, t)
        try:
            self.args.pack(**{k: (0 if hasattr(v, "data_ptr") else v) for k, v in values.items()})
        except LaunchError as e:
            raise LaunchError(f"{self.name}: {e}") from None
        return self._launch(be, tensors, values, tuple(grid), list(outputs), timing=timing, progress=progress)

    def _launch(self, be, tensors: dict, values: dict, grid: tuple, outputs: list, *, timing: bool,
                progress: bool) -> RunResult:
        block = self.launch.block
        time_ms = stats = None
        if all(grid):                        # an empty problem launches nothing
            # the emulator reports its workgroups to the innermost open Progress (isagen/progress.py);
            # without the opt-in none is opened here, so that a caller's (the CLI's) still gets them
            watch = (Progress(f"emulating {self.name}", delay=SLOW_WORK_S, clock=True, unit="workgroups",
                              lines=True) if progress else contextlib.nullcontext())
            with watch:
                time_ms = be.run(self, tensors, values, grid, block, timing=timing, outputs=outputs)
            stats = getattr(be, "last_stats", None)
        return RunResult(tuple(tensors[n] for n in outputs), be.name, grid, block, time_ms, stats)

    def __call__(self, *tensors, **scalars):
        """Launch on the default backend; returns the output tensor (or a tuple of them), written in place."""
        outputs = self.run(*tensors, **scalars).outputs
        return outputs[0] if len(outputs) == 1 else outputs


# --------------------------------------------------------------------------- building
def resolve_spec(spec) -> Path:
    """A spec path, or the name of a bundled spec (its file stem or its ``name:``)."""
    p = Path(spec)
    if p.suffix in (".yaml", ".yml") or p.exists() or "/" in str(spec):
        if not p.is_file():
            raise SpecError(f"{spec}: no such spec file")
        return p
    specs = bundled_specs_dir()
    for cand in (specs / f"{spec}.yaml", specs / f"{spec}.yml"):
        if cand.is_file():
            return cand
    files = sorted(specs.glob("*.yaml")) if specs.is_dir() else []
    for f in files:                      # a spec whose name: differs from its file name
        try:
            if (yaml.safe_load(f.read_text()) or {}).get("name") == spec:
                return f
        except Exception:    # noqa: BLE001 -- a broken neighbour must not hide the answer
            continue
    names = [f.stem for f in files]
    near = difflib.get_close_matches(str(spec), names, n=1)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    raise SpecError(f"unknown spec '{spec}'{hint}; bundled specs: {', '.join(names) or 'none'}")


def _override_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def build(spec, target: str | None = None, *, force: bool = False, use_cache: bool = True,
          assembler: str | None = None, **params) -> Kernel:
    """Build (or load from the cache) the kernel of ``spec`` for ``target``.

    ``spec``: a path to a spec .yaml or a bundled spec's name.  ``target``: gfx942 or gfx950, default the
    current AMD GPU's architecture, else gfx942.  ``assembler``: ``"isagen"`` (in process, no LLVM
    needed; the default, or ``$ISAGEN_ASSEMBLER``) or ``"llvm"`` (``isagen.objects.assembler.code_object``).
    ``params`` override the spec's parameters."""
    if not isinstance(spec, (str, os.PathLike)):
        raise SpecError(f"isagen.build: spec must be a spec name or a path to a .yaml file, "
                        f"got {type(spec).__name__} {spec!r:.60}")
    if target is not None and not isinstance(target, (str, Target)):
        raise SpecError(f"isagen.build: target must be a target name such as {DEFAULT_TARGET}, "
                        f"got {type(target).__name__} {target!r:.60}")
    path = resolve_spec(spec)
    overrides = [f"{k}={_override_text(v)}" for k, v in params.items()]
    s = load_spec(path, overrides)
    tgt = s.select_targets(target if target else gpu.default_target())[0]
    assembler = assemblers.check_assembler(assembler) if assembler else assemblers.default_assembler()
    # the in-process assembler is part of isagen's source (source_hash); LLVM's version is named
    tc = toolchain.find_toolchain(tgt.name) if assembler == "llvm" else None
    key = cache.cache_key(spec=path.read_text(), params=dict(s.params),
                          target=tgt.target_id, isagen=__version__, source=source_hash(),
                          assembler=assembler, toolchain=tc.describe() if tc else "isagen", force=force)
    hit = cache.load(s.name, key) if use_cache else None
    if hit is not None:
        entry, co, asm = hit
        try:
            return _kernel_from_entry(entry, co, asm, key, cache.entry_dir(s.name, key), str(path))
        except (IsagenError, KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            # an entry whose digest holds but whose fields this isagen cannot use: rebuild it, never
            # fail on it (a build from scratch reports its own errors plainly)
            cache.discard(s.name, key, f"{e.__class__.__name__}: {e}")

    program = s.build(tgt, force=force)
    launch = s.launch_info(tgt)
    if tuple(launch.block) != tuple(program.workgroup_size):
        raise SpecError(f"{path}: the launch contract's workgroup size {tuple(launch.block)} is not the kernel's "
                        f"{tuple(program.workgroup_size)}")
    asm = render_assembly(program)
    co, made_by = assemblers.code_object(program, assembler=assembler, asm_text=asm, toolchain=tc)
    entry = {
        "name": s.name, "target": tgt.name, "generator": s.kernel, "params": dict(s.params),
        "kernargs": layout_of(program.args), "kernarg_segment_size": program.args.segment_size,
        "workgroup_size": list(program.workgroup_size), "lds_bytes": program.lds_bytes,
        "launch": launch.to_json(), "shapes": dict(s.shapes), "reference": s.reference,
        "isagen": __version__, "spec": str(path),
        "toolchain": ("isagen (in process)" if made_by == "isagen"
                      else (tc or toolchain.find_toolchain(tgt.name)).describe()),
    }
    where = cache.store(s.name, key, entry, co, asm) if use_cache else None
    return _kernel_from_entry(entry, co, asm, key, where, str(path))


def _kernel_from_entry(entry: dict, co: bytes, asm: str, key: str, path, spec_path: str) -> Kernel:
    args = args_from_layout(entry["kernargs"])
    if args.segment_size != entry["kernarg_segment_size"]:
        raise LaunchError(f"{entry['name']}: stored kernarg segment size {entry['kernarg_segment_size']} "
                          f"disagrees with the layout's {args.segment_size}")
    return Kernel(name=entry["name"], target=entry["target"], code_object=co, assembly=asm, args=args,
                  launch=LaunchInfo.from_json(entry["launch"]), params=entry["params"],
                  spec_shapes=entry["shapes"], reference=entry["reference"], key=key, path=path,
                  spec_path=spec_path)
