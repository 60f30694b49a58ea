"""Helpers for the emulator tests: wrap a hand-written kernel body in the directives a code object
needs, assemble it with LLVM (isagen.objects.toolchain), and find instruction addresses with llvm-objdump.

The kernel ABI of every wrapped body: kernarg pointer in s[0:1], workgroup id x in s2, packed
work-item ids in v0; ``args`` lists the explicit arguments as ("ptr"|"i32"|"u32"|"f32", name).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

from isagen.objects.toolchain import assemble

CLANG, LLD = shutil.which("clang-19"), shutil.which("ld.lld-19")

_SIZES = {"ptr": 8, "i32": 4, "u32": 4, "f32": 4}


def kernel_source(name: str, body: str, *, args=(("ptr", "out"),), vgprs: int = 32, sgprs: int = 32,
                  agprs: int = 0, lds: int = 0, wg_ids: str = "x", target: str = "gfx942",
                  max_wg: int = 256, workitem_dims: int = 1, private: int = 0) -> str:
    """The .s text of one kernel with ``body`` (instructions; ``s_endpgm`` is appended)."""
    accum = (vgprs + 3) // 4 * 4
    total = accum + agprs
    offset, md = 0, []
    for kind, nm in args:
        size = _SIZES[kind]
        offset = (offset + size - 1) // size * size
        if kind == "ptr":
            md.append(f"      - {{.name: {nm}, .offset: {offset}, .size: 8, .value_kind: global_buffer, "
                      f".address_space: global}}")
        else:
            md.append(f"      - {{.name: {nm}, .offset: {offset}, .size: 4, .value_kind: by_value}}")
        offset += size
    ksize = (offset + 7) // 8 * 8
    ids = "".join(f"  .amdhsa_system_sgpr_workgroup_id_{d} {int(d in wg_ids)}\n" for d in "xyz")
    tid = {"gfx942": "gfx942:sramecc+:xnack-", "gfx950": "gfx950:sramecc+:xnack-"}[target]
    return f""".amdgcn_target "amdgcn-amd-amdhsa--{tid}"
.text
.globl {name}
.p2align 8
.type {name},@function
{name}:
{body}
  s_endpgm
.Lend_{name}:
.size {name}, .Lend_{name}-{name}
.rodata
.p2align 6
.amdhsa_kernel {name}
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_user_sgpr_count 2
{ids}  .amdhsa_system_vgpr_workitem_id {workitem_dims - 1}
  .amdhsa_next_free_vgpr {total}
  .amdhsa_next_free_sgpr {sgprs}
  .amdhsa_accum_offset {accum}
  .amdhsa_group_segment_fixed_size {lds}
  .amdhsa_private_segment_fixed_size {private}
  .amdhsa_enable_private_segment {int(private > 0)}
  .amdhsa_kernarg_size {ksize}
  .amdhsa_float_denorm_mode_32 3
  .amdhsa_float_denorm_mode_16_64 3
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.target: amdgcn-amd-amdhsa--{tid}
amdhsa.kernels:
  - .name: {name}
    .symbol: {name}.kd
    .kernarg_segment_size: {ksize}
    .kernarg_segment_align: 8
    .group_segment_fixed_size: {lds}
    .private_segment_fixed_size: {private}
    .wavefront_size: 64
    .sgpr_count: {sgprs}
    .vgpr_count: {total}
    .agpr_count: {agprs}
    .max_flat_workgroup_size: {max_wg}
    .args:
{chr(10).join(md) if md else '      []'}
...
.end_amdgpu_metadata
"""


def build(name: str, body: str, target: str = "gfx942", **kw) -> bytes:
    """Assemble and link one wrapped kernel into a code object."""
    return assemble(kernel_source(name, body, target=target, **kw), target, name=name)


def objdump_addresses(co: bytes) -> list[tuple[int, str]]:
    """(address, instruction text) of every instruction, from llvm-objdump-19 (the independent
    reference for the PCs the emulator reports)."""
    tool = shutil.which("llvm-objdump-19") or shutil.which("llvm-objdump")
    if tool is None:
        return []
    with tempfile.NamedTemporaryFile(suffix=".co") as f:
        f.write(co)
        f.flush()
        out = subprocess.run([tool, "-d", f.name], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s+(\S.*?)\s*//\s*([0-9A-Fa-f]+):", line)
        if m:
            rows.append((int(m.group(2), 16), m.group(1).strip()))
    return rows


def address_of(co: bytes, startswith: str, nth: int = 0) -> int:
    """Address of the nth instruction whose objdump text starts with ``startswith``."""
    hits = [a for a, t in objdump_addresses(co) if t.startswith(startswith)]
    if len(hits) <= nth:
        raise AssertionError(f"objdump shows no instruction #{nth} starting with {startswith!r}")
    return hits[nth]


def compile_opencl(source: str, opt: str = "-O3") -> bytes:
    """An OpenCL C source compiled by clang-19 for gfx942 and linked by ld.lld-19: a code object
    from an independent producer (callers skip when CLANG or LLD is None)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, obj, co = (os.path.join(tmp, f) for f in ("k.cl", "k.o", "k.co"))
        with open(src, "w") as f:
            f.write(source)
        subprocess.run([CLANG, "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx942", "-x", "cl", "-cl-std=CL2.0", opt,
                        "-nogpulib", "-c", src, "-o", obj], check=True, capture_output=True)
        subprocess.run([LLD, "-shared", obj, "-o", co], check=True, capture_output=True)
        with open(co, "rb") as f:
            return f.read()
