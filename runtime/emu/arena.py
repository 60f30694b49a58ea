"""Where the emulated device's global memory sits in the GPU virtual address space.

A leaf module: the device (device.py) places its allocations here, and the CUDA kernels
(cuda_kernels.py), which the semantics modules import, turn addresses into arena offsets with it.
"""

ARENA_BASE = 0x7F00_0000_0000      # fits in the 48-bit base of a buffer resource
