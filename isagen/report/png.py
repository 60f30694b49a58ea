"""The PNG form of the register report: live registers against the instruction index, one panel per
kernel (loops shaded, peaks marked, declared counts dashed), drawn with matplotlib.

matplotlib is an optional dependency: ``pip install 'isagen[report]'`` (or ``pip install matplotlib``).
"""

from __future__ import annotations

from isagen.errors import IsagenError
from isagen.report.html import COLORS, TITLES
from isagen.report.text import occupancy_cause


def write_png(doc: dict, path, dpi: int = 110) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise IsagenError("--format png needs matplotlib "
                          "(pip install 'isagen[report]' or pip install matplotlib)") from None
    kernels = doc["kernels"]
    fig, axes = plt.subplots(len(kernels), 1, figsize=(11, 3.8 * len(kernels)), squeeze=False)
    for ax, k in zip(axes[:, 0], kernels):
        _panel(ax, k)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=dpi, format="png")     # PNG whatever the file's extension says
    except OSError as e:
        raise IsagenError(f"{path}: cannot write the PNG: {e.strerror or e}") from None
    finally:
        plt.close(fig)


def _panel(ax, k: dict) -> None:
    insts = k["instructions"]
    xs = [i["index"] for i in insts]
    r = k["registers"]
    for lp in k["loops"]:
        for a, b in lp["runs"]:
            ax.axvspan(a - 0.5, b + 0.5, color="#f2c94c", alpha=0.18 + 0.1 * (lp["depth"] - 1), lw=0)
    for c in ("vgpr", "agpr", "sgpr"):
        if not r[c]["declared"] and not r[c]["used"]:
            continue
        ys = [i["live"][c] for i in insts]
        ax.plot(xs, ys, color=COLORS[c], lw=1.2, label=f"{TITLES[c]} live (peak {r[c]['peak_live']})",
                drawstyle="steps-mid")
        ax.axhline(r[c]["declared"], color=COLORS[c], ls="--", lw=0.9, alpha=0.7)
        p = k["peaks"][c]
        if p["instruction"] is not None:
            ax.plot([p["instruction"]], [p["count"]], "o", color=COLORS[c], ms=5)
            ax.annotate(f"{p['count']} @#{p['instruction']}", (p["instruction"], p["count"]),
                        textcoords="offset points", xytext=(5, 4), fontsize=8, color=COLORS[c])
    if k["loops"]:
        ax.plot([], [], color="#f2c94c", alpha=0.5, lw=6, label="loop")
    ax.plot([], [], color="#555", ls="--", lw=0.9, label="declared")
    ax.set_xlim(-0.5, max(1, len(insts)) - 0.5)
    ax.set_ylim(0, None)
    ax.set_xlabel("instruction index")
    ax.set_ylabel("live registers")
    ax.set_title(f"{k['name']} · {k['target']} · {occupancy_cause(k)}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    ax.grid(alpha=0.25)
