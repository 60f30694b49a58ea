"""Runtimes that launch isagen code objects: hip-python on AMD GPUs, the CPU emulator elsewhere.

Installed as ``isagen.runtime``.
"""
