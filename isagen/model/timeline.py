"""The wave timeline of one CU: each wave's issued instructions over time, by kind (PNG or HTML).

The picture HipKittens uses to explain its schedules: one row per wave (grouped by SIMD), a box per
instruction from its issue to its pipe's release (an MFMA spans its passes x 4 cycles), gaps where the
wave waits.  It shows the model's schedule -- a prediction, not a hardware trace.
"""

from __future__ import annotations

import html

from isagen.errors import IsagenError

COLORS = {"mfma": "#d62728", "valu": "#1f77b4", "trans": "#17becf", "salu": "#7f7f7f", "ds": "#2ca02c",
          "vmem_load": "#ff7f0e", "vmem_store": "#8c564b", "lds_dma": "#e377c2", "smem": "#bcbd22",
          "waitcnt": "#444444", "barrier": "#000000", "nop": "#c7c7c7", "branch": "#9467bd", "end": "#000000",
          "other": "#aaaaaa"}


def _rows(events):
    waves = sorted({(s, w) for w, s, *_ in events})
    return {key: i for i, key in enumerate(waves)}


def write_png(events, path, title: str = "") -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise IsagenError("a PNG timeline needs matplotlib (pip install matplotlib); use .html") from None
    rows = _rows(events)
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(rows) + 1.6))
    by_kind: dict[str, list] = {}
    for w, s, t0, t1, kind in events:
        by_kind.setdefault(kind, []).append((rows[(s, w)], t0, max(t1 - t0, 1.0)))
    for kind, boxes in by_kind.items():
        # the matrix core's occupancy in the lower half of a wave's row, every instruction's issue above it
        y0 = 0.0 if kind == "mfma" else -0.42
        for r, t0, d in boxes:
            ax.broken_barh([(t0, d if kind == "mfma" else min(d, 4.0))], (r + y0, 0.4),
                           color=COLORS.get(kind, "#aaa"), lw=0)
        ax.plot([], [], color=COLORS.get(kind, "#aaa"), lw=6, label=kind)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"SIMD{s} wave{w}" for (s, w) in rows])
    ax.invert_yaxis()
    ax.set_xlabel("cycles (model); per row: issued instructions above, the matrix core's busy time below")
    ax.set_title(title or "wave timeline of one CU (isagen.model prediction)", fontsize=10)
    ax.legend(fontsize=7, ncol=8, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110, format="png")
    except OSError as e:
        raise IsagenError(f"{path}: cannot write the PNG: {e.strerror or e}") from None
    finally:
        plt.close(fig)


def html_text(events, title: str = "") -> str:
    rows = _rows(events)
    t_end = max((t1 for *_, t1, _ in events), default=1.0)
    width, rh, left = 1400, 18, 110
    scale = (width - left - 10) / t_end
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{rh * len(rows) + 40}" '
             f'font-family="sans-serif" font-size="11">']
    for (s, w), r in rows.items():
        parts.append(f'<text x="4" y="{r * rh + 13}">SIMD{s} wave{w}</text>')
    for w, s, t0, t1, kind in events:
        r = rows[(s, w)]
        y = r * rh + (rh // 2 if kind == "mfma" else 1)
        t1 = t1 if kind == "mfma" else min(t1, t0 + 4)
        parts.append(f'<rect x="{left + t0 * scale:.1f}" y="{y}" width="{max((t1 - t0) * scale, 0.5):.1f}" '
                     f'height="{rh // 2 - 1}" fill="{COLORS.get(kind, "#aaa")}"><title>{kind} {t0:.0f}-{t1:.0f}</title>'
                     f'</rect>')
    parts.append(f'<text x="{left}" y="{rh * len(rows) + 30}">0 .. {t_end:.0f} cycles</text></svg>')
    legend = " ".join(f'<span style="background:{c};color:#fff;padding:1px 4px">{k}</span>' for k, c in COLORS.items())
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>"
            f"<h3>{html.escape(title or 'wave timeline of one CU')}</h3><p>A prediction of isagen's timing model, "
            f"not a hardware trace.</p><p>{legend}</p>{''.join(parts)}</body></html>\n")


def write(events, path, title: str = "") -> None:
    p = str(path)
    if p.endswith((".html", ".htm")):
        try:
            with open(p, "w") as f:
                f.write(html_text(events, title))
        except OSError as e:
            raise IsagenError(f"{path}: cannot write the HTML: {e.strerror or e}") from None
    else:
        write_png(events, p, title)
