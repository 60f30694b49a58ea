"""Report documents: made from a built ``Program`` or a code object, rendered as text, JSON or HTML
(PNG: ``isagen.report.png.write_png``).

The functions ``isagen.report`` exports; here rather than in the package's ``__init__`` so that the
command-line module (``report/command.py``) can use them without importing its own package back.
"""

from __future__ import annotations

from isagen.errors import CodeObjectError
from isagen.objects.codeobject import read_code_object
from isagen.report.html import render_html
from isagen.report.json_out import render_json
from isagen.report.model import analyze, document
from isagen.report.sources import from_kernel, from_program
from isagen.report.text import render_text


def report_program(program, source: dict | None = None) -> dict:
    """Report of one built ``Program`` (a document with one kernel)."""
    return document([analyze(from_program(program, source))])


def report_code_object(src, kernel: str | None = None, dynamic_lds: int = 0, name: str | None = None) -> dict:
    """Report of the kernels of a code object (path or bytes); ``kernel`` picks one by name."""
    co = read_code_object(src, name)
    if kernel is not None:
        kernels = [co.kernel(kernel)]
    else:
        kernels = list(co.kernels.values())
        if not kernels:
            raise CodeObjectError(f"{co.source}: no kernels (no <name>.kd descriptor symbol)")
    return document([analyze(from_kernel(co, k, dynamic_lds)) for k in kernels])


def render(doc: dict, fmt: str = "text", **options) -> str:
    if fmt == "text":
        return render_text(doc, **options)
    if fmt == "json":
        return render_json(doc)
    if fmt == "html":
        return render_html(doc)
    raise ValueError(f"unknown report format '{fmt}' (text, json, html; png through write_png)")
