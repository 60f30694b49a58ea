"""Register-pressure reports (``isagen report``): where the registers go and what limits occupancy,
for isagen's own kernels and for any gfx942/gfx950 code object (Triton, hipcc, hand-written assembly).

    from isagen.report import report_program, report_code_object, render
    doc = report_program(program)                      # a built isagen Program
    doc = report_code_object("k.hsaco", kernel="matmul_kernel", dynamic_lds=16384)
    print(render(doc, "text"))                          # or "json", "html"; write_png(doc, "k.png")

A report is a JSON-ready dict (``schema_version`` 1; the keys are documented in docs/report.md):
declared vs used VGPR/AGPR/SGPR counts, occupancy and its limiting factor, liveness at every
instruction over the control-flow graph, the peak and the allocations live there, a table per
allocation, the instruction mix overall and per loop, and LDS.
"""

from __future__ import annotations

from isagen.report.model import SCHEMA_VERSION, analyze, document

__all__ = ["SCHEMA_VERSION", "analyze", "document", "report_program", "report_code_object", "report_path",
           "render", "write_png"]


def report_program(program, source: dict | None = None) -> dict:
    """Report of one built ``Program`` (a document with one kernel)."""
    from isagen.report.sources import from_program
    return document([analyze(from_program(program, source))])


def report_code_object(src, kernel: str | None = None, dynamic_lds: int = 0, name: str | None = None) -> dict:
    """Report of the kernels of a code object (path or bytes); ``kernel`` picks one by name."""
    from isagen.objects.codeobject import read_code_object
    from isagen.report.sources import from_kernel
    co = read_code_object(src, name)
    if kernel is not None:
        kernels = [co.kernel(kernel)]
    else:
        kernels = list(co.kernels.values())
        if not kernels:
            from isagen.errors import CodeObjectError
            raise CodeObjectError(f"{co.source}: no kernels (no <name>.kd descriptor symbol)")
    return document([analyze(from_kernel(co, k, dynamic_lds)) for k in kernels])


def report_path(path, *, target: str | None = None, kernel: str | None = None, overrides=(),
                dynamic_lds: int = 0, force: bool = False) -> dict:
    """A spec (.yaml/.yml or a bundled spec's name: built for ``target`` or every target it lists) or
    a code object file."""
    from isagen.report.command import load_reports
    return load_reports(path, target=target, kernel=kernel, overrides=overrides, dynamic_lds=dynamic_lds,
                        force=force)


def render(doc: dict, fmt: str = "text", **options) -> str:
    if fmt == "text":
        from isagen.report.text import render_text
        return render_text(doc, **options)
    if fmt == "json":
        from isagen.report.json_out import render_json
        return render_json(doc)
    if fmt == "html":
        from isagen.report.html import render_html
        return render_html(doc)
    raise ValueError(f"unknown report format '{fmt}' (text, json, html; png through write_png)")


def write_png(doc: dict, path) -> None:
    from isagen.report.png import write_png as _write
    _write(doc, path)
