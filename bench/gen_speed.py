"""How long isagen takes to turn a spec into a code object, per spec and target.

Three stages are timed separately, each ``--reps`` times (default 5):

* build:    spec -> Program (load and validate the YAML, run the generator, finish(): hazard nops,
            wait and register checks);
* emit:     Program -> .s text;
* assemble: .s -> .co with the toolchain ``isagen toolchain`` reports (a subprocess per call).

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
from isagen.objects.emit import render_assembly  # noqa: E402
from isagen.objects.toolchain import assemble, find_toolchain  # noqa: E402


def spec_files(paths) -> list[Path]:
    files = []
    for p in map(Path, paths or [bundled_specs_dir()]):
        files += sorted(p.glob("*.yaml")) if p.is_dir() else [p]
    return files


def time_one(path: Path, target: str, reps: int) -> dict:
    samples = {"build": [], "emit": [], "assemble": []}
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
        samples["build"].append(t1 - t0)
        samples["emit"].append(t2 - t1)
        samples["assemble"].append(t3 - t2)
        info = {"spec": spec.name, "instructions": len(program.instructions()), "asm_lines": asm.count("\n"),
                "co_bytes": len(co), "vgprs": program.vgprs, "sgprs": program.sgprs}
    return {**info, "target": target, "samples_s": samples}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="spec files or directories (default: the bundled specs)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
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
                  f"assemble {m['assemble']:7.1f} ms  ({r['instructions']} instructions)", flush=True)

    toolchains = {}
    for target in sorted({r["target"] for r in results}):
        tc = find_toolchain(target)
        toolchains[target] = f"{tc.assembler.name} + {tc.linker.name} (LLVM {tc.assembler.version}, {tc.source})"
    doc = {
        "what": "isagen generation speed: spec -> Program (build), -> .s (emit), -> .co (assemble)",
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
    lines += ["", "| spec | target | instructions | build | emit | assemble | total | fastest total |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in doc["results"]:
        m, lo = r["median_ms"], r["min_ms"]
        total = m["build"] + m["emit"] + m["assemble"]
        fastest = lo["build"] + lo["emit"] + lo["assemble"]
        lines.append(f"| {r['spec']} | {r['target']} | {r['instructions']} | {m['build']:.1f} | {m['emit']:.1f} | "
                     f"{m['assemble']:.1f} | {total:.1f} | {fastest:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
