"""Runtimes that launch isagen code objects: hip-python on AMD GPUs, the CPU emulator elsewhere.

``backends/`` holds both backends behind one ``Backend`` protocol and the choice between them;
``gpu.py`` detects the GPU; ``emu/`` is the emulator; ``run.py`` is ``isagen run``; ``torch_ops.py``
registers the torch operators.

Installed as ``isagen.runtime``.
"""
