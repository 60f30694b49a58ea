"""The ``isagen`` command line (installed as ``isagen.cli``; ``python -m isagen`` runs it), on
``isagen.cmdline`` (a small parser of the standard library's parts; no click, no argparse).

    isagen gen SPEC.yaml [SPEC2.yaml ...] [--target TARGET|all] [-o DIR] [-D name=value ...]
               [--force] [--asm-only] [--assembler isagen|llvm] [-j N]
    isagen list [SPEC_OR_DIR ...]      specs (default: the bundled ones) and the generators' parameters
    isagen targets                     the target table: registers, LDS, CUs, clocks, peaks, MFMAs
    isagen toolchain                   which LLVM assembles each target, and why
    isagen disasm FILE.co [--kernel K] disassemble a code object with isagen's decoder
    isagen demo                        generate, assemble, inspect and run the fp32 axpy kernel
    isagen run SPEC [-D name=value ...] [--shape n=4096] [--backend hip|emu] [--target TARGET]
                                       run on random inputs, check against the spec's torch reference
                                       (the command is defined in isagen/runtime/run.py)
    isagen report SPEC.yaml|FILE.co [--target T] [--kernel K] [--format text|json|html|png] [-o FILE]
                                       register pressure, liveness and occupancy (docs/report.md;
                                       the command is defined in isagen/report/command.py)
    isagen model FILE.co --shape M,N,K [--machine mi355x] [--timeline FILE.png]
                                       predicted run time, limiter and stalls per SIMD (a model, not
                                       a measurement; isagen/model/command.py, docs/model.md)

Every user mistake is one line on stderr, ``isagen: error: ...``, with exit code 2: an
``IsagenError`` from the work, and the parser's usage errors (unknown option or command, a bad or
missing value) alike; there is no traceback for one.  See docs/cli.md.

Only what every command needs is imported at the top; the builders (and numpy with them), the
runtime and emulator, the report, the decoder and torch are imported where they are used, and ``run``,
``report`` and ``model`` are loaded on first use (``LAZY``): an ``isagen gen`` whose builds are all
in the cache imports no builder at all (issue 17: whole-process speed; bench/gen_speed.py measures it).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys
import time
import warnings
from pathlib import Path
from typing import NoReturn

from isagen import __version__
from isagen.cmdline import Choice, Group, IntRange, UsageError, argument, complete, option
from isagen.errors import IsagenError, SpecError
from isagen.objects.assembler import (
    ASSEMBLERS,
    AssemblerFallbackWarning,
    code_object,
    default_assembler,
    toolchain_report,
)
from isagen.progress import SLOW_WORK_S, Progress
from isagen.targets import DEFAULT_TARGET, TARGETS, Target, get_target

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
TARGET_NAMES = ", ".join(TARGETS)
#: the environment variable of a shell completion request (docs/cli.md, "Shell completion")
COMPLETE_VAR = "_ISAGEN_COMPLETE"
#: commands defined with the code they drive, imported when used: name -> (module, one-line help)
LAZY = {
    "run": ("isagen.runtime.run", "run a spec's kernel on random inputs and check it against its torch reference"),
    "report": ("isagen.report.command",
               "register pressure, liveness and occupancy of a spec's kernel or any code object"),
    "model": ("isagen.model.command",
              "predict a kernel's run time on an AMD Instinct GPU (a model, never a measurement)"),
}

cli = Group("isagen", help=f"Generate raw AMD CDNA ({TARGET_NAMES}) assembly for AI kernels from YAML specs.",
            version=__version__, lazy=LAZY)


def main(argv=None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit code.  Errors of
    the work become exit codes here, the same for every command."""
    instruction = os.environ.get(COMPLETE_VAR)
    if instruction:                            # the shell asks for completions (or for its script)
        return complete(cli, instruction, "isagen", COMPLETE_VAR)
    try:
        rv = cli.run(sys.argv[1:] if argv is None else argv)
    except UsageError as e:                    # an unknown option or command, a bad or missing value
        print(_error_line(e.line("isagen")), file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    except IsagenError as e:
        _error(e)
        return e.exit_code
    except KeyboardInterrupt:
        print("isagen: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:                    # `isagen list | head`
        sys.stderr.close()
        return 0
    return rv if isinstance(rv, int) else 0    # --help and --version give 0; every command an int


def run() -> NoReturn:
    """The ``isagen`` console script and ``python -m isagen``: ``main`` on ``sys.argv``, then
    ``exit_now`` (in-process callers, the tests among them, call ``main`` and get the exit code)."""
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once the command is done, skipping the interpreter's teardown
    (freeing every module and object one by one: ~25 ms of a ~200 ms ``isagen gen``, issue 17).
    What a normal exit does that matters is done first: the ``atexit`` functions run and stdout and
    stderr are flushed.  With another thread still running, the ordinary exit (which waits for it)."""
    import atexit
    import threading
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):       # a closed pipe or stream: what the ordinary exit would hit
        sys.exit(code)
    os._exit(code)


def _error(e) -> None:
    print(_error_line(e), file=sys.stderr, flush=True)


def _error_line(e) -> str:
    text = " ".join(str(e).split("\n"))
    return f"isagen: error: {text}"


# --------------------------------------------------------------------------- gen
def resources_line(program) -> str:
    """One line: register use, LDS and occupancy of a built program."""
    occ = program.occupancy()
    return (f"{program.vgprs} VGPRs, {program.agprs} AGPRs, {program.sgprs} SGPRs, LDS {program.lds_bytes} B; "
            f"occupancy {occ['waves_per_simd']} wave{'s' if occ['waves_per_simd'] != 1 else ''}/SIMD "
            f"(limited by {occ['limited_by']})")


@cli.command("gen", short_help="generate .s and .co files from specs")
@argument("specs", nargs=-1, required=True, metavar="SPEC...")
@option("--target", "-t", default="all", metavar="TARGET",
              help=f"{TARGET_NAMES} or all (default: every target the spec lists)")
@option("-o", "--out-dir", default="out", metavar="DIR", help="output directory (default: out/)")
@option("-D", "defines", multiple=True, metavar="NAME=VALUE",
              help="override a spec parameter (parsed per its declared type); repeatable")
@option("--force", is_flag=True, help="emit kernels the generator rejects (the reason goes in the .s header)")
@option("--asm-only", is_flag=True, help="write the .s only (no assembler needed)")
@option("--assembler", type=Choice(ASSEMBLERS), default=None,
              help="isagen: encode and write the .co in process (default; no LLVM needed); llvm: assemble the "
                   ".s with LLVM (see `isagen toolchain`); default $ISAGEN_ASSEMBLER, else isagen")
@option("-j", "--jobs", "jobs_n", type=IntRange(min=1), default=None, metavar="N",
              help="build in N processes (default: one per CPU core)")
@option("--cache/--no-cache", "use_cache", default=True,
              help="reuse the .s/.co of an unchanged build from isagen's cache (default; see docs/cli.md): the "
                   "key is the spec file, -D, the target and flags, isagen's version and source, and the packages "
                   "that shape the bytes")
def gen(specs, target, out_dir, defines, force, asm_only, assembler, jobs_n, use_cache) -> int:
    """Build each SPEC (a .yaml file, or a directory of them) for its targets: DIR/<kernel>.<target>.s
    and .co, several at a time across the CPU cores (-j).  On a terminal, a build of several shows a
    progress bar on stderr; piped, one line per build, in order."""
    assembler = assembler or default_assembler()
    if target != "all":
        get_target(target)                          # unknown target: one error before anything is read
    gen_key = _GenKey(tuple(defines), target, force, asm_only) if use_cache and assembler == "isagen" else None
    if gen_key is not None:
        hits = _all_cached(specs, gen_key)
        if hits is not None:                        # every build in the cache: nothing to load or build
            out = _output_dir(out_dir)
            tasks = [_GenTask(path, tuple(defines), t, force, asm_only, str(out), assembler, key)
                     for _, t, path, key in hits]
            return _gen_report([(name, t) for name, t, _, _ in hits], tasks, 1, asm_only, out)
    from isagen.builders.spec import load_specs, parse_overrides
    overrides = parse_overrides(defines)
    loaded = load_specs(specs, overrides)
    _check_unique(loaded)

    jobs = []
    for spec in loaded:
        if target != "all" and target.split(":")[0] not in spec.targets and len(loaded) > 1:
            print(f"skip {spec.name}: the spec lists {', '.join(spec.targets)}, not {target}")
            continue
        jobs += [(spec, t) for t in spec.select_targets(target)]
    if not jobs:
        raise SpecError(f"no spec lists target {target}")
    problems = []                                   # parameter rules: reported once per spec, before building
    for spec, t in jobs:
        try:
            spec.validate(t)
        except IsagenError as e:
            if str(e) not in problems:
                problems.append(str(e))
    for problem in problems:
        _error(problem)
    if problems:
        return EXIT_USER_ERROR

    out = _output_dir(out_dir)
    workers = max(1, min(jobs_n or os.cpu_count() or 1, len(jobs)))
    manifests = {spec.path: _manifest_key(spec, gen_key) for spec in loaded} if gen_key else {}
    tasks = []
    for spec, t in jobs:
        mkey = manifests.get(spec.path)
        tasks.append(_GenTask(str(spec.path), tuple(defines), t.name, force, asm_only, str(out), assembler,
                              _build_key(mkey, t.name) if mkey else None, t))
    rc = _gen_report([(spec.name, t.name) for spec, t in jobs], tasks, workers, asm_only, out)
    if manifests:
        from isagen.objects import cache
    for spec in loaded:                  # a spec all of whose builds are in the cache: remember its list
        mkey = manifests.get(spec.path)
        names = [t.name for s, t in jobs if s is spec]
        if mkey and names and all(cache.entry_dir("gen", _build_key(mkey, n)).is_dir() for n in names):
            cache.store("gen", mkey, {"name": spec.name, "targets": names}, b"", "", durable=False)
    return rc


def _gen_report(jobs: list[tuple[str, str]], tasks: list[_GenTask], workers: int, asm_only: bool, out: Path) -> int:
    """Run the builds (or take them from the cache) and print a line for each, then the summary."""
    failures, written, cached, start = 0, 0, 0, time.perf_counter()
    with _imports_frozen(), Progress("building", total=len(jobs), enabled=len(jobs) > 1) as progress, \
            _gen_results(tasks, workers) as results:
        # results come in the order of the jobs (a pool builds ahead); each build's line: "[i/n] name
        # target … " and its outcome; above a bar the line is printed whole (the bar shows what is next)
        for i, ((spec_name, t_name), r) in enumerate(zip(jobs, results), 1):
            head = f"[{i}/{len(jobs)}] {spec_name} {t_name} … "
            if progress.shown:
                progress.update(i - 1, status=f"{spec_name} {t_name}")
            elif workers == 1:
                print(head, end="", flush=True)
            if workers == 1:
                r = r()                               # serial: build now, with the head already shown
            written += r.written
            cached += r.cached
            for w in r.warnings:
                progress.echo(w, file=sys.stderr)
            progress.advance()
            tail = ("FAILED" if r.error else
                    f"ok {r.seconds:.2f} s{' (REJECTED: emitted with --force)' if r.rejected else ''} · {r.resources}"
                    f"{' · from the cache' if r.cached else ''}")
            progress.echo(head + tail if progress.shown or workers > 1 else tail)
            if r.error:
                failures += 1
                progress.echo(_error_line(r.error), file=sys.stderr)
            elif r.rejected:
                progress.echo(f"    rejected: {r.rejected}")
    elapsed = time.perf_counter() - start
    kinds = ".s" if asm_only else ".s and .co"
    if failures:
        print(f"{len(jobs) - failures} of {len(jobs)} builds succeeded; {written} files in {out}/ ({elapsed:.1f} s)")
        if len(jobs) > 1:
            _error(f"{failures} of {len(jobs)} builds failed")
        return EXIT_USER_ERROR
    reused = f"; {cached} of {len(jobs)} builds from the cache (--no-cache builds them)" if cached else ""
    print(f"wrote {written} files ({kinds}) to {out}/ in {elapsed:.1f} s{reused}")
    return 0


@contextlib.contextmanager
def _imports_frozen():
    """While the builds run, the cyclic collector does not run by itself (builds leave no cycles to
    speak of: everything they make is freed by reference counting when the build's files are
    written), and what is loaded already (modules, ISA tables, specs) is left out of its scans
    (``gc.freeze``; forked workers inherit both).  ``_gen_one`` collects when many objects have
    stayed alive since the last collection.  At the end, what the builds left alive (ISA definitions
    made on first use, memos) joins the oldest generation with the rest (``gc.freeze`` then
    ``gc.unfreeze``) rather than staying in the youngest, whose next collection, at the first
    allocations after, would walk it all (~11 ms after a GEMM build, issue 17)."""
    was_enabled = gc.isenabled()
    gc.disable()
    gc.freeze()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if was_enabled:
            gc.enable()


# _GenTask, _GenKey and _GenResult are plain classes, not dataclasses: each dataclass costs ~0.7 ms
# of every process's start (its methods are generated and compiled then; issue 17)

class _GenTask:
    """One build of ``isagen gen``: what a worker process needs (a path and strings, not a loaded spec).
    ``cache_key``: where its result is kept in the cache (None: not cached); ``target_obj``: the
    Target, None for a build the cache holds (its name is enough then)."""

    __slots__ = ("spec_path", "defines", "target", "force", "asm_only", "out_dir", "assembler", "cache_key",
                 "target_obj")

    def __init__(self, spec_path: str, defines: tuple[str, ...], target: str, force: bool, asm_only: bool,
                 out_dir: str, assembler: str, cache_key: str | None = None, target_obj: Target | None = None):
        self.spec_path = spec_path
        self.defines = defines
        self.target = target
        self.force = force
        self.asm_only = asm_only
        self.out_dir = out_dir
        self.assembler = assembler
        self.cache_key = cache_key
        self.target_obj = target_obj


class _GenKey:
    """What, besides the spec file and isagen itself, decides the outputs of an ``isagen gen``."""

    __slots__ = ("defines", "target", "force", "asm_only")

    def __init__(self, defines: tuple[str, ...], target: str, force: bool, asm_only: bool):
        self.defines = defines
        self.target = target
        self.force = force
        self.asm_only = asm_only


def _spec_files(paths) -> list[Path] | None:
    """The spec files ``isagen gen PATHS`` reads, as load_specs lists them; None where that would be
    an error (load_specs then reports it)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml"))
            if not found:
                return None
            files += found
        else:
            files.append(p)
    return files


def _manifest_key(spec_or_path, gk: _GenKey, text: str | None = None) -> str | None:
    """The cache key of a spec file's build list under ``gk``: the file's text and resolved path,
    ``-D``, ``--target``, ``--force``, ``--asm-only``, isagen's version and source, the packages that
    shape the bytes and Python's version.  The spec's parameters follow from these (the generators'
    defaults are isagen's source), so no spec needs loading to look a build up.  None (not cached)
    for a spec whose generator lives outside the isagen package (a plug-in's or a test's code is
    not in ``source_hash``)."""
    from isagen.objects import cache
    if not isinstance(spec_or_path, (str, Path)):
        spec = spec_or_path
        source = Path(spec.generator.source or "/").resolve()
        roots = (cache.package_root(), (cache.package_root() / "kernels").resolve())
        if not any(source.is_relative_to(r) for r in roots):
            return None
        path = Path(spec.path)
    else:
        path = Path(spec_or_path)
    try:
        text = path.read_text() if text is None else text
    except (OSError, UnicodeDecodeError):
        return None
    return cache.cache_key(kind="gen", spec=text, spec_path=str(path.resolve()), defines=list(gk.defines),
                           target=gk.target, force=gk.force, asm_only=gk.asm_only, isagen=__version__,
                           source=cache.source_hash(), packages=cache.dependency_versions(),
                           python=list(sys.version_info[:2]))


def _build_key(manifest_key: str, target_name: str) -> str:
    from isagen.objects import cache
    return cache.cache_key(kind="gen-build", manifest=manifest_key, target=target_name)


def _all_cached(paths, gk: _GenKey) -> list[tuple[str, str, str, str]] | None:
    """``[(spec name, target name, spec path, build key)]`` when the cache holds every build ``isagen gen PATHS``
    would make (checked, not loaded), else None (then the specs are loaded and built as usual)."""
    from isagen.objects import cache
    files = _spec_files(paths)
    if not files:
        return None
    out, names = [], set()
    for f in files:
        mkey = _manifest_key(f, gk)
        if mkey is None:
            return None
        hit = cache.load("gen", mkey)
        if hit is None:
            return None
        entry = hit[0]
        name, targets = entry.get("name"), entry.get("targets")
        if not isinstance(name, str) or not isinstance(targets, list) or not targets or name in names:
            return None                             # (two specs of one name: load_specs reports it)
        names.add(name)
        for t in targets:
            key = _build_key(mkey, t)
            if not cache.entry_dir("gen", key).is_dir():
                return None
            out.append((name, t, str(f), key))
    return out


class _GenResult:
    """What one build did, filled in as it goes (sent back from a pool's worker)."""

    __slots__ = ("cached", "written", "seconds", "resources", "rejected", "error", "warnings")

    def __init__(self) -> None:
        self.cached = False
        self.written = 0
        self.seconds = 0.0
        self.resources = ""
        self.rejected: str | None = None
        self.error: str | None = None
        self.warnings: tuple[str, ...] = ()


def _gen_one(task: _GenTask) -> _GenResult:
    """Build one spec for one target and write its .s (and .co): in this process or a pool's worker.
    An ``IsagenError`` is the result's ``error``; the assembler's fallback warnings are returned as
    lines, so that the parent prints them in order.  A build the cache holds is copied from it."""
    t0 = time.perf_counter()
    result = _GenResult()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AssemblerFallbackWarning)
        try:
            hit = _from_cache(task, result) if task.cache_key else False
            if not hit:
                _gen_build(task, result)
        except IsagenError as e:
            result.error = str(e)
    result.warnings = tuple(f"isagen: warning: {w.message}" for w in caught
                            if issubclass(w.category, AssemblerFallbackWarning))
    for w in caught:                                   # anything else: as it would have been shown
        if not issubclass(w.category, AssemblerFallbackWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    result.seconds = time.perf_counter() - t0
    if not gc.isenabled() and gc.get_count()[0] > GC_EVERY:
        gc.collect()
    return result


#: with the collector paused, collect after a build when this many more objects were made than freed
#: (a build frees what it made when its files are written, so this stays rare)
GC_EVERY = 200_000


def _from_cache(task: _GenTask, result: _GenResult) -> bool:
    """Write the files of a build the cache holds; False when it holds none (or a corrupt one,
    which cache.load reports and removes)."""
    from isagen.objects import cache
    assert task.cache_key is not None
    hit = cache.load("gen", task.cache_key)
    if hit is None:
        return False
    entry, co, asm = hit
    stem = Path(task.out_dir) / f"{entry['name']}.{task.target}"
    _write(stem.with_name(stem.name + ".s"), asm.encode())
    result.written += 1
    if not task.asm_only:
        _write(stem.with_name(stem.name + ".co"), co)
        result.written += 1
    result.resources, result.rejected, result.cached = entry["resources"], entry["rejected"], True
    return True


def _gen_build(task: _GenTask, result: _GenResult) -> None:
    """Build, write the files and (with a key, when LLVM was not needed) store them in the cache."""
    from isagen.builders.spec import load_spec
    from isagen.objects.emit import render_assembly
    spec = load_spec(task.spec_path, task.defines)
    target = task.target_obj or task.target
    program = spec.build(target, force=task.force)
    asm = render_assembly(program)
    stem = Path(task.out_dir) / f"{spec.name}.{program.target.name}"
    _write(stem.with_name(stem.name + ".s"), asm.encode())
    result.written += 1
    made_by = "isagen"
    co = b""
    if not task.asm_only:
        co, made_by = code_object(program, assembler=task.assembler, asm_text=asm)
        _write(stem.with_name(stem.name + ".co"), co)
        result.written += 1
    result.resources = resources_line(program)
    result.rejected = program.rejected or None
    if task.cache_key and made_by == "isagen":
        from isagen.objects import cache
        cache.store("gen", task.cache_key,
                    {"name": spec.name, "resources": result.resources, "rejected": result.rejected}, co, asm,
                    durable=False)
    from isagen.isa.table import forget_made
    forget_made()       # the next build is another kernel: its registers differ, few instructions would repeat


@contextlib.contextmanager
def _gen_results(tasks: list[_GenTask], workers: int):
    """The builds' results in task order: with one worker, callables that build when called (so the
    line's head shows first); with several, a process pool's results as they arrive in order."""
    if workers == 1:
        yield [functools.partial(_gen_one, task) for task in tasks]
        return
    import concurrent.futures
    import multiprocessing
    fork = "fork" in multiprocessing.get_all_start_methods()
    if fork:            # what every build loads (the ISA tables as parsed; each worker makes the
                        # definitions it uses), loaded once here for the forked workers to share
        from isagen.isa.table import isa_table
        for name in sorted({t.target for t in tasks}):
            isa_table(name)
            if not tasks[0].asm_only:
                from isagen.isa.encoder import _opcodes
                _opcodes(name)
    ctx = multiprocessing.get_context("fork" if fork else "spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    try:
        yield pool.map(_gen_one, tasks)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _job_outcome(progress: Progress, head: str, text: str) -> None:
    """The end of a build's line: after its head, or, above a bar, the whole line."""
    progress.echo(head + text if progress.shown else text)


def _check_unique(specs) -> None:
    seen: dict[str, str] = {}      # spec name -> the spec file that gave it
    for s in specs:
        if s.name in seen and seen[s.name] != s.path:
            raise SpecError(f"{s.path}: name '{s.name}' is also the name in {seen[s.name]} "
                            "(their output files would overwrite each other)")
        seen[s.name] = s.path


def _write(path: Path, data: bytes) -> None:
    """Write a file whole (via a temporary and a rename); an OS failure is a one-line error."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        raise IsagenError(f"cannot write {path}: {e.strerror or e}") from None


def _output_dir(path: str) -> Path:
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise IsagenError(f"cannot create the output directory {out}: {e.strerror or e}") from None
    return out


# --------------------------------------------------------------------------- list
@cli.command("list", short_help="list specs and the generators' parameters")
@argument("paths", nargs=-1, metavar="[SPEC_OR_DIR]...")
def list_specs(paths) -> int:
    """Each spec (files or directories of them; default: the bundled specs) with its generator,
    targets, parameters, sizes and reference; then each generator's parameter table."""
    from isagen.builders.registry import load_generators
    from isagen.builders.spec import bundled_specs_dir, load_spec
    paths = [Path(p) for p in paths] or [bundled_specs_dir()]
    files = []
    for p in paths:
        if p.is_dir():
            files += sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml"))
        elif p.exists():
            files.append(p)
        else:
            raise SpecError(f"{p}: no such spec file or directory")
    errors = 0
    print(f"Specs ({', '.join(str(p) for p in paths)}):")
    if not files:
        print("  (none)")
    for f in files:
        try:
            s = load_spec(f)
        except IsagenError as e:
            errors += 1
            print(f"  {f.name}: INVALID (see stderr)")
            _error(e)
            continue
        print(f"  {s.name:<16} kernel: {s.kernel:<14} targets: {', '.join(s.targets)}")
        if s.description:
            print(f"      {s.description}")
        print(f"      params: {s.params.describe()}")
        extras = []
        if s.shapes:
            extras.append("shapes: " + " ".join(f"{k}={v}" for k, v in s.shapes.items()))
        if s.reference:
            extras.append(f"reference: {s.reference}")
        if extras:
            print("      " + "   ".join(extras))
    print()
    print("Generators (parameter  type  default  allowed  meaning):")
    for name, gen in sorted(load_generators().items()):
        print(f"  {name}: {gen.doc}")
        sizes = ", ".join(f"{k} ({v})" for k, v in gen.shapes.items()) or "none"
        print(f"      targets: {', '.join(gen.targets)}; run-time sizes: {sizes}")
        width = max((len(k) for k in gen.params), default=4)
        dwidth = max((len(_plain(p.default)) for p in gen.params.values()), default=4)
        awidth = max((len(p.allowed()) for p in gen.params.values()), default=4)
        for pname, p in gen.params.items():
            print(f"      {pname:<{width}}  {p.type:<5}  {_plain(p.default):<{dwidth}}  "
                  f"{p.allowed():<{awidth}}  {p.doc}")
    return EXIT_USER_ERROR if errors else 0


def _plain(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- targets
@cli.command("targets", short_help="show the target table")
def targets() -> int:
    """Per target: registers, waves, LDS, fp8 format and counters; the products' CUs, clocks and peaks;
    and each target's MFMAs with their passes and cycles (all from isagen/targets.py)."""
    targets = list(TARGETS.values())
    rows = [
        ("family", lambda t: t.family),
        ("products", lambda t: ", ".join(p.name for p in t.products)),
        ("wave size", lambda t: f"{t.wave_size} lanes"),
        ("VGPR file", lambda t: f"{t.unified_regs_per_lane} per lane (arch VGPRs <= {t.max_arch_vgprs}, "
                                f"AGPRs <= {t.max_agprs}; granule {t.vgpr_alloc_granule})"),
        ("SGPRs", lambda t: f"{t.max_sgprs} per wave, {t.sgprs_per_simd} per SIMD (granule {t.sgpr_alloc_granule})"),
        ("waves", lambda t: f"{t.max_waves_per_simd} per SIMD, {t.simds_per_cu} SIMDs per CU, "
                            f"workgroup <= {t.max_workgroup_size}"),
        ("LDS", lambda t: f"{t.lds_bytes} bytes ({t.lds_bytes // 1024} KiB) per CU, {t.lds_banks} banks, "
                          f"granule {t.lds_alloc_granule}"),
        ("LDS-DMA widths", lambda t: ", ".join(str(w) for w in t.lds_dma_widths) + " bytes per lane"),
        ("fp8 format", lambda t: {"fnuz": "FNUZ (e4m3fnuz, e5m2fnuz)", "ocp": "OCP (e4m3fn, e5m2)"}.get(
            t.fp8_format, t.fp8_format)),
        ("counters", lambda t: f"vmcnt <= {t.max_vmcnt}, lgkmcnt <= {t.max_lgkmcnt}"),
    ]
    label = max(len(r[0]) for r in rows)
    for t in targets:
        print(f"{t.name} ({t.target_id})")
        for name, fn in rows:
            print(f"  {name:<{label}}  {fn(t)}")
        print()
    print("Products (dense peaks: CUs x FLOP/CU/clock x peak clock)")
    print(f"  {'product':<8} {'target':<7} {'CUs':>4} {'XCDs':>4} {'clock MHz':>9} {'BF16 TFLOPs':>11} "
          f"{'FP8 TFLOPs':>10} {'HBM TB/s':>8} {'HBM GiB':>7}")
    for t in targets:
        for p in t.products:
            print(f"  {p.name:<8} {t.name:<7} {p.cus:>4} {p.xcds:>4} {p.clock_mhz:>9} {p.peak_bf16_tflops:>11.1f} "
                  f"{p.peak_fp8_tflops:>10.1f} {p.hbm_tb_s:>8.1f} {p.hbm_gib:>7}")
    print()
    for t in targets:
        print(f"MFMAs on {t.name} (passes: 4 cycles each)")
        print(f"  {'mnemonic':<30} {'M x N x K':<11} {'A/B type':<8} {'A,B,C regs':<10} {'passes':>6} {'cycles':>6}")
        for m in t.mfmas:
            shape = f"{m.m}x{m.n}x{m.k}"
            print(f"  {m.mnemonic:<30} {shape:<11} {m.in_type:<8} {f'{m.a_regs},{m.b_regs},{m.c_regs}':<10} "
                  f"{m.passes:>6} {m.cycles:>6}")
        print()
    return 0


# --------------------------------------------------------------------------- toolchain, disasm
@cli.command("toolchain", short_help="show which assembler/linker each target uses")
def toolchain() -> int:
    """The assemblers found, in search order, and which one each target uses."""
    print(toolchain_report())
    return 0


@cli.command("disasm", short_help="disassemble a code object with isagen's decoder")
@argument("file", metavar="FILE.co")
@option("--kernel", "-k", default=None, metavar="NAME", help="only this kernel")
@option("--target", "-t", default=None, metavar="TARGET",
              help=f"the entry of an offload bundle holding several ({TARGET_NAMES})")
def disasm(file, kernel, target) -> int:
    """Disassemble an AMDGPU code object (.co / .hsaco; a clang offload bundle is read through its
    AMDGPU entry) in llvm-objdump's layout, with the descriptor and metadata as comments."""
    from isagen.objects.codeobject import read_code_object
    from isagen.objects.disasm import disassemble
    sys.stdout.write(disassemble(read_code_object(file, target=target), kernel))
    return 0


# --------------------------------------------------------------------------- demo
DEMO_SPEC = "axpy_f32.yaml"


@cli.command("demo", short_help="generate, assemble, inspect and run the fp32 axpy kernel")
@option("-o", "--out-dir", default=os.path.join("out", "demo"), metavar="DIR",
              help="where the .s/.co go (default: out/demo)")
@option("--target", "-t", default=DEFAULT_TARGET, metavar="TARGET",
              help=f"{TARGET_NAMES} (default: {DEFAULT_TARGET})")
@option("-n", "n", type=IntRange(min=0), default=10_007,
              help="elements (default 10007: five workgroups and a tail)")
def demo(out_dir, target, n) -> int:
    """Generate the fp32 axpy kernel, assemble it, show its first instructions, then run it (hip on a
    supported AMD GPU, else the CPU emulator) and check it against torch."""
    from isagen.builders.spec import bundled_specs_dir, load_spec
    from isagen.objects.emit import render_assembly
    spec_path = bundled_specs_dir() / DEMO_SPEC
    spec = load_spec(spec_path)
    target = spec.select_targets(target)[0]
    print(f"isagen demo: {spec.description}")
    print(f"1. generate  {spec_path} -> {spec.name} for {target.name} ({spec.params.describe()})")
    t0 = time.perf_counter()
    program = spec.build(target)
    asm = render_assembly(program)
    out = _output_dir(out_dir)
    s_path = out / f"{spec.name}.{target.name}.s"
    co_path = out / f"{spec.name}.{target.name}.co"
    _write(s_path, asm.encode())
    print(f"   {resources_line(program)}")
    print(f"2. assemble  {s_path} -> {co_path}")
    co, _ = code_object(program, asm_text=asm)
    _write(co_path, co)
    print(f"   {len(co)} bytes in {time.perf_counter() - t0:.2f} s (generate + assemble)")
    print(f"3. inspect   the first instructions of {s_path}:")
    body = asm.split(f"\n{spec.name}:\n", 1)[1].splitlines()
    for line in body[:14]:
        print(f"     {line}")
    print(f"     … ({len(program.instructions())} instructions in all)")
    return _demo_run(spec, target, co, n)


def _demo_run(spec, target, co: bytes, n: int) -> int:
    """Run the kernel on the default backend and compare with torch; say so plainly when it cannot run."""
    try:
        import torch
    except ImportError:
        print("4. run       not available: torch is not installed (pip install torch); nothing was run.")
        return 0
    from isagen.api import build
    from isagen.runtime import run as run_command
    from isagen.runtime.backends import choose_backend
    backend = run_command.require_device(choose_backend())     # hip without a GPU: one line, as in run
    kernel = build(str(spec.path), target.name)
    run_command.check_sizes(kernel, {"n": n})                    # what the kernel addresses, what memory holds
    alpha = 1.5
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=gen, dtype=torch.float32)
    y = torch.randn(n, generator=gen, dtype=torch.float32)
    expected = (alpha * x.double() + y.double()).float()    # exact product, the sum rounded (twice: <= 1 ulp)
    if backend == "hip":
        x, y = x.cuda(), y.cuda()
    where = "the CPU emulator (no AMD GPU here)" if backend == "emu" else f"the {backend} backend"
    same = "the same" if kernel.code_object == co else "an equivalent (cached)"
    print(f"4. run       isagen.build('{spec.name}') -> {same} code object; n={n} on {where}")
    t0 = time.perf_counter()
    with Progress("emulating", delay=SLOW_WORK_S, clock=True):     # the emulator reports its workgroups
        result = kernel.run(x, y, alpha=alpha)
    elapsed = time.perf_counter() - t0
    print(f"             grid {result.grid[0]} workgroups x {result.block[0]} lanes, {elapsed:.2f} s")
    got = y.cpu()
    err = (got.double() - expected.double()).abs()
    ulp = (torch.nextafter(expected.abs(), torch.tensor(float("inf"))) - expected.abs()).double()
    worst = float((err / ulp).max()) if n else 0.0
    ok = worst <= 1.0
    print(f"5. check     y = {alpha}*x + y against torch (float64 math): max |error| "
          f"{float(err.max()) if n else 0.0:.3g} ({worst:.2f} ulp) -> {'OK' if ok else 'MISMATCH'}")
    if not ok:
        bad = int((err > ulp).nonzero()[0])
        raise IsagenError(f"demo: the kernel's result differs from torch (first at element {bad}: "
                          f"{float(got[bad])} vs {float(expected[bad])})")
    return 0




if __name__ == "__main__":
    sys.exit(main())
