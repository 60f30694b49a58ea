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
= the CPU count, wall time of the command, once each.

The first repetition of the first spec also pays one-time costs (importing the generators, loading
the ISA tables); they are reported as ``first`` and left out of the median.  Results go to
``bench/results/gen_speed.json`` (every sample) and ``bench/results/gen_speed.md`` (a table).

    python bench/gen_speed.py [--reps 5] [SPEC_OR_DIR ...]
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
from isagen.objects.codeobject import read_code_object  # noqa: E402
from isagen.objects.elf_writer import write_code_object  # noqa: E402
from isagen.objects.emit import render_assembly  # noqa: E402
from isagen.objects.toolchain import assemble, find_toolchain  # noqa: E402


def spec_files(paths) -> list[Path]:
    files = []
    for p in map(Path, paths or [bundled_specs_dir()]):
        files += sorted(p.glob("*.yaml")) if p.is_dir() else [p]
    return files


def time_one(path: Path, target: str, reps: int) -> dict:
    samples = {"build": [], "emit": [], "assemble": [], "write": []}
    info = {}
    for _ in range(reps):
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
    ap.add_argument("--no-library", dest="library", action="store_false",
                    help="skip the whole-library `isagen gen` timings")
    args = ap.parse_args(argv)

    results = []
    first = None
    for path in spec_files(args.paths):
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


def library_build(paths) -> dict:
    """Wall time of ``isagen gen`` over the spec list (a subprocess, as a user runs it), -j 1 and -j N."""
    import subprocess
    import tempfile
    files = [str(p) for p in spec_files(paths)]
    out: dict = {"specs": len(files), "runs": []}
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for assembler in ("isagen", "llvm"):
        for jobs in sorted({1, os.cpu_count() or 1}):
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "isagen", "gen", *files, "-o", tmp, "-j", str(jobs),
                                "--assembler", assembler], check=True, capture_output=True, env=env)
                wall = time.perf_counter() - t0
                n = len(os.listdir(tmp))
            # other work on a shared machine shows here: the 1-minute load average after the run
            out["runs"].append({"assembler": assembler, "jobs": jobs, "wall_s": wall, "files": n,
                                "load_1min": os.getloadavg()[0]})
            print(f"isagen gen ({len(files)} specs, {n} files) --assembler {assembler} -j {jobs}: {wall:.1f} s",
                  flush=True)
    return out


def markdown(doc: dict) -> str:
    lines = [f"# Generation speed (isagen {doc['isagen']}, {doc['date']})", "",
             f"Python {doc['python']} on {doc['machine']} ({doc['cpus']} CPUs, shared); milliseconds, median of "
             f"{doc['reps']} runs (of {doc['reps'] - 1} for the first row, whose first run is the 'first call' "
             "below).", ""]
    for target, tc in doc["toolchains"].items():
        lines.append(f"- {target}: {tc}")
    if doc["first_call_s"]:
        f = doc["first_call_s"]
        lines.append(f"- first call (imports, ISA tables, toolchain probe): build {1e3 * f['build']:.0f} ms, "
                     f"assemble {1e3 * f['assemble']:.0f} ms")
    if doc.get("library"):
        n_specs = doc["library"]["specs"]
        lines += ["", f"Whole library, `isagen gen` of {n_specs} specs (command wall time, one run each):",
                  "", "| assembler | -j | files | wall s | load (1 min) after |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {r['assembler']} | {r['jobs']} | {r['files']} | {r['wall_s']:.1f} | {r['load_1min']:.1f} |"
                  for r in doc["library"]["runs"]]
    lines += ["", "Per kernel: total = build + emit + assemble (LLVM); write = the in-process code object "
              "(isagen's encoder and ELF writer, from the Program: no emit needed).", "",
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
