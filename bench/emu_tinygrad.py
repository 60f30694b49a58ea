"""Run one GEMM code object on tinygrad's AMD emulator (``test/mockgpu/amd/emu.py``), for
``bench/emu_speed.py --tinygrad PATH``.  Not a test of isagen: the other emulator, driven the way
tinygrad's own mock GPU drives it, on the same code object and arguments as isagen's rows.

tinygrad from source, pinned (an optional dependency of this benchmark only)::

    commit a9069c177a9da9cca18593edf55acd2e6073cca6  (2026-08-22, "make decomp pass SPEC=2")
    git clone https://github.com/tinygrad/tinygrad && cd tinygrad && git checkout a9069c17
    # or from a bare mirror:  git --git-dir=MIRROR archive a9069c17 | tar -x -C /tmp/tinygrad

tinygrad needs no pip packages, only a C compiler: its emulator compiles each distinct instruction
into a C function with tinygrad's CPU backend (``$CC``, default ``clang``) and sets DAZ/FTZ with a
helper it builds with ``clang``.  Where only ``clang-19``/``clang-22`` exist, ``emu_speed.py`` puts a
``clang`` link to one of them first on ``PATH`` and sets ``CC`` for this process.

How the emulator is driven.  tinygrad's mock GPU (``test/mockgpu/amd/amdgpu.py``,
``_exec_dispatch_direct``) decodes a PM4 dispatch into ``run_asm(prg_addr, prg_sz, gx, gy, gz, lx, ly,
lz, args_addr, rsrc2, scratch_size, arch, user_data)``: ``prg_addr`` is a host address holding the
kernel's machine code (its entry point), memory instructions use host addresses directly (its
``vmem`` buffer is based at address 0), the LDS size comes from ``rsrc2``'s GRANULATED_LDS_SIZE
field (the runtime ORs the dispatch's LDS bytes in, as hardware registers take it), the user SGPRs
from ``user_data`` (absent: ``s[0:1]`` = the kernarg address) and the workgroup ids follow them as
``rsrc2`` enables.  This script does the same without the PM4 layer: the caller passes the code
object's ``.text`` bytes, the entry's offset in them, the kernel descriptor's ``rsrc2``, the dynamic
LDS bytes, the grid and block, and the kernarg layout (offset and value, the three matrix pointers
named ``A``, ``B``, ``C``); A and B come as ``.npy`` (bf16 bits as uint16), C goes back as ``.npy``
for the caller's check against torch.  The kernel starts at its entry, so a kernarg-preload
kernel runs its compatibility prologue (``s_load`` of the preloaded SGPRs from ``s[0:1]``) as
firmware without preload support does.

    python bench/emu_tinygrad.py JOB.json   # prints one JSON line: times and the C file written

Timings: ``import_s`` (importing the emulator, which imports tinygrad), ``cold_s`` (the first
``run_asm`` in the process with an empty tinygrad compile cache: decode and compile every
instruction, then run), ``warm_s`` (further ``run_asm`` calls, all instructions compiled), each with
the CPU time of the process and of the compilers it ran beside the wall time, and the process's peak
resident memory.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import numpy as np

PINNED_COMMIT = "a9069c177a9da9cca18593edf55acd2e6073cca6"


def _addr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


def _peak_rss_mib() -> float:
    """This process's own peak resident memory: /proc's VmHWM (reset by exec; getrusage's ru_maxrss
    of a child keeps the forking parent's size)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(job_path: str) -> int:
    job = json.loads(open(job_path).read())
    sys.path.insert(0, job["tinygrad"])
    t, cpu = time.perf_counter(), time.process_time()
    from test.mockgpu.amd.emu import run_asm  # tinygrad's emulator
    import_s, import_cpu = time.perf_counter() - t, time.process_time() - cpu

    a = np.load(job["a"])
    b = np.load(job["b"])
    c = np.zeros(tuple(job["c_shape"]), np.uint16)
    bufs = {"A": a, "B": b, "C": c}
    kernarg = np.zeros(max(job["kernarg_size"], 8) + 64, np.uint8)    # 16-byte aligned, zero padded
    for off, size, val in job["kernarg"]:
        v = _addr(bufs[val]) if isinstance(val, str) else int(val)
        kernarg[off: off + size] = np.frombuffer(int(v & ((1 << (8 * size)) - 1)).to_bytes(size, "little"),
                                                 np.uint8)
    text = np.frombuffer(open(job["text"], "rb").read(), np.uint8)
    code = np.zeros(len(text) + 64, np.uint8)                        # the decoder reads 16 bytes ahead
    code[: len(text)] = text
    prg = _addr(code) + job["entry_offset"]
    lds_granules = -(-job["lds_bytes"] // 512)                        # gfx9: 128-dword LDS granules
    rsrc2 = (job["rsrc2"] & ~(0x1FF << 15)) | (lds_granules << 15)
    gx, gy, gz = job["grid"]
    lx, ly, lz = job["block"]

    def cpu_now() -> float:      # this process and its finished children (clang compiling instructions)
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    def launch() -> tuple[float, float]:
        t, cpu = time.perf_counter(), cpu_now()
        rc = run_asm(prg, len(text) - job["entry_offset"], gx, gy, gz, lx, ly, lz, _addr(kernarg), rsrc2,
                     0, "cdna", None)
        if rc != 0:
            raise RuntimeError(f"run_asm returned {rc}")
        return time.perf_counter() - t, cpu_now() - cpu

    cold = launch()
    np.save(job["c_out"], c)
    c[:] = 0
    warm = [launch() for _ in range(job["reps"])]
    same = bool(not warm or np.array_equal(c, np.load(job["c_out"])))
    print(json.dumps({"import_s": import_s, "import_cpu_s": import_cpu, "cold_s": cold[0], "cold_cpu_s": cold[1],
                      "warm_s": [w for w, _ in warm], "warm_cpu_s": [u for _, u in warm],
                      "warm_same_as_cold": same, "rsrc2": rsrc2,
                      "peak_rss_mib": _peak_rss_mib(),
                      "cc": os.environ.get("CC", "clang"), "commit": job.get("commit")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
