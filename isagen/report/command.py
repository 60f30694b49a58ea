"""``isagen report SPEC.yaml|FILE.co|FILE.s``: the register-pressure report on the command line.

cli.py registers the subcommand with :func:`add_arguments` and runs :func:`main`; every user mistake
(no such file, not an ELF, not AMDGPU, unknown kernel, bad spec) is an ``IsagenError`` -- one line,
exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from isagen.api import resolve_spec
from isagen.builders.spec import load_spec
from isagen.errors import CodeObjectError, IsagenError, SpecError
from isagen.objects.toolchain import assemble, source_target_id
from isagen.report.documents import render, report_code_object
from isagen.report.model import analyze, document
from isagen.report.png import write_png
from isagen.report.sources import from_program
from isagen.targets import TARGETS, get_target

FORMATS = ("text", "json", "html", "png")
_EXT = {".txt": "text", ".json": "json", ".html": "html", ".htm": "html", ".png": "png"}


def add_arguments(p) -> None:
    p.add_argument("input", metavar="SPEC.yaml|FILE.co",
                   help="a kernel spec (built here; a bundled spec's name works too), an AMDGPU code object "
                        "(.co/.hsaco from isagen, Triton, hipcc, clang...) or assembly (.s: assembled first)")
    p.add_argument("--target", "-t", default=None,
                   help=f"specs: {', '.join(TARGETS)} or all (default: every target the spec lists); code objects: "
                        "must name the code object's own target")
    p.add_argument("--kernel", "-k", default=None, metavar="NAME", help="only this kernel")
    p.add_argument("--format", "-f", choices=FORMATS, default=None,
                   help="text (default), json, html or png (default: from -o's extension)")
    p.add_argument("-o", "--output", default=None, metavar="FILE", help="write here (default: stdout; png needs it)")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="override a spec parameter (repeatable)")
    p.add_argument("--force", action="store_true",
                   help="report a spec's kernel even when the generator rejects it (e.g. below min_occupancy)")
    p.add_argument("--dynamic-lds", type=_nonnegative, default=0, metavar="BYTES",
                   help="LDS the launch adds as dynamic shared memory (Triton's kernel.metadata.shared), "
                        "for the occupancy")
    p.add_argument("--listing", action="store_true", help="text: add the per-instruction listing with live counts")


def _nonnegative(text: str) -> int:
    try:
        v = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a byte count") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} is negative")
    return v


def load_reports(path, *, target: str | None = None, kernel: str | None = None, overrides=(),
                 dynamic_lds: int = 0, force: bool = False) -> dict:
    """The report document of a spec or a code object file (see ``isagen.report.report_path``)."""
    p = Path(path)
    if p.is_dir():
        raise IsagenError(f"{p}: is a directory; give a spec (.yaml) or a code object file")
    if p.suffix.lower() in (".yaml", ".yml") or (not p.exists() and not p.suffix and "/" not in str(path)):
        spec = load_spec(resolve_spec(path), overrides)
        if kernel is not None and kernel != spec.name:
            raise SpecError(f"{spec.path}: the spec builds kernel '{spec.name}', not '{kernel}'")
        if target and target != "all":
            get_target(target)
        kernels = []
        for t in spec.select_targets(target or "all"):
            program = spec.build(t, force=force)
            src = {"kind": "spec", "path": str(spec.path), "target_id": t.target_id}
            kernels.append(analyze(from_program(program, src)))
        return document(kernels)
    if not p.exists():
        raise CodeObjectError(f"{p}: no such file")
    if p.suffix.lower() in (".s", ".asm"):
        doc = report_code_object(_assemble(p, target), kernel=kernel, dynamic_lds=dynamic_lds, name=str(p))
    else:
        doc = report_code_object(p, kernel=kernel, dynamic_lds=dynamic_lds)
    if target and target != "all":
        want = get_target(target).name
        have = doc["kernels"][0]["target"] if doc["kernels"] else None
        if have and have != want:
            raise CodeObjectError(f"{p}: a {have} code object; --target {target} does not apply (leave it out)")
    return doc


def _assemble(path: Path, target: str | None) -> bytes:
    """Hand-written assembly: assembled and linked with the toolchain isagen uses, for the target its
    ``.amdgcn_target`` line names (or ``--target``)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise IsagenError(f"{path}: cannot read the assembly: {getattr(e, 'strerror', None) or e}") from None
    named = source_target_id(text)
    if target in (None, "all"):
        if named is None:
            raise IsagenError(f"{path}: no .amdgcn_target line; name the processor with --target {'|'.join(TARGETS)}")
        target = str(named)
    return assemble(text, target, name=path.stem)


def main(args) -> int:
    fmt = args.format or (_EXT.get(Path(args.output).suffix.lower(), "text") if args.output else "text")
    if fmt == "png" and not args.output:
        raise IsagenError("--format png needs -o FILE.png")
    doc = load_reports(args.input, target=args.target, kernel=args.kernel, overrides=args.defines,
                       dynamic_lds=args.dynamic_lds, force=args.force)
    if fmt == "png":
        write_png(doc, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
        return 0
    text = render(doc, fmt, listing=args.listing) if fmt == "text" else render(doc, fmt)
    if args.output:
        _write(Path(args.output), text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        raise IsagenError(f"{path}: cannot write the report: {e.strerror or e}") from None
