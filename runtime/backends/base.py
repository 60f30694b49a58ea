"""The ``Backend`` protocol: what ``isagen.api.Kernel.run`` needs of a place that runs kernels.

Its own module (importing nothing of the backends) so that each backend can name the protocol it
implements and the selection in ``isagen.runtime.backends`` can import the backends, without a cycle.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Backend(Protocol):
    """Runs built kernels (``isagen.Kernel``) on torch tensors."""

    name: str                       # what ``ISAGEN_BACKEND`` / ``backend=`` call it: "hip" or "emu"

    def check_device(self, name: str, tensor) -> None:
        """Raise ``LaunchError`` when tensor argument ``name`` lives where this backend cannot use it."""
        ...

    def run(self, kernel, tensors: dict, values: dict, grid, block, *, timing: bool = False,
            outputs=()) -> float | None:
        """Launch ``kernel`` with ``grid`` workgroups of ``block`` work-items.  ``tensors`` maps tensor
        names to tensors, ``values`` kernel argument names to tensors or numbers; the tensors named in
        ``outputs`` hold the kernel's results afterwards.  Returns the time in ms when ``timing``, else None."""
        ...
