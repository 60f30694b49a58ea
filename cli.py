"""The ``isagen`` command line (installed as ``isagen.cli``; ``python -m isagen`` runs it).

    isagen gen SPEC.yaml [SPEC2.yaml ...] [--target gfx942|gfx950|all] [-o DIR] [-D name=value ...]
               [--force] [--asm-only]
    isagen list [SPEC_OR_DIR ...]      specs (default: the bundled ones) and the generators' parameters
    isagen targets                     the target table: registers, LDS, CUs, clocks, peaks, MFMAs
    isagen toolchain                   which LLVM assembles each target, and why
    isagen disasm FILE.co [--kernel K] disassemble a code object with isagen's decoder
    isagen demo                        generate, assemble, inspect and run the fp32 axpy kernel
    isagen run SPEC [-D name=value ...] [--shape n=4096] [--backend hip|emu] [--target gfx942]
                                       run on random inputs, check against the spec's torch reference
    isagen report SPEC.yaml|FILE.co [--target T] [--kernel K] [--format text|json|html|png] [-o FILE]
                                       register pressure, liveness and occupancy (docs/report.md)

Every user mistake (``IsagenError``) is reported as one line on stderr with exit code 2; there is
no traceback for one.  See docs/cli.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from isagen import __version__
from isagen.errors import IsagenError, SpecError

EXIT_USER_ERROR = 2


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USER_ERROR
    try:
        return args.run(args)
    except IsagenError as e:
        _error(e)
        return e.exit_code
    except KeyboardInterrupt:
        print("isagen: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:                    # `isagen list | head`
        sys.stderr.close()
        return 0


def _error(e) -> None:
    text = " ".join(str(e).split("\n"))
    print(f"isagen: error: {text}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="isagen", description="Generate raw AMD CDNA (gfx942/gfx950) assembly for AI kernels from YAML specs.")
    p.add_argument("--version", action="version", version=f"isagen {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    g = sub.add_parser("gen", help="generate .s and .co files from specs",
                       description="Build each spec for its targets: DIR/<kernel>.<target>.s and .co.")
    g.add_argument("specs", nargs="+", metavar="SPEC", help="spec files (.yaml) or directories of them")
    g.add_argument("--target", "-t", default="all",
                   help="gfx942, gfx950 or all (default: every target the spec lists)")
    g.add_argument("-o", "--out-dir", default="out", metavar="DIR", help="output directory (default: out/)")
    g.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="override a spec parameter (parsed per its declared type); repeatable")
    g.add_argument("--force", action="store_true",
                   help="emit kernels the generator rejects (the reason goes in the .s header)")
    g.add_argument("--asm-only", action="store_true", help="write the .s only (no assembler needed)")
    g.set_defaults(run=cmd_gen)

    ls = sub.add_parser("list", help="list specs and the generators' parameters")
    ls.add_argument("paths", nargs="*", metavar="SPEC_OR_DIR",
                    help="spec files or directories (default: the bundled specs)")
    ls.set_defaults(run=cmd_list)

    t = sub.add_parser("targets", help="show the target table")
    t.set_defaults(run=cmd_targets)

    tc = sub.add_parser("toolchain", help="show which assembler/linker each target uses")
    tc.set_defaults(run=cmd_toolchain)

    d = sub.add_parser("disasm", help="disassemble a code object with isagen's decoder",
                       description="Disassemble an AMDGPU code object (gfx942/gfx950) in llvm-objdump's layout, "
                                   "with the descriptor and metadata as comments.")
    d.add_argument("file", help="code object (.co / .hsaco)")
    d.add_argument("--kernel", "-k", default=None, help="only this kernel")
    d.add_argument("--target", "-t", default=None, help="the entry of an offload bundle holding several (gfx942 ...)")
    d.set_defaults(run=cmd_disasm)

    demo = sub.add_parser("demo", help="generate, assemble, inspect and run the fp32 axpy kernel")
    demo.add_argument("-o", "--out-dir", default=os.path.join("out", "demo"), metavar="DIR",
                      help="where the .s/.co go (default: out/demo)")
    demo.add_argument("--target", "-t", default="gfx942", help="gfx942 (default) or gfx950")
    demo.add_argument("-n", type=int, default=10_007, help="elements (default 10007: five workgroups and a tail)")
    demo.set_defaults(run=cmd_demo)

    from isagen.runtime import run as run_command      # light: the runtime loads when the command runs
    r = sub.add_parser("run", help="run a spec's kernel on random inputs and check it against its torch reference",
                       description="Build SPEC (cached), run it on random inputs of its shapes (hip on an AMD GPU, "
                                   "else the emulator), compare with the spec's reference, time it. Exit code 1 "
                                   "on a mismatch. See docs/runtime.md.")
    run_command.add_arguments(r)
    r.set_defaults(run=run_command.main)

    from isagen.report import command as report_command
    rp = sub.add_parser("report", help="register pressure, liveness and occupancy of a spec's kernel or any code object",
                        description="Where the registers go and what limits occupancy: declared vs used VGPR/AGPR/SGPR "
                                    "counts, occupancy and what to free for one more wave, live registers at every "
                                    "instruction (loops and branches), the peak and what is live there, a table per "
                                    "allocation, the instruction mix, LDS. See docs/report.md.")
    report_command.add_arguments(rp)
    rp.set_defaults(run=report_command.main)
    return p


# --------------------------------------------------------------------------- gen
def resources_line(program) -> str:
    """One line: register use, LDS and occupancy of a built program."""
    occ = program.occupancy()
    return (f"{program.vgprs} VGPRs, {program.agprs} AGPRs, {program.sgprs} SGPRs, LDS {program.lds_bytes} B; "
            f"occupancy {occ['waves_per_simd']} wave{'s' if occ['waves_per_simd'] != 1 else ''}/SIMD "
            f"(limited by {occ['limited_by']})")


def cmd_gen(args) -> int:
    from isagen.objects.emit import render_assembly
    from isagen.builders.spec import load_specs, parse_overrides
    from isagen.targets import get_target

    overrides = parse_overrides(args.defines)
    if args.target != "all":
        get_target(args.target)                     # unknown target: one error before anything is read
    specs = load_specs(args.specs, overrides)
    _check_unique(specs)

    jobs = []
    for spec in specs:
        if args.target != "all" and args.target.split(":")[0] not in spec.targets and len(specs) > 1:
            print(f"skip {spec.name}: the spec lists {', '.join(spec.targets)}, not {args.target}")
            continue
        jobs += [(spec, t) for t in spec.select_targets(args.target)]
    if not jobs:
        raise SpecError(f"no spec lists target {args.target}")
    problems = []                                   # parameter rules: reported once per spec, before building
    for spec, target in jobs:
        try:
            spec.validate(target)
        except IsagenError as e:
            if str(e) not in problems:
                problems.append(str(e))
    for p in problems:
        _error(p)
    if problems:
        return EXIT_USER_ERROR

    out = _output_dir(args.out_dir)
    failures, written, start = 0, 0, time.perf_counter()
    for i, (spec, target) in enumerate(jobs, 1):
        print(f"[{i}/{len(jobs)}] {spec.name} {target.name} … ", end="", flush=True)
        t0 = time.perf_counter()
        try:
            program = spec.build(target, force=args.force)
            asm = render_assembly(program)
            stem = f"{spec.name}.{target.name}"
            _write(out / f"{stem}.s", asm.encode())
            written += 1
            if not args.asm_only:
                from isagen.objects.toolchain import assemble
                _write(out / f"{stem}.co", assemble(asm, target, name=spec.name))
                written += 1
        except IsagenError as e:
            failures += 1
            print("FAILED", flush=True)
            _error(e)
            continue
        note = " (REJECTED: emitted with --force)" if program.rejected else ""
        print(f"ok {time.perf_counter() - t0:.2f} s{note} · {resources_line(program)}", flush=True)
        if program.rejected:
            print(f"    rejected: {program.rejected}", flush=True)
    elapsed = time.perf_counter() - start
    kinds = ".s" if args.asm_only else ".s and .co"
    if failures:
        print(f"{len(jobs) - failures} of {len(jobs)} builds succeeded; {written} files in {out}/ ({elapsed:.1f} s)")
        if len(jobs) > 1:
            _error(f"{failures} of {len(jobs)} builds failed")
        return EXIT_USER_ERROR
    print(f"wrote {written} files ({kinds}) to {out}/ in {elapsed:.1f} s")
    return 0


def _check_unique(specs) -> None:
    seen = {}
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
def cmd_list(args) -> int:
    from isagen.builders.registry import load_generators
    from isagen.builders.spec import bundled_specs_dir, load_spec

    paths = [Path(p) for p in args.paths] or [bundled_specs_dir()]
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
            print(f"      {pname:<{width}}  {p.type:<5}  {_plain(p.default):<{dwidth}}  {p.allowed():<{awidth}}  {p.doc}")
    return EXIT_USER_ERROR if errors else 0


def _plain(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- targets
def cmd_targets(args) -> int:
    from isagen.targets import TARGETS

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
def cmd_toolchain(args) -> int:
    from isagen.objects.toolchain import toolchain_report

    print(toolchain_report())
    return 0


def cmd_disasm(args) -> int:
    from isagen.objects.codeobject import read_code_object
    from isagen.objects.disasm import disassemble

    sys.stdout.write(disassemble(read_code_object(args.file, target=args.target), args.kernel))
    return 0


# --------------------------------------------------------------------------- demo
DEMO_SPEC = "axpy_f32.yaml"


def cmd_demo(args) -> int:
    from isagen.objects.emit import render_assembly
    from isagen.builders.spec import bundled_specs_dir, load_spec
    from isagen.objects.toolchain import assemble

    spec_path = bundled_specs_dir() / DEMO_SPEC
    spec = load_spec(spec_path)
    target = spec.select_targets(args.target)[0]
    print(f"isagen demo: {spec.description}")
    print(f"1. generate  {spec_path} -> {spec.name} for {target.name} ({spec.params.describe()})")
    t0 = time.perf_counter()
    program = spec.build(target)
    asm = render_assembly(program)
    out = _output_dir(args.out_dir)
    s_path = out / f"{spec.name}.{target.name}.s"
    co_path = out / f"{spec.name}.{target.name}.co"
    _write(s_path, asm.encode())
    print(f"   {resources_line(program)}")
    print(f"2. assemble  {s_path} -> {co_path}")
    co = assemble(asm, target, name=spec.name)
    _write(co_path, co)
    print(f"   {len(co)} bytes in {time.perf_counter() - t0:.2f} s (generate + assemble)")
    print(f"3. inspect   the first instructions of {s_path}:")
    body = asm.split(f"\n{spec.name}:\n", 1)[1].splitlines()
    for line in body[:14]:
        print(f"     {line}")
    print(f"     … ({len(program.instructions())} instructions in all)")
    return _demo_run(spec, target, co, args.n)


def _demo_run(spec, target, co: bytes, n: int) -> int:
    """Run the kernel on the default backend and compare with torch; say so plainly when it cannot run."""
    try:
        import torch
    except ImportError:
        print("4. run       not available: torch is not installed (pip install torch); nothing was run.")
        return 0
    try:
        from isagen.runtime.backends import choose_backend
        backend = choose_backend()
        if backend == "emu":
            from isagen.runtime.emu import Device  # noqa: F401  (the emulator must be importable)
        from isagen.api import build
    except ImportError as e:
        print(f"4. run       not available yet: {e.name or 'a runtime module'} cannot be imported ({e}); "
              "nothing was run.")
        return 0
    kernel = build(str(spec.path), target.name)
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
