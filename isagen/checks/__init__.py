"""The checks every finished kernel passes, in the order ``KernelBuilder.finish()`` runs them.

::

    Program.items ─┬─ pipeline.register_problems   leaks, unified VGPR+AGPR file, LDS size
                   ├─ hazards.insert_nops          the minimum s_nops (GCNHazardRecognizer's table)
                   ├─ hazards.check_hazards        an independent re-check of the padded program
                   ├─ waits.check_waits            every outstanding load waited for, across the CFG
                   └─ lds_banks.check_program      no bank conflict in DS / LDS-DMA lane addresses

``cfg`` is the control-flow graph the hazard and wait passes walk; ``occupancy`` turns register and
LDS counts into waves per SIMD (the register-limit side of the checks and the reports).
Each pass depends only on the ISA layer (``isagen.isa``, ``isagen.targets``), never on the builders.
"""
