"""How long isagen takes to turn a spec into a code object, per spec and target.

Three stages are timed separately, each ``--reps`` times (default 5):

* build:    spec -> Program (load and validate the YAML, run the generator, finish(): hazard nops,
            wait and register checks);
* emit:     Program -> .s text;
* assemble: .s -> .co with the toolchain ``isagen toolchain`` reports (a subprocess per call);
* write:    Program -> .co in process (``isagen.objects.elf_writer``: isagen's encoder and ELF
            writer, the default since issue 17; the bytes are checked to carry the same ``.text`` as
            LLVM's object on every repetition).

Then (``--library``, default on) ``isagen gen`` of the whole spec list with ``-j 1`` and with ``-j``
= the CPU count, wall time of the command, once each: without isagen's build cache (``--no-cache``,
the headline), then again into an empty cache and once more from it (labelled "cached"), each with
the peak RSS of the largest process and the load averages around it (the machine is shared).

The headline (``--headline``, default on) is issue 17's targets, side by side with Triton 3.x when it
is installed (a 256x256x32 bf16 ``tl.dot`` GEMM, B stored N x K, 8 warps, 16x16 MFMAs: the tile
``specs/gemm_bf16.yaml`` builds on gfx942; every Triton compile gets an empty ``TRITON_CACHE_DIR``):

* in process: spec -> ``.co`` of gemm_bf16 for gfx942 (load_spec, build, the in-process writer), the
  memo of checked instructions emptied before each run (``forget_made``), against
  ``triton.compile`` of the tile (its imports done once before);
* whole process: ``isagen gen specs/gemm_bf16.yaml --target gfx942 --no-cache`` against a Python
  process that imports Triton and compiles the tile, in alternating pairs; and ``isagen gen`` with
  its cache warm (labelled "cached", not the headline).  isagen's modules are byte-compiled first
  (``byte_compile``), as an installed package's are, and an untimed first run leaves the parsed
  copies of the ISA tables, opcode table and spec (``isagen.isa.defs_cache``; ``--no-cache`` does
  not turn them off, as it does not turn off ``.pyc`` files) that every later run reads.

The first repetition of the first spec also pays one-time costs (importing the generators, loading
the ISA tables); they are reported as ``first`` and left out of the median.  Results go to
``bench/results/gen_speed.json`` (every sample) and ``bench/results/gen_speed.md`` (a table).

    python bench/gen_speed.py [--reps 5] [--pairs 5] [--no-library] [--no-headline] [--no-kernels] [SPEC_OR_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from isagen import __version__  # noqa: E402
from isagen.builders.spec import bundled_specs_dir, load_spec  # noqa: E402
from isagen.isa.table import forget_made  # noqa: E402
from isagen.objects.codeobject import read_code_object  # noqa: E402
from isagen.objects.elf_writer import write_code_object  # noqa: E402
from isagen.objects.emit import render_assembly  # noqa: E402
from isagen.objects.toolchain import assemble, find_toolchain  # noqa: E402

GEMM_SPEC = ROOT / "specs" / "gemm_bf16.yaml"
#: the Triton tile gemm_bf16 builds on gfx942 (tools/triton_kernels.compile_matmul's arguments)
TRITON_TILE = dict(target="gfx942", block_m=256, block_n=256, block_k=32, num_warps=8, dtype="bf16",
                   aligned=True, mfma_size=16, b_kmajor=True)
TRITON_SCRIPT = ("import sys; sys.path.insert(0, {root!r}); from tools.triton_kernels import compile_matmul; "
                 "compile_matmul(**{tile!r})")
#: runs a command and prints its children's peak RSS (KiB; Linux: the largest process's) as JSON
RSS_WRAPPER = ("import json, resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); "
               "print(json.dumps({'rc': r.returncode, 'maxrss_kib': resource.getrusage(resource.RUSAGE_CHILDREN)"
               ".ru_maxrss, 'err': r.stderr.decode()[-2000:]}))")


def spec_files(paths) -> list[Path]:
    files = []
    for p in map(Path, paths or [bundled_specs_dir()]):
        files += sorted(p.glob("*.yaml")) if p.is_dir() else [p]
    return files


def time_one(path: Path, target: str, reps: int) -> dict:
    samples = {"build": [], "emit": [], "assemble": [], "write": []}
    info = {}
    for _ in range(reps):
        forget_made()               # each build from nothing (the memo of checked instructions is per process)
        t0 = time.perf_counter()
        spec = load_spec(path)
        program = spec.build(target)
        t1 = time.perf_counter()
        asm = render_assembly(program)
        t2 = time.perf_counter()
        co = assemble(asm, target, name=spec.name)
        t3 = time.perf_counter()
        ours = write_code_object(program)
        t4 = time.perf_counter()
        if read_code_object(ours).text != read_code_object(co).text:
            raise SystemExit(f"{spec.name} {target}: the in-process .text differs from LLVM's")
        samples["write"].append(t4 - t3)
        samples["build"].append(t1 - t0)
        samples["emit"].append(t2 - t1)
        samples["assemble"].append(t3 - t2)
        info = {"spec": spec.name, "instructions": len(program.instructions()), "asm_lines": asm.count("\n"),
                "co_bytes": len(co), "co_bytes_isagen": len(ours), "vgprs": program.vgprs, "sgprs": program.sgprs}
    return {**info, "target": target, "samples_s": samples}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="spec files or directories (default: the bundled specs)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--pairs", type=int, default=5, help="alternating whole-process pairs (isagen, Triton)")
    ap.add_argument("--no-library", dest="library", action="store_false",
                    help="skip the whole-library `isagen gen` timings")
    ap.add_argument("--no-headline", dest="headline", action="store_false",
                    help="skip issue 17's targets (in-process and whole-process gemm_bf16, Triton)")
    ap.add_argument("--no-kernels", dest="kernels", action="store_false", help="skip the per-kernel table")
    ap.add_argument("--markdown-only", action="store_true",
                    help="rewrite gen_speed.md from the gen_speed.json already in --out (no timing)")
    args = ap.parse_args(argv)
    if args.markdown_only:
        out = Path(args.out)
        (out / "gen_speed.md").write_text(markdown(json.loads((out / "gen_speed.json").read_text())))
        return 0

    headline = headline_runs(args.reps, args.pairs) if args.headline else None
    results = []
    first = None
    for path in (spec_files(args.paths) if args.kernels else []):
        spec = load_spec(path)
        for target in spec.targets:
            r = time_one(path, target, args.reps)
            if first is None:                       # one-time costs: imports, ISA tables, toolchain probe
                first = {k: v[0] for k, v in r["samples_s"].items()}
                for v in r["samples_s"].values():
                    v.pop(0)
            r["median_ms"] = {k: 1e3 * statistics.median(v) for k, v in r["samples_s"].items() if v}
            r["min_ms"] = {k: 1e3 * min(v) for k, v in r["samples_s"].items() if v}
            results.append(r)
            m = r["median_ms"]
            print(f"{r['spec']:<14} {target}  build {m['build']:7.1f} ms  emit {m['emit']:6.1f} ms  "
                  f"assemble {m['assemble']:7.1f} ms  write {m['write']:6.1f} ms  ({r['instructions']} instructions)",
                  flush=True)

    toolchains = {}
    for target in sorted({r["target"] for r in results}):
        tc = find_toolchain(target)
        toolchains[target] = f"{tc.assembler.name} + {tc.linker.name} (LLVM {tc.assembler.version}, {tc.source})"
    library = library_build(args.paths) if args.library else None
    doc = {
        "headline": headline,
        "what": "isagen generation speed: spec -> Program (build), -> .s (emit), -> .co (assemble: LLVM; "
                "write: in process)", "library": library,
        "isagen": __version__, "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "reps": args.reps, "first_call_s": first, "toolchains": toolchains, "results": results,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gen_speed.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "gen_speed.md").write_text(markdown(doc))
    print(f"wrote {out / 'gen_speed.json'} and {out / 'gen_speed.md'}")
    return 0


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _gen_env(cache_dir: str | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("ISAGEN_ASSEMBLER", None)
    if cache_dir:
        env["ISAGEN_CACHE_DIR"] = cache_dir
    return env


def _timed(argv: list[str], env: dict, rss: bool = False) -> dict:
    """Wall seconds of a command (a new process, as a user runs it), its CPU seconds (user + system,
    the process and its children) and, with ``rss``, the peak RSS of its largest process."""
    import resource
    import subprocess
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = _load()
    cmd = [sys.executable, "-c", RSS_WRAPPER, *argv] if rss else argv
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"wall_s": wall, "cpu_s": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
           "load_before": load, "load_after": _load()}
    if rss:
        info = json.loads(done.stdout.decode().strip().splitlines()[-1])
        if info["rc"] != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {info['err']}")
        out["maxrss_mib"] = info["maxrss_kib"] / 1024
    elif done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-2000:]}")
    return out


def library_build(paths) -> dict:
    """Wall time of ``isagen gen`` over the spec list (a subprocess, as a user runs it), -j 1 and -j N:
    without the build cache (the headline), then into an empty cache and from it."""
    import tempfile
    files = [str(p) for p in spec_files(paths)]
    out: dict = {"specs": len(files), "runs": []}
    jobs_list = sorted({1, os.cpu_count() or 1})
    with tempfile.TemporaryDirectory() as cache_dir:
        plan = [("isagen", j, "--no-cache") for j in jobs_list] + [("isagen", jobs_list[-1], "fill cache"),
                                                                  ("isagen", jobs_list[-1], "cached")]
        for assembler, jobs, mode in plan:
            with tempfile.TemporaryDirectory() as tmp:
                argv = [sys.executable, "-m", "isagen", "gen", *files, "-o", tmp, "-j", str(jobs),
                        "--assembler", assembler] + (["--no-cache"] if mode == "--no-cache" else [])
                r = _timed(argv, _gen_env(cache_dir), rss=True)
                n = len(os.listdir(tmp))
            out["runs"].append({"assembler": assembler, "jobs": jobs, "cache": mode, "files": n, **r})
            print(f"isagen gen ({len(files)} specs, {n} files) -j {jobs} [{mode}]: {r['wall_s']:.1f} s wall, "
                  f"{r['cpu_s']:.1f} s CPU, peak RSS {r['maxrss_mib']:.0f} MiB, load {r['load_before']}",
                  flush=True)
    by = {(r["jobs"], r["cache"]): r["wall_s"] for r in out["runs"]}
    if len(jobs_list) > 1:
        out["j_speedup"] = by[(1, "--no-cache")] / by[(jobs_list[-1], "--no-cache")]
    return out


def byte_compile() -> list[str]:
    """Byte-compile isagen's modules (and tools/), as ``pip install`` leaves an installed package: a
    process then loads them instead of compiling each from source (which it does every time where
    PYTHONDONTWRITEBYTECODE is set, as on the project's development machine: about 230 ms for the
    modules a GEMM build imports).  Triton, installed by pip, has its bytecode already.  The package's
    folders that are links (kernels, runtime, specs) are compiled where they point."""
    import compileall
    pkg = ROOT / "isagen"
    dirs = [pkg, ROOT / "tools"] + sorted({p.resolve() for p in pkg.iterdir() if p.is_symlink() and p.is_dir()})
    files = sorted({p.resolve() for p in pkg.iterdir() if p.is_symlink() and p.suffix == ".py"})
    for d in dirs:
        compileall.compile_dir(str(d), quiet=1)
    for f in files:
        compileall.compile_file(str(f), quiet=1)
    return [str(x.relative_to(ROOT)) for x in dirs + files]


def headline_runs(reps: int, pairs: int) -> dict:
    """Issue 17's targets: gemm_bf16 on gfx942 in process and as a whole process, Triton beside it."""
    import subprocess
    import tempfile
    out: dict = {"spec": "gemm_bf16", "target": "gfx942", "triton_tile": TRITON_TILE,
                 "byte_compiled": byte_compile()}
    # ---- in process: spec -> .co, from nothing each time (the first run also loads the ISA tables)
    samples = []
    for _ in range(reps + 1):
        forget_made()
        t0 = time.perf_counter()
        co = write_code_object(load_spec(GEMM_SPEC).build("gfx942"))
        samples.append(time.perf_counter() - t0)
    out["isagen_in_process_s"] = {"first": samples[0], "samples": samples[1:], "median": statistics.median(samples[1:]),
                                  "min": min(samples[1:]), "co_bytes": len(co), "load": _load()}
    print(f"in process, spec -> .co: isagen median {1e3 * out['isagen_in_process_s']['median']:.0f} ms", flush=True)
    triton = _triton_version()
    out["triton"] = triton
    if triton:
        sys.path.insert(0, str(ROOT))
        from tools.triton_kernels import compile_matmul
        tri = []
        with tempfile.TemporaryDirectory() as tdir:
            for i in range(reps + 1):
                os.environ["TRITON_CACHE_DIR"] = os.path.join(tdir, str(i))     # an empty cache: a real compile
                t0 = time.perf_counter()
                compile_matmul(**TRITON_TILE)
                tri.append(time.perf_counter() - t0)
        os.environ.pop("TRITON_CACHE_DIR", None)
        out["triton_in_process_s"] = {"first": tri[0], "samples": tri[1:], "median": statistics.median(tri[1:]),
                                      "min": min(tri[1:]), "load": _load()}
        print(f"in process: Triton median {1e3 * out['triton_in_process_s']['median']:.0f} ms", flush=True)
    # ---- whole process, alternating pairs
    pairs_out = []
    with tempfile.TemporaryDirectory() as tmp:
        isagen_argv = [sys.executable, "-m", "isagen", "gen", str(GEMM_SPEC), "--target", "gfx942", "-o", tmp]
        triton_argv = [sys.executable, "-c", TRITON_SCRIPT.format(root=str(ROOT), tile=TRITON_TILE)]
        subprocess.run(isagen_argv + ["--no-cache"], capture_output=True, env=_gen_env(), cwd=ROOT, check=True)
        for i in range(pairs):
            pair = {}
            order = ("isagen", "triton") if i % 2 == 0 else ("triton", "isagen")
            for who in order:
                if who == "isagen":
                    pair["isagen"] = _timed(isagen_argv + ["--no-cache"], _gen_env())
                elif triton:
                    with tempfile.TemporaryDirectory() as tcache:
                        pair["triton"] = _timed(triton_argv, dict(os.environ, TRITON_CACHE_DIR=tcache))
            pairs_out.append(pair)
            print(f"whole process pair {i + 1}: isagen {pair['isagen']['wall_s']:.3f} s"
                  + (f", Triton {pair['triton']['wall_s']:.3f} s" if "triton" in pair else ""), flush=True)
        with tempfile.TemporaryDirectory() as cache_dir:
            env = _gen_env(cache_dir)
            subprocess.run(isagen_argv, capture_output=True, env=env, cwd=ROOT, check=True)     # fills the cache
            cached = [_timed(isagen_argv, env) for _ in range(pairs)]
    out["whole_process_pairs"] = pairs_out
    out["isagen_whole_process_median_s"] = statistics.median(p["isagen"]["wall_s"] for p in pairs_out)
    if triton:
        out["triton_whole_process_median_s"] = statistics.median(p["triton"]["wall_s"] for p in pairs_out)
        out["whole_process_ratio_median"] = statistics.median(p["triton"]["wall_s"] / p["isagen"]["wall_s"]
                                                              for p in pairs_out)
    out["isagen_whole_process_cached"] = cached
    out["isagen_whole_process_cached_median_s"] = statistics.median(c["wall_s"] for c in cached)
    # python itself, for scale: the interpreter's start-up with site (what every process pays)
    out["python_startup_s"] = statistics.median(
        _timed([sys.executable, "-c", "pass"], dict(os.environ))["wall_s"] for _ in range(pairs))
    return out


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return str(triton.__version__)


