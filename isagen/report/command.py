"""``isagen report SPEC.yaml|FILE.co|FILE.s``: the register-pressure report on the command line.

:data:`command` is the command; cli.py adds it to the ``isagen`` group.  Every user mistake (no
such file, not an ELF, not AMDGPU, unknown kernel, bad spec) is an ``IsagenError`` -- one line, exit
code 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from isagen import cmdline
from isagen.api import resolve_spec
from isagen.builders.spec import load_spec
from isagen.cmdline import BadValue, Choice, argument, option
from isagen.errors import CodeObjectError, IsagenError, SpecError
from isagen.objects.toolchain import assemble, source_target_id
from isagen.progress import Progress
from isagen.report.documents import render, report_code_object
from isagen.report.model import analyze, document
from isagen.report.png import write_png
from isagen.report.sources import from_program
from isagen.targets import TARGETS, get_target

FORMATS = ("text", "json", "html", "png")
_EXT = {".txt": "text", ".json": "json", ".html": "html", ".htm": "html", ".png": "png"}


def byte_count(text: str) -> int:
    """A non-negative byte count (``0x`` and ``0o`` prefixes work)."""
    try:
        v = int(text, 0)
    except ValueError:
        raise BadValue(f"'{text}' is not a byte count") from None
    if v < 0:
        raise BadValue(f"{v} is negative")
    return v


def load_reports(path, *, target: str | None = None, kernel: str | None = None, overrides=(),
                 dynamic_lds: int = 0, force: bool = False, on_kernel=None) -> dict:
    """The report document of a spec or a code object file (see ``isagen.report.report_path``).
    ``on_kernel(done, total)`` is told how many of a spec's kernels are built and analysed: before the
    first and after each."""
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
        selected = spec.select_targets(target or "all")
        if on_kernel is not None:
            on_kernel(0, len(selected))
        for t in selected:
            program = spec.build(t, force=force)
            src = {"kind": "spec", "path": str(spec.path), "target_id": t.target_id}
            kernels.append(analyze(from_program(program, src)))
            if on_kernel is not None:
                on_kernel(len(kernels), len(selected))
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


# its one-line help is in cli.LAZY, listed without importing this module
@cmdline.command("report")
@argument("input", metavar="SPEC.yaml|FILE.co")
@option("--target", "-t", default=None, metavar="TARGET",
              help=f"specs: {', '.join(TARGETS)} or all (default: every target the spec lists); code objects: "
                   "must name the code object's own target")
@option("--kernel", "-k", default=None, metavar="NAME", help="only this kernel")
@option("--format", "-f", "fmt", type=Choice(FORMATS), default=None,
              help="text (default), json, html or png (default: from -o's extension)")
@option("-o", "--output", default=None, metavar="FILE", help="write here (default: stdout; png needs it)")
@option("-D", "defines", multiple=True, metavar="NAME=VALUE", help="override a spec parameter (repeatable)")
@option("--force", is_flag=True,
              help="report a spec's kernel even when the generator rejects it (e.g. below min_occupancy)")
@option("--dynamic-lds", type=byte_count, default=0, metavar="BYTES",
              help="LDS the launch adds as dynamic shared memory (Triton's kernel.metadata.shared), for the occupancy")
@option("--listing", is_flag=True, help="text: add the per-instruction listing with live counts")
def command(input, target, kernel, fmt, output, defines, force, dynamic_lds, listing) -> int:  # noqa: A002 -- the argument's name in the help
    """Where the registers go and what limits occupancy: declared vs used VGPR/AGPR/SGPR counts,
    occupancy and what to free for one more wave, live registers at every instruction (loops and
    branches), the peak and what is live there, a table per allocation, the instruction mix, LDS.

    SPEC.yaml|FILE.co is a kernel spec (built here; a bundled spec's name works too), an AMDGPU code
    object (.co/.hsaco from isagen, Triton, hipcc, clang...) or assembly (.s: assembled first).
    Writing html or png shows a progress bar on a terminal.  See docs/report.md."""
    fmt = fmt or (_EXT.get(Path(output).suffix.lower(), "text") if output else "text")
    if fmt == "png" and not output:
        raise IsagenError("--format png needs -o FILE.png")
    # the bar counts the kernels built and analysed, then the rendering; only for the formats written to
    # a file (text and json are the output itself, and quick to render)
    with Progress("report", enabled=fmt in ("html", "png")) as progress:
        doc = load_reports(input, target=target, kernel=kernel, overrides=defines, dynamic_lds=dynamic_lds,
                           force=force, on_kernel=lambda done, total: progress.update(done, total + 1))
        built = len(doc["kernels"])
        progress.update(built, built + 1, status=f"rendering {fmt}")
        if fmt == "png":
            write_png(doc, output)
        else:
            text = render(doc, fmt, listing=listing) if fmt == "text" else render(doc, fmt)
            if output:
                _write(Path(output), text)
    if output:
        print(f"wrote {output}", file=sys.stderr)
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
