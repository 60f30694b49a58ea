"""Outputs: what a checked ``Program`` becomes, and the files isagen reads back.

``emit`` (Program → ``.s`` with ``.set`` register names, kernel descriptor and code-object v5
metadata) → ``toolchain`` (find LLVM, assemble, link → ``.co``) → ``cache`` (content-addressed code
objects for ``isagen.build``); ``codeobject`` reads any AMDGPU code object (isagen's or foreign) and
``disasm`` prints it through the ISA layer's decoder.
"""
