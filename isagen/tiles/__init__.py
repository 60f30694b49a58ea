"""Tile primitives for matrix kernels (HipKittens-style named tiles over raw assembly).

* ``buffer``       — buffer resources (V#): base, num_records, advancing windows, ``OOB_OFFSET``.
* ``window``       — where a workgroup's buffer windows start: ``row_window``, ``column_window``,
  ``tile_window``, ``LeadingPad`` (the leading partial K-tile's shift).
* ``lanexpr``      — lane expressions: one formula for the numpy layout model and the VALU code.
* ``lds_layout``   — LDS tile layouts with an XOR swizzle chosen by the bank analysis.
* ``global_to_lds`` — ``buffer_load ... lds``: global tile -> LDS tile, swizzled through the global side.
* ``lds_to_reg``   — LDS -> MFMA operand fragments (``ds_read_b128``/``b64``, transposed reads).
* ``registers``    — register views: ``Accumulators`` (MFMA output tiles), ``FragmentRegs`` (operand
  fragments x k-slices).
* ``mma``          — MFMA tile products and the accumulator layout.
* ``epilogue``     — accumulators -> fp32/bf16 stores (RNE rounding): ``store_accumulators``.
* ``order``        — chiplet-aware workgroup order (HipKittens' W/C remap).
* ``schedule``     — ops and the orderings schedules use (clusters, interleave).
* ``kloop``        — the double-buffered loop skeleton (``double_buffered_loop``) and ``loop_bodies``.

docs/gemm.md describes them with the GEMM that uses them, and which pieces a new matrix kernel
(attention, FP8 GEMM) takes.
"""
