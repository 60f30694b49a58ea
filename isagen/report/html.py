"""The HTML form of the register report: one self-contained page (inline CSS, inline SVG, a few lines
of inline script for the cursor read-out; nothing fetched from anywhere).

Per kernel: the counts and occupancy, warnings, a plot of live VGPRs/AGPRs/SGPRs against the
instruction index (loops shaded, peaks marked, declared counts dashed) beside the annotated listing
(live counts per instruction, loop depth, peaks highlighted), the peaks with what is live there, the
loops with their mix, and the allocation table.  Clicking the plot scrolls the listing there.
"""

from __future__ import annotations

import json
from html import escape

from isagen.report.text import occupancy_cause

COLORS = {"vgpr": "#1f77b4", "agpr": "#d62728", "sgpr": "#2ca02c"}
TITLES = {"vgpr": "VGPR", "agpr": "AGPR", "sgpr": "SGPR"}

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#fafafa}
header.top{background:#222;color:#eee;padding:10px 20px}
header.top h1{font-size:18px;margin:0}
section.kernel{padding:12px 20px;border-bottom:2px solid #ccc}
h2{font-size:17px;margin:6px 0}
h3{font-size:15px;margin:14px 0 6px}
table{border-collapse:collapse}
td,th{padding:2px 8px;text-align:right;border-bottom:1px solid #e4e4e4;white-space:nowrap}
th{background:#eee}
td.l,th.l{text-align:left}
.cards{display:flex;flex-wrap:wrap;gap:16px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px;max-width:640px}
.card ul{margin:6px 0;padding-left:20px}
.warn{color:#a40000}
.note{color:#555}
.main{display:grid;grid-template-columns:minmax(520px,46%) 1fr;gap:16px;margin-top:12px}
.plot{position:sticky;top:8px;align-self:start;background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px}
.readout{font:12px ui-monospace,monospace;min-height:2.8em;white-space:pre-wrap;color:#333}
.listing{max-height:80vh;overflow:auto;background:#fff;border:1px solid #ddd;border-radius:6px}
.listing table{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;width:100%}
.listing td{border-bottom:none;padding:0 6px}
.listing td.t{text-align:left;white-space:pre}
.listing tr.lab td{color:#777;text-align:left}
.listing tr.dead td{color:#aaa}
.listing tr.peak td{background:#fff3b0}
.listing tr.cur td{background:#dbeafe}
.listing tr.d1 td.t{border-left:3px solid #f2c94c}
.listing tr.d2 td.t{border-left:6px solid #f2994a}
.listing tr.d3 td.t{border-left:9px solid #eb5757}
.cmt{color:#777}
.v{color:#1f77b4}.a{color:#d62728}.s{color:#2ca02c}
"""

_JS = """
document.querySelectorAll('svg.liveplot').forEach(function(svg){
  var k=svg.dataset.kernel, n=+svg.dataset.n, x0=+svg.dataset.x0, w=+svg.dataset.w;
  var data=JSON.parse(document.getElementById(k+'-data').textContent);
  var out=document.getElementById(k+'-readout'), cur=null, line=svg.querySelector('.cursor');
  function at(ev){var r=svg.getBoundingClientRect(), vb=svg.viewBox.baseVal;
    var x=(ev.clientX-r.left)*vb.width/r.width; return Math.max(0,Math.min(n-1,Math.round((x-x0)/w*(n-1))));}
  svg.addEventListener('mousemove',function(ev){var i=at(ev), d=data[i];
    line.setAttribute('x1',x0+w*i/Math.max(1,n-1)); line.setAttribute('x2',x0+w*i/Math.max(1,n-1));
    line.style.display='';
    out.textContent='#'+i+'  VGPR '+d[0]+'  AGPR '+d[1]+'  SGPR '+d[2]+'\\n'+d[3];});
  svg.addEventListener('click',function(ev){var i=at(ev), row=document.getElementById(k+'-i'+i);
    if(!row) return; if(cur) cur.classList.remove('cur'); row.classList.add('cur'); cur=row;
    row.scrollIntoView({block:'center'});});
});
"""


def render_html(doc: dict) -> str:
    kernels = doc["kernels"]
    title = ", ".join(f"{k['name']} ({k['target']})" for k in kernels)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>isagen register report: {escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f'<header class="top"><h1>isagen register report</h1><div>{escape(doc["generator"])} · schema '
        f'{doc["schema_version"]} · {len(kernels)} kernel{"s" if len(kernels) != 1 else ""}: '
        f'{escape(title)}</div></header>',
    ]
    for n, k in enumerate(kernels):
        parts.append(_kernel(k, f"k{n}"))
    parts.append(f"<script>{_JS}</script></body></html>")
    return "\n".join(parts) + "\n"


def _kernel(k: dict, kid: str) -> str:
    r = k["registers"]
    src = k["source"]
    h = [f'<section class="kernel" id="{kid}">',
         f"<h2>{escape(k['name'])} · {escape(k['target'])}</h2>",
         f"<div class=note>{escape(src.get('path') or '(in memory)')} ({escape(src.get('kind', ''))}"
         f"{', ' + escape(src['target_id']) if src.get('target_id') else ''}) · {k['instruction_count']} instructions"
         f"{' (' + str(k['unreachable_instructions']) + ' unreachable)' if k['unreachable_instructions'] else ''}"
         f", {k['code_bytes']} bytes · workgroup {k['workgroup_size']} work-items</div>",
         '<div class="cards">']
    # registers card
    rows = "".join(
        f"<tr><td class=l><span class={c[0]}>&#9632;</span> {TITLES[c]}</td><td>{r[c]['declared']}</td>"
        f"<td>{r[c]['used']}</td>"
        f"<td>{r[c]['peak_live']}</td><td class=l>{_iref(kid, k['peaks'][c]['instruction'])}</td></tr>"
        for c in ("vgpr", "agpr", "sgpr"))
    h.append('<div class="card"><table><tr><th class=l>registers</th><th>declared</th><th>used</th><th>peak live</th>'
             f'<th class=l>at</th></tr>{rows}</table>'
             f"<div class=note>unified file {r['unified_vgprs']} → {r['allocated_vgprs']} per lane"
             f"{' (accum_offset ' + str(r['accum_offset']) + ')' if r['agpr']['declared'] else ''}; "
             f"SGPRs {r['sgpr']['declared']} + {r['reserved_sgprs']} reserved → {r['allocated_sgprs']}; "
             f"set at launch: {escape(r['initialized'])}</div></div>")
    # occupancy card
    o = k["occupancy"]
    nxt = "".join(f"<li>for {o['waves_per_simd'] + 1} waves ({escape(s['factor'])}): {escape(s['detail'])}</li>"
                  for s in o["to_next_wave"]) or "<li>at the hardware maximum</li>"
    lim = " · ".join(f"{escape(f)} {w}" for f, w in o["limits"].items())
    lds = k["lds"]
    h.append(f'<div class="card"><b>occupancy: {escape(occupancy_cause(k))}</b><div class=note>limits (waves/SIMD): '
             f"{lim}</div><ul>{nxt}</ul>"
             f"<div>LDS {lds['static_bytes']} B"
             f"{' + ' + str(lds['dynamic_bytes']) + ' B dynamic' if lds['dynamic_bytes'] else ''}"
             f" → {lds['allocated_bytes']} of {lds['target_bytes']} B per CU</div></div>")
    h.append("</div>")
    for w in k["warnings"]:
        h.append(f"<div class=warn>&#9888; {escape(w)}</div>")
    for x in k["notes"]:
        h.append(f"<div class=note>&#8226; {escape(x)}</div>")

    h.append('<div class="main">')
    h.append(f'<div class="plot">{svg_plot(k, kid)}<div class="readout" id="{kid}-readout">'
             "move over the plot for the live counts; click to jump to the instruction</div></div>")
    h.append(f'<div class="listing">{_listing(k, kid)}</div>')
    h.append("</div>")

    h.append(_peaks(k, kid))
    h.append(_loops(k, kid))
    h.append(_allocations(k, kid))
    data = [[i["live"]["vgpr"], i["live"]["agpr"], i["live"]["sgpr"], i["text"]] for i in k["instructions"]]
    h.append(f'<script type="application/json" id="{kid}-data">'
             f"{json.dumps(data).replace('</', '<' + chr(92) + '/')}</script>")
    h.append("</section>")
    return "\n".join(h)


def _iref(kid: str, i) -> str:
    if i is None:
        return "-"
    return f'<a href="#{kid}-i{i}">#{i}</a>'


def svg_plot(k: dict, kid: str, width: int = 640, height: int = 350) -> str:
    """Live registers per class against the instruction index, loops shaded, peaks marked."""
    insts = k["instructions"]
    n = max(1, len(insts))
    r = k["registers"]
    top = max([1] + [r[c]["used"] for c in ("vgpr", "agpr", "sgpr")]
              + [r[c]["declared"] for c in ("vgpr", "agpr", "sgpr")])
    top = _nice(top)
    x0, y0, w, hgt = 48, 14, width - 64, height - 66
    axis_y = y0 + hgt

    def X(i):
        return x0 + w * i / max(1, n - 1)

    def Y(v):
        return y0 + hgt - hgt * v / top

    s = [f'<svg class="liveplot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
         f'data-kernel="{kid}" data-n="{len(insts)}" data-x0="{x0}" data-w="{w}" role="img" '
         f'aria-label="live registers against instruction index">',
         f'<rect x="{x0}" y="{y0}" width="{w}" height="{hgt}" fill="#fff" stroke="#bbb"/>']
    for lp in k["loops"]:
        for a, b in lp["runs"]:
            xa, xb = X(a - 0.5 if a else 0), X(min(n - 1, b + 0.5))
            s.append(f'<rect class="loop" x="{xa:.1f}" y="{y0}" width="{max(1.0, xb - xa):.1f}" height="{hgt}" '
                     f'fill="#f2c94c" fill-opacity="{0.18 + 0.1 * (lp["depth"] - 1):.2f}">'
                     f'<title>loop #{lp["first"]}..#{lp["last"]}'
                     f' (depth {lp["depth"]}, {lp["instructions"]} instructions)</title></rect>')
    for v in _ticks(top):
        s.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#eee"/>'
                 f'<text x="{x0 - 6}" y="{Y(v) + 4:.1f}" font-size="11" text-anchor="end">{v}</text>')
    for v in _ticks(max(1, len(insts) - 1), 8):
        s.append(f'<text x="{X(v):.1f}" y="{axis_y + 14}" font-size="11" text-anchor="middle">{v}</text>')
    s.append(f'<text x="{x0 + w / 2}" y="{axis_y + 30}" font-size="12" text-anchor="middle">instruction index</text>')
    s.append(f'<text x="12" y="{y0 + hgt / 2}" font-size="12" text-anchor="middle" '
             f'transform="rotate(-90 12 {y0 + hgt / 2})">live registers</text>')
    for c in ("vgpr", "agpr", "sgpr"):
        if not r[c]["declared"] and not r[c]["used"]:
            continue
        yd = Y(r[c]["declared"])
        s.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{yd:.1f}" y2="{yd:.1f}" stroke="{COLORS[c]}" '
                 'stroke-dasharray="5 4" '
                 f'stroke-opacity="0.7"><title>{TITLES[c]}s declared: {r[c]["declared"]}</title></line>')
        pts = " ".join(f"{X(i['index']):.1f},{Y(i['live'][c]):.1f}" for i in insts)
        s.append(f'<polyline class="series-{c}" fill="none" stroke="{COLORS[c]}" stroke-width="1.4" points="{pts}"/>')
        p = k["peaks"][c]
        if p["instruction"] is not None:
            px, py = X(p["instruction"]), Y(p["count"])
            s.append(f'<a href="#{kid}-i{p["instruction"]}">'
                     f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{COLORS[c]}">'
                     f'<title>peak {TITLES[c]}: {p["count"]} at #{p["instruction"]}</title></circle></a>'
                     f'<text x="{min(px + 6, x0 + w - 70):.1f}" y="{py - 6:.1f}" font-size="11" fill="{COLORS[c]}">'
                     f'{p["count"]} @#{p["instruction"]}</text>')
    lx = x0 + 8
    for c in ("vgpr", "agpr", "sgpr"):
        s.append(f'<rect x="{lx}" y="{height - 12}" width="10" height="10" fill="{COLORS[c]}"/>'
                 f'<text x="{lx + 14}" y="{height - 3}" font-size="11">{TITLES[c]} live</text>')
        lx += 90
    s.append(f'<rect x="{lx}" y="{height - 12}" width="10" height="10" fill="#f2c94c" fill-opacity="0.4"/>'
             f'<text x="{lx + 14}" y="{height - 3}" font-size="11">loop</text>'
             f'<line x1="{lx + 60}" x2="{lx + 80}" y1="{height - 7}" y2="{height - 7}" stroke="#555" '
             'stroke-dasharray="5 4"/>'
             f'<text x="{lx + 84}" y="{height - 3}" font-size="11">declared</text>')
    s.append(f'<line class="cursor" x1="0" x2="0" y1="{y0}" y2="{y0 + hgt}" stroke="#333" stroke-width="0.8" '
             'style="display:none"/>')
    s.append("</svg>")
    return "".join(s)


def _nice(v: int) -> int:
    for step in (4, 8, 16, 32, 64):
        if v <= step * 8:
            return -(-v // step) * step
    return -(-v // 64) * 64


def _ticks(top: int, count: int = 5) -> list[int]:
    raw = max(1, top / count)
    mag = 10 ** (len(str(int(raw))) - 1)
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return list(range(0, int(top) + 1, int(step)))


def _listing(k: dict, kid: str) -> str:
    peaks = {k["peaks"][c]["instruction"]: c for c in ("vgpr", "agpr", "sgpr")
             if k["peaks"][c]["instruction"] is not None}
    rows = ['<table><tr><th>#</th><th>offset</th><th class=v>V</th><th class=a>A</th><th class=s>S</th>'
            '<th class=l>instruction</th></tr>']
    for ins in k["instructions"]:
        for lab in ins["labels"]:
            rows.append(f'<tr class="lab"><td></td><td colspan=5>{escape(lab)}:</td></tr>')
        cls = []
        if not ins["reachable"]:
            cls.append("dead")
        if ins["index"] in peaks:
            cls.append("peak")
        if ins["loop_depth"]:
            cls.append(f"d{min(3, ins['loop_depth'])}")
        lv = ins["live"]
        off = f"{ins['offset']:x}" if ins["offset"] is not None else ""
        cmt = f' <span class="cmt">// {escape(ins["comment"])}</span>' if ins["comment"] else ""
        rows.append(f'<tr id="{kid}-i{ins["index"]}" class="{" ".join(cls)}"><td>{ins["index"]}</td><td>{off}</td>'
                    f'<td class=v>{lv["vgpr"]}</td><td class=a>{lv["agpr"]}</td><td class=s>{lv["sgpr"]}</td>'
                    f'<td class=t>{escape(ins["text"])}{cmt}</td></tr>')
    rows.append("</table>")
    return "".join(rows)


def _peaks(k: dict, kid: str) -> str:
    h = ["<h3>peaks</h3>"]
    for c in ("vgpr", "agpr", "sgpr"):
        p = k["peaks"][c]
        if not p["count"]:
            continue
        items = ", ".join(
            (escape(x["range"]) if x["name"] == x["range"] else f"<b>{escape(x['name'])}</b> {escape(x['range'])}")
            + (f" ({x['live']}/{x['size']})" if x["live"] != x["size"] else "") for x in p["live"])
        h.append(f"<div><b class={c[0]}>{TITLES[c]}</b> {p['count']} live at {_iref(kid, p['instruction'])} "
                 f"<code>{escape(p['text'])}</code>: {items}</div>")
    return "".join(h)


def _loops(k: dict, kid: str) -> str:
    h = [f"<h3>instruction mix</h3><div>{_mix(k['mix'])}</div>"]
    if k["loops"]:
        h.append("<h3>loops</h3><table><tr><th class=l>instructions</th><th>depth</th><th>count</th>"
                 "<th>peak V</th><th>peak A</th><th>peak S</th><th class=l>mix</th></tr>")
        for lp in k["loops"]:
            span = " ".join(f"{_iref(kid, a)}..{_iref(kid, b)}" for a, b in lp["runs"])
            pk = lp["peak_live"]
            h.append(f"<tr><td class=l>{span}</td><td>{lp['depth']}</td><td>{lp['instructions']}</td>"
                     f"<td>{pk['vgpr']}</td><td>{pk['agpr']}</td><td>{pk['sgpr']}</td>"
                     f"<td class=l>{_mix(lp['mix'])}</td></tr>")
        h.append("</table>")
    return "".join(h)


def _mix(m: dict) -> str:
    return " · ".join(f"{escape(c)} {n}" for c, n in m.items())


def _allocations(k: dict, kid: str) -> str:
    h = [f"<h3>allocations ({len(k['allocations'])})</h3><table><tr><th class=l>name</th><th class=l>class</th>"
         "<th class=l>range</th><th>first def</th><th>last use</th><th>live for</th></tr>"]
    for a in k["allocations"]:
        fd = "launch" if a["initialized"] and a["first_def"] is None else _iref(kid, a["first_def"])
        h.append(f"<tr><td class=l>{escape(a['name'])}</td><td class=l>{a['class']}</td>"
                 f"<td class=l>{escape(a['range'])}"
                 f"</td><td>{fd}</td><td>{_iref(kid, a['last_use'])}</td><td>{a['live_instructions']}</td></tr>")
    h.append("</table>")
    return "".join(h)