def _ms(x: float) -> str:
    return f"{1e3 * x:.0f} ms"


def markdown(doc: dict) -> str:
    lines = [f"# Generation speed (isagen {doc['isagen']}, {doc['date']})", "",
             f"Python {doc['python']} on {doc['machine']} ({doc['cpus']} CPUs, shared with other work: the load "
             "averages (1, 5, 15 min) are given next to the timings). Written by `bench/gen_speed.py`.", ""]
    h = doc.get("headline")
    if h:
        ip, lib = h["isagen_in_process_s"], doc.get("library")
        tri_ip = h.get("triton_in_process_s")
        lines += ["## Issue 17's targets", "",
                  f"gemm_bf16 on gfx942; Triton {h['triton'] or '(not installed)'} compiling the same tile "
                  f"({h['triton_tile']['block_m']}x{h['triton_tile']['block_n']}x{h['triton_tile']['block_k']} bf16 "
                  f"`tl.dot`, B N x K, {h['triton_tile']['num_warps']} warps, 16x16 MFMAs) with an empty cache each "
                  "time. Uncached isagen is the headline; the cached rows reuse `isagen gen`'s build cache and say so.",
                  "", "| target | goal | isagen | Triton | met? |", "|---|---|---:|---:|---|"]
        tri = f"{_ms(tri_ip['median'])}" if tri_ip else "–"
        lines.append(f"| in process, spec → .co (median of {len(ip['samples'])}; min {_ms(ip['min'])}) | ≤ 65 ms | "
                     f"{_ms(ip['median'])} | {tri} | {'yes' if ip['median'] <= 0.065 else 'no'} |")
        ratio = h.get("whole_process_ratio_median")
        lines.append(f"| whole process, `isagen gen specs/gemm_bf16.yaml --target gfx942 --no-cache` "
                     f"({len(h['whole_process_pairs'])} alternating pairs) | ≥ 8× faster than Triton | "
                     f"{_ms(h['isagen_whole_process_median_s'])} | "
                     f"{_ms(h['triton_whole_process_median_s']) if ratio else '–'} | "
                     f"{f'{ratio:.1f}× (median of the pairs): ' + ('yes' if ratio >= 8 else 'no') if ratio else '–'} |")
        if ratio:
            cr = h["triton_whole_process_median_s"] / h["isagen_whole_process_cached_median_s"]
            lines.append(f"| whole process, the same with the build cache warm (cached: not the headline) | – | "
                         f"{_ms(h['isagen_whole_process_cached_median_s'])} | "
                         f"{_ms(h['triton_whole_process_median_s'])} | {cr:.1f}× |")
        if lib:
            runs = {(r["jobs"], r["cache"]): r for r in lib["runs"]}
            jmax = max(j for j, _ in runs)
            best = runs[(jmax, "--no-cache")]
            lines.append(f"| all bundled specs × their targets, `isagen gen specs/ --no-cache -j {jmax}` | "
                         f"≤ 5 s wall | "
                         f"{best['wall_s']:.1f} s | – | {'yes' if best['wall_s'] <= 5 else 'no'} "
                         f"(load {best['load_before'][0]:.1f} before) |")
            if (jmax, "cached") in runs:
                c = runs[(jmax, "cached")]
                lines.append(f"| the same from the build cache (cached: not the headline) | – | {c['wall_s']:.1f} s "
                             "| – | – |")
            lines.append(f"| peak RSS of a library build (largest process) | stated | "
                         f"{max(r['maxrss_mib'] for r in lib['runs'] if r['cache'] == '--no-cache'):.0f} MiB | – | – |")
            if "j_speedup" in lib:
                lines.append(f"| -j speedup, -j {jmax} over -j 1 (uncached) | measured | {lib['j_speedup']:.2f}× "
                             "| – | – |")
        if h.get("byte_compiled"):
            lines += ["", "Before the whole-process runs isagen's modules were byte-compiled, as `pip install` leaves "
                      f"an installed package ({', '.join(h['byte_compiled'])}); Triton's come byte-compiled from "
                      "its installation. (This machine sets PYTHONDONTWRITEBYTECODE=1: without the step each isagen "
                      "process would compile its modules from source, about 230 ms.)"]
        lines += ["", f"Python's own start-up (`python -c pass`, median): {_ms(h['python_startup_s'])}. "
                  f"In process, the first build (ISA tables loaded, generators imported) took {_ms(ip['first'])}"
                  + (f"; Triton's first compile (its imports) {_ms(tri_ip['first'])}." if tri_ip else "."), "",
                  "Whole-process pairs (wall and CPU seconds, CPU = user + system; the load averages before "
                  "the isagen run). On a loaded machine CPU time is the steadier measure:", "",
                  "| pair | isagen wall | isagen CPU | Triton wall | Triton CPU | load |",
                  "|---:|---:|---:|---:|---:|---|"]
        for i, p in enumerate(h["whole_process_pairs"], 1):
            t = (f"{p['triton']['wall_s']:.3f} | {p['triton']['cpu_s']:.3f}" if "triton" in p else "– | –")
            lines.append(f"| {i} | {p['isagen']['wall_s']:.3f} | {p['isagen']['cpu_s']:.3f} | {t} | "
                         f"{p['isagen']['load_before']} |")
        pairs = h["whole_process_pairs"]
        if pairs and "triton" in pairs[0]:
            icpu = statistics.median(p["isagen"]["cpu_s"] for p in pairs)
            tcpu = statistics.median(p["triton"]["cpu_s"] for p in pairs)
            cached_cpu = statistics.median(c["cpu_s"] for c in h["isagen_whole_process_cached"])
            lines += ["", f"Medians of CPU time: isagen {_ms(icpu)}, Triton {_ms(tcpu)} ({tcpu / icpu:.1f}×); "
                      f"isagen from its cache {_ms(cached_cpu)} ({tcpu / cached_cpu:.1f}×)."]
        lines.append("")
    for target, tc in doc["toolchains"].items():
        lines.append(f"- {target}: {tc}")
    if doc["first_call_s"]:
        f = doc["first_call_s"]
        lines.append(f"- first call (imports, ISA tables, toolchain probe): build {1e3 * f['build']:.0f} ms, "
                     f"assemble {1e3 * f['assemble']:.0f} ms")
    if doc.get("library"):
        n_specs = doc["library"]["specs"]
        lines += ["", f"## Whole library, `isagen gen` of {n_specs} specs", "",
                  "Command wall time, one run each; CPU = user + system of every process; RSS = the largest "
                  "process's peak.", "",
                  "| -j | cache | files | wall s | CPU s | peak RSS MiB | load before | load after |",
                  "|---:|---|---:|---:|---:|---:|---|---|"]
        lines += [f"| {r['jobs']} | {r['cache']} | {r['files']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                  f"{r['maxrss_mib']:.0f} | {r['load_before']} | {r['load_after']} |" for r in doc["library"]["runs"]]
    if doc["results"]:
        lines += ["", "## Per kernel", "",
                  f"Milliseconds, median of {doc['reps']} runs (of {doc['reps'] - 1} for the first row, whose first "
                  "run is the 'first call' above), each from nothing (the memo of checked instructions emptied). "
                  "total = build + emit + assemble (LLVM); write = the in-process code object (isagen's encoder "
                  "and ELF writer, from the Program: no emit needed).", "",
                  "| spec | target | instructions | build | emit | assemble (LLVM) | write (isagen) | total | "
                  "fastest total |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in doc["results"]:
        m, lo = r["median_ms"], r["min_ms"]
        total = m["build"] + m["emit"] + m["assemble"]
        fastest = lo["build"] + lo["emit"] + lo["assemble"]
        lines.append(f"| {r['spec']} | {r['target']} | {r['instructions']} | {m['build']:.1f} | {m['emit']:.1f} | "
                     f"{m['assemble']:.1f} | {m['write']:.1f} | {total:.1f} | {fastest:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
