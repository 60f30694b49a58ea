"""A timing model of AMD Instinct GPUs (MI300X, MI308X, MI325X, MI350X, MI355X) for any code object.

Its predictions are **predictions**, never measurements: a cycle model of one CU's four SIMDs driven by
the emulator's per-wave instruction streams, extrapolated over the grid, with a few free parameters fit
to AITER's published tuned-GEMM timings (docs/model.md states what is modelled and how accurate it is).

* :mod:`isagen.model.machines` -- the machine descriptions (data, with their sources);
* :mod:`isagen.model.trace` -- per-wave instruction streams from an emulator launch;
* :mod:`isagen.model.cu` -- the cycle model of one CU;
* :mod:`isagen.model.grid` -- rounds of workgroups over the chip, the tail, XCD placement;
* :mod:`isagen.model.workloads` -- how a code object is launched at a shape (AITER bf16 GEMMs, any
  kernel with an explicit launch), steady-state extrapolation, the prediction.
"""

from isagen.errors import IsagenError


class ModelError(IsagenError):
    """A problem with the timing model's input: unknown machine, shape, kernel family."""


__all__ = ["ModelError"]
