"""Machine descriptions for the timing model, as data with their sources.

Fixed facts (CU and XCD counts, clocks, LDS, cache sizes, peak HBM bandwidth) come from AMD's data
sheets and white papers, cited per field in :data:`SOURCES`; the target facts (LDS banks, MFMA passes)
from :mod:`isagen.targets`.  Latencies and achievable bandwidth fractions are not published; they are
the model's *free parameters* (:class:`Params`), fit on AITER's calibration rows only
(bench/model_accuracy.py, AITER commit e4048607a535: bench/results/model_accuracy.json ``params``) -- their
defaults below are those fitted values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from isagen.model import ModelError
from isagen.targets import GFX942, GFX950, get_target


@dataclass(frozen=True)
class Machine:
    """One product: what the cycle model and the grid model read."""

    name: str
    target: str               # gfx942 / gfx950
    cus: int
    xcds: int
    clock_mhz: float          # peak engine clock
    hbm_tb_s: float           # peak HBM bandwidth
    l2_bytes_per_xcd: int     # L2 per XCD
    mall_bytes: int           # AMD Infinity Cache (memory-attached last level)
    l2_bytes_per_clk_xcd: int  # L2 read bandwidth per XCD (16 channels x 128 B/clk)
    l1_bytes_per_clk_cu: int  # vector L1 / texture path per CU
    simds_per_cu: int = 4

    @property
    def lds_bytes(self) -> int:
        return get_target(self.target).lds_bytes

    @property
    def lds_bytes_per_clk(self) -> int:
        """LDS bandwidth per CU: one dword per bank per clock (the target's bank count)."""
        return 4 * get_target(self.target).lds_banks

    @property
    def cus_per_xcd(self) -> int:
        return self.cus // self.xcds

    @property
    def hbm_bytes_per_clk(self) -> float:
        return self.hbm_tb_s * 1e12 / (self.clock_mhz * 1e6)

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / self.clock_mhz


MI300X = Machine("mi300x", GFX942.name, cus=304, xcds=8, clock_mhz=2100, hbm_tb_s=5.3,
                 l2_bytes_per_xcd=4 << 20, mall_bytes=256 << 20, l2_bytes_per_clk_xcd=2048,
                 l1_bytes_per_clk_cu=64)
MI308X = replace(MI300X, name="mi308x", cus=80)
MI325X = replace(MI300X, name="mi325x", hbm_tb_s=6.0)
MI350X = Machine("mi350x", GFX950.name, cus=256, xcds=8, clock_mhz=2200, hbm_tb_s=8.0,
                 l2_bytes_per_xcd=4 << 20, mall_bytes=256 << 20, l2_bytes_per_clk_xcd=2048,
                 l1_bytes_per_clk_cu=128)
MI355X = replace(MI350X, name="mi355x", clock_mhz=2400)

MACHINES: dict[str, Machine] = {m.name: m for m in (MI300X, MI308X, MI325X, MI350X, MI355X)}

SOURCES: dict[str, str] = {
    "mi300x": "AMD Instinct MI300X data sheet: 304 CUs, 2100 MHz peak engine clock, 192 GB HBM3 at 5.3 TB/s; "
              "AMD CDNA 3 white paper: 8 XCDs of 38 CUs, 4 MB L2 per XCD (16 channels x 128 B/clk), "
              "256 MB Infinity Cache, 64 KB LDS per CU; vector L1 64 B/clk/CU",
    "mi308x": f"AITER's tuned tables (cu_num=80 on {GFX942.name}); every other figure as MI300X [assumed: the "
              "80-CU part's clock and bandwidth are not in a source available here]",
    "mi325x": "AMD Instinct MI325X data sheet: as MI300X with 256 GB HBM3E at 6.0 TB/s",
    "mi350x": "AMD Instinct MI350X data sheet: 256 CUs, 2200 MHz, 288 GB HBM3E at 8 TB/s; AMD CDNA 4 white "
              "paper: 8 XCDs of 32 CUs, 4 MB L2 per XCD, 256 MB Infinity Cache, 160 KB LDS per CU, "
              "doubled L1/LDS read bandwidth",
    "mi355x": "AMD Instinct MI355X data sheet: as MI350X at 2400 MHz",
    "lds": f"LDS bandwidth = banks x 4 B/clk, banks from isagen.targets ({GFX942.lds_banks} on {GFX942.name}, "
           f"{GFX950.lds_banks} on {GFX950.name})",
    "mfma": "MFMA occupancy = passes x 4 cycles, passes from isagen.targets (LLVM's scheduling model)",
}


@dataclass(frozen=True)
class Params:
    """The model's free parameters (not in any data sheet): fitted on the calibration rows only."""

    mem_latency_ns: float = 250.0     # a global load's unloaded round trip (L2 miss) [fitted]
    l2_latency_ns: float = 300.0      # a load that hits L2 [estimate: between L1 and HBM]
    smem_latency_ns: float = 200.0    # a scalar load [estimate]
    lds_latency_cycles: int = 64      # a DS read's round trip [estimate]
    store_latency_ns: float = 300.0   # a store or atomic leaving vmcnt [estimate]
    hbm_efficiency: float = 0.80      # achievable fraction of peak HBM bandwidth [fitted]
    launch_us: float = 6.5            # a kernel launch's fixed cost: dispatch, first wave start, drain [fitted]
    # the clock with every matrix core busy, as a fraction of peak (an effective figure: it also absorbs what
    # slows matrix-bound code and is not modelled, e.g. LDS bank conflicts) [fitted]
    clock_fraction: float = 0.5
    issue_cycles: int = 4             # cycles between two instructions of one wave (one wait state)


DEFAULT_PARAMS = Params()


def sustained(machine: Machine, params: Params) -> Machine:
    """The machine at the clock it sustains under load (``Params.clock_fraction`` of its peak)."""
    if params.clock_fraction == 1.0:
        return machine
    return replace(machine, clock_mhz=machine.clock_mhz * params.clock_fraction)


#: the machine a command predicts for when none is named, per target
DEFAULT_MACHINE: dict[str, str] = {GFX942.name: "mi300x", GFX950.name: "mi355x"}


def get_machine(name: str) -> Machine:
    m = MACHINES.get(str(name).lower())
    if m is None:
        raise ModelError(f"--machine: unknown machine '{name}' (known: {', '.join(MACHINES)})")
    return m


def machine_for(target: str, cus: int) -> Machine:
    """The machine AITER's tuned rows mean by (gfx, cu_num): gfx942/304 -> MI300X, /80 -> MI308X,
    gfx950/256 -> MI355X (the tables do not tell MI350X from MI355X, nor MI300X from MI325X)."""
    for m in (MI300X, MI308X, MI355X):
        if m.target == target and m.cus == cus:
            return m
    raise ModelError(f"no machine with target {target} and {cus} CUs")
