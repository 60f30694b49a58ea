"""Primitives for memory-bound kernels (norms, softmax, rotary, activations): each emits a short,
commented instruction sequence into a ``KernelBuilder``.

* ``convert`` — 16-bit element types <-> fp32: unpack a dword of two bf16/f16, round back to nearest
  even and pack (gfx950 ``v_cvt_pk_bf16_f32``; gfx942 integer rounding, NaN -> the quiet NaN torch gives).
* ``rows``    — rows of a ``[rows, cols]`` tensor spread over the lanes of one or more waves: per-lane
  byte offsets for ``buffer_load_dwordx4`` / ``buffer_store_dwordx4`` (16 bytes per lane), a buffer
  resource aimed at one row whose ``num_records`` is exactly the row's bytes (tails cost no branch:
  lanes past the end load 0 and store nothing), tail masks, and the loop that walks a workgroup's rows.
* ``reduce``  — sum / max / unsigned max over the 64 lanes of a wave with DPP (no LDS), and across the
  waves that share a row through LDS (one barrier per reduction, double-buffered slots); RMSNorm's rstd.
* ``math``    — fp32 math on the VALU: exp (``v_exp_f32`` is 2^x), sigmoid, SiLU, GeLU (erf and tanh
  forms), tanh, with the accuracy each reaches stated in docs/kernels.md; the IEEE division ``div_f32``.
* ``fp8_model`` — the numpy model of e4m3 (FNUZ and OCP) encoding, per-token / static / MXFP8
  quantization and the fused kernels' float64 references: the quantization kernels' reference, written
  from the formats' definitions.
* ``occupancy`` — the ``min_occupancy`` floor every memory-bound kernel's ``check`` hook applies (one
  rule, one message; each kernel adds its advice).

Buffer resources themselves are ``isagen.tiles.buffer.BufferResource`` (shared with the GEMM tiles).
docs/kernels.md describes the kernels built from these.
"""
