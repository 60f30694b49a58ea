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

from isagen.report.command import load_reports
from isagen.report.documents import render, report_code_object, report_program
from isagen.report.model import SCHEMA_VERSION, analyze, document
from isagen.report.png import write_png

__all__ = ["SCHEMA_VERSION", "analyze", "document", "report_program", "report_code_object", "report_path",
           "render", "write_png"]


def report_path(path, *, target: str | None = None, kernel: str | None = None, overrides=(),
                dynamic_lds: int = 0, force: bool = False) -> dict:
    """A spec (.yaml/.yml or a bundled spec's name: built for ``target`` or every target it lists) or
    a code object file."""
    return load_reports(path, target=target, kernel=kernel, overrides=overrides, dynamic_lds=dynamic_lds,
                        force=force)
