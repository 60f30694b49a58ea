"""The report's formats and command line.

* JSON: every key of the produced documents is in docs/report.md's schema table with the documented
  type, and every documented key occurs (in a set of reports that together use every feature).
* Text: the terminal table states the same numbers as the JSON.
* HTML: self-contained (nothing fetched), and in headless Chromium the plot is in the DOM after load
  and its pixels are on the screenshot.
* PNG: matplotlib writes a non-blank image with the series colours.
* CLI: ``isagen report`` for a spec and a code object; bad input (not an ELF, not AMDGPU, unknown
  kernel, wrong --target, png without -o) is one line on stderr with exit code 2.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from isagen.api import resolve_spec
from isagen.builders.program import KernelBuilder
from isagen.builders.spec import load_spec
from isagen.cli import main
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble
from isagen.report import SCHEMA_VERSION, document, render, report_code_object, report_program, write_png

DOC = Path(__file__).resolve().parents[2] / "docs" / "report.md"


def showcase_program():
    """A small kernel that uses every feature the report describes: AGPRs, LDS regions, a loop, a branch,
    enough VGPRs to cost occupancy (so there is a "to the next wave" answer)."""
    k = KernelBuilder("report_showcase", "gfx942", workgroup_size=256)
    out = k.args.pointer("out", "f32", "write_only")
    k.lds(4096, "stage")
    k.lds(1024, "reduce")
    big = k.vgpr(100, "tile")
    acc = k.agpr(4, "acc")
    cnt = k.sgpr(1, "trip")
    top, skip = k.label("top"), k.label("skip")
    for i in range(0, 100):
        k.v_mov_b32(big[i], i)
    k.s_mov_b32(cnt, 4)
    k.place(top)
    for i in range(1, 100):
        k.v_add_u32(big[0], big[0], big[i])
    k.s_sub_u32(cnt, cnt, 1)
    k.s_cmp_lg_u32(cnt, 0)
    k.s_cbranch_scc1(top)
    k.s_cmp_eq_u32(cnt, 0)
    k.s_cbranch_scc1(skip)
    k.v_accvgpr_write_b32(acc[0], big[0])
    k.v_accvgpr_read_b32(big[1], acc[0])
    k.place(skip)
    k.free(big, acc, cnt, k.tid)
    assert out is not None
    return k.finish(check=False)


@pytest.fixture(scope="module")
def program():
    return showcase_program()


@pytest.fixture(scope="module")
def code_object(program):
    return assemble(render_assembly(program), program.target, name=program.name)


@pytest.fixture(scope="module")
def docs(program, code_object):
    return [report_program(program), report_code_object(code_object)]


# --------------------------------------------------------------------------- the documented schema
def _schema() -> dict[str, str]:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\| `([^`]+)` \| ((?:[^|\\]|\\\|)+?) \|", line)
        if not m:
            continue
        path, typ = m.group(1), m.group(2).replace("\\|", "|").strip()
        if not re.match(r"^(schema_version|generator|kernels)", path):
            continue
        brace = re.search(r"\{([a-z_,]+)\}", path)
        names = brace.group(1).split(",") if brace else [None]
        for n in names:
            rows[path.replace(brace.group(0), n) if brace else path] = typ
    return rows


def _type_ok(value, typ: str) -> bool:
    alts = [t.strip() for t in typ.split("|")]
    if value is None:
        return "null" in alts
    for t in alts:
        if t == "int" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if t == "str" and isinstance(value, str):
            return True
        if t == "bool" and isinstance(value, bool):
            return True
        if t == "object" and isinstance(value, dict):
            return True
        if t.startswith("map<") and isinstance(value, dict):
            inner = t[4:-1].split(",")[1]
            return all(isinstance(k, str) and _type_ok(v, inner) for k, v in value.items())
        if t.startswith("list<") and isinstance(value, list):
            inner = t[5:-1]
            return inner == "object" or all(_type_ok(v, inner) for v in value)
    return False


def _walk(value, path: str, schema: dict, seen: set, problems: list):
    typ = schema.get(path)
    if typ is None:
        problems.append(f"{path}: not documented in docs/report.md")
        return
    seen.add(path)
    if not _type_ok(value, typ):
        problems.append(f"{path}: {value!r:.60} is not {typ}")
        return
    if typ.startswith("map<"):
        return
    if isinstance(value, dict):
        for k, v in value.items():
            _walk(v, f"{path}.{k}" if path else k, schema, seen, problems)
    elif isinstance(value, list) and typ == "list<object>":
        for item in value:
            if isinstance(item, dict):
                for k, v in item.items():
                    _walk(v, f"{path}[].{k}", schema, seen, problems)


def test_json_matches_the_documented_schema(docs):
    schema = _schema()
    assert len(schema) > 100
    seen: set = set()
    problems: list = []
    for doc in docs:
        text = render(doc, "json")
        parsed = json.loads(text)
        assert parsed["schema_version"] == SCHEMA_VERSION == 1
        for k, v in parsed.items():
            _walk(v, k, schema, seen, problems)
    assert not problems, "\n".join(problems[:20])
    assert sorted(set(schema) - seen) == [], "documented keys never produced"


def test_showcase_uses_every_feature(docs, program):
    k = docs[0]["kernels"][0]
    assert k["loops"] and k["lds"]["regions"]
    # acc holds 4 AGPRs but only a0 is ever touched: declared 4, used 1, and a warning says so
    assert (k["registers"]["agpr"]["declared"], k["registers"]["agpr"]["used"]) == (4, 1)
    assert k["warnings"] == ["AGPRs: the kernel declares 4 but the code touches only 1"]
    assert k["occupancy"]["waves_per_simd"] < 8 and k["occupancy"]["to_next_wave"]
    assert [r["name"] for r in k["lds"]["regions"]] == ["stage", "reduce"]
    assert k["occupancy"]["limited_by"] == "vgprs"
    foreign = docs[1]["kernels"][0]
    assert foreign["source"]["kind"] == "code_object"
    assert any(i["labels"] for i in foreign["instructions"])


# --------------------------------------------------------------------------- text
def test_text_states_the_json_numbers(docs):
    for doc in docs:
        k = doc["kernels"][0]
        text = render(doc, "text", listing=True)
        r = k["registers"]
        for cls, title in (("vgpr", "VGPR"), ("agpr", "AGPR"), ("sgpr", "SGPR")):
            c = r[cls]
            assert re.search(rf"^  {title}\s+{c['declared']}\s+{c['used']}\s+{c['peak_live']}\s", text, re.M), title
        o = k["occupancy"]
        assert f"occupancy: {o['waves_per_simd']} wave" in text
        for step in o["to_next_wave"]:
            assert step["detail"] in text
        for lp in k["loops"]:
            assert f"#{lp['first']}..#{lp['last']}" in text
        for a in k["allocations"]:
            assert re.search(rf"^  {re.escape(a['name'])}\s+{a['class']}\s+{re.escape(a['range'])}\s", text, re.M)
        # the listing has one line per instruction with its three live counts
        for ins in k["instructions"][:50]:
            lv = ins["live"]
            assert re.search(rf"^.#{ins['index']}\s+\S*\s+{lv['vgpr']}\s+{lv['agpr']}\s+{lv['sgpr']}\s", text, re.M)


# --------------------------------------------------------------------------- HTML in a browser
def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("needs headless Chromium (apt-get install chromium)")


def _browser(tmp_path: Path, url: str, *args) -> subprocess.CompletedProcess:
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
           *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_html_is_self_contained(docs):
    html = render(document(docs[0]["kernels"] + docs[1]["kernels"]), "html")
    assert "<svg" in html and "polyline" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html


def test_html_renders_in_chromium_with_its_plot(tmp_path, docs):
    page = tmp_path / "report.html"
    page.write_text(render(docs[0], "html"))
    dom = _browser(tmp_path, page.as_uri(), "--dump-dom", "--virtual-time-budget=2000")
    assert dom.returncode == 0, dom.stderr[-2000:]
    k = docs[0]["kernels"][0]
    assert re.search(rf'<svg class="liveplot"[^>]*data-n="{k["instruction_count"]}"', dom.stdout)
    for cls in ("vgpr", "agpr", "sgpr"):
        assert f'class="series-{cls}"' in dom.stdout
    assert dom.stdout.count('class="loop"') == sum(len(lp["runs"]) for lp in k["loops"])
    assert f'id="k0-i{k["instruction_count"] - 1}"' in dom.stdout        # the whole listing is there

    # the cursor read-out and click-to-listing work: synthetic events on the plot after load
    probe = render(docs[0], "html").replace("</body>", """<script>
var svg=document.querySelector('svg.liveplot'), r=svg.getBoundingClientRect();
var ev={clientX:r.left+r.width*0.5, clientY:r.top+40};
svg.dispatchEvent(new MouseEvent('mousemove', ev)); svg.dispatchEvent(new MouseEvent('click', ev));
document.body.setAttribute('data-readout', document.getElementById('k0-readout').textContent.split('\\n')[0]);
document.body.setAttribute('data-cur', (document.querySelector('tr.cur') || {id: 'none'}).id);
</script></body>""")
    (tmp_path / "probe.html").write_text(probe)
    dom = _browser(tmp_path, (tmp_path / "probe.html").as_uri(), "--dump-dom", "--virtual-time-budget=2000",
                   "--window-size=1400,900")
    cur = re.search(r'data-cur="k0-i(\d+)"', dom.stdout)
    assert cur, dom.stdout[:500]
    i = int(cur.group(1))
    assert 0 < i < k["instruction_count"] - 1
    lv = k["instructions"][i]["live"]
    assert f'data-readout="#{i}  VGPR {lv["vgpr"]}  AGPR {lv["agpr"]}  SGPR {lv["sgpr"]}"' in dom.stdout

    shot = tmp_path / "shot.png"
    res = _browser(tmp_path, page.as_uri(), f"--screenshot={shot}", "--window-size=1400,900",
                   "--hide-scrollbars")
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    import matplotlib.image as mpimg
    img = mpimg.imread(str(shot))[:, :, :3]
    assert img.shape[0] == 900 and img.shape[1] == 1400
    # the plot (left column) shows the VGPR series (#1f77b4) and the loop shading (#f2c94c over white)
    left = img[:, :700]
    blue = ((abs(left[..., 0] - 0x1f / 255) < 0.08) & (abs(left[..., 1] - 0x77 / 255) < 0.08)
            & (abs(left[..., 2] - 0xb4 / 255) < 0.08)).sum()
    shade = ((left[..., 0] > 0.93) & (left[..., 1] > 0.88) & (left[..., 2] < 0.9) & (left[..., 2] > 0.7)).sum()
    assert blue > 300, blue
    assert shade > 2000, shade


# --------------------------------------------------------------------------- PNG
def test_png(tmp_path, docs):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.png"
    write_png(document(docs[0]["kernels"] + docs[1]["kernels"]), out)
    import matplotlib.image as mpimg
    img = mpimg.imread(str(out))
    assert img.shape[0] > 500 and img.shape[1] > 800         # two panels
    rgb = img[..., :3]
    assert rgb.std() > 0.05
    blue = ((abs(rgb[..., 0] - 0x1f / 255) < 0.06) & (abs(rgb[..., 1] - 0x77 / 255) < 0.06)
            & (abs(rgb[..., 2] - 0xb4 / 255) < 0.06)).sum()
    assert blue > 500


# --------------------------------------------------------------------------- command line
def _run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_spec_and_code_object(tmp_path, capsys, code_object, program):
    code, out, err = _run(["report", "axpy_f32", "--target", "gfx942", "--format", "json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert [k["target"] for k in doc["kernels"]] == ["gfx942"] and doc["kernels"][0]["source"]["kind"] == "spec"

    co = tmp_path / "k.co"
    co.write_bytes(code_object)
    code, out, err = _run(["report", str(co), "--kernel", program.name], capsys)
    assert code == 0, err
    assert out.startswith(f"{program.name} · gfx942 · {co}")
    # hand-written assembly: assembled for the processor its .amdgcn_target names, then reported
    src = tmp_path / "k.s"
    src.write_text(render_assembly(program))
    code, out, err = _run(["report", str(src), "--format", "json"], capsys)
    assert code == 0, err
    from_asm = json.loads(out)["kernels"][0]
    from_co = report_code_object(code_object)["kernels"][0]
    assert [i["live"] for i in from_asm["instructions"]] == [i["live"] for i in from_co["instructions"]]
    src.write_text("\n".join(l for l in render_assembly(program).splitlines() if ".amdgcn_target" not in l))
    code, out, err = _run(["report", str(src)], capsys)
    assert code == 2 and "no .amdgcn_target line" in err
    for fmt, name in (("html", "r.html"), ("json", "r.json"), ("png", "r.png")):
        pytest.importorskip("matplotlib") if fmt == "png" else None
        code, out, err = _run(["report", str(co), "-o", str(tmp_path / name)], capsys)
        assert code == 0, err
        data = (tmp_path / name).read_bytes()
        assert {"html": b"<!DOCTYPE html>", "json": b"{", "png": b"\x89PNG"}[fmt] == data[: len(
            {"html": b"<!DOCTYPE html>", "json": b"{", "png": b"\x89PNG"}[fmt])]
    # --format png wins over an -o name without the .png extension
    code, out, err = _run(["report", str(co), "--format", "png", "-o", str(tmp_path / "plot.out")], capsys)
    assert code == 0, err
    assert (tmp_path / "plot.out").read_bytes()[:4] == b"\x89PNG"


def test_cli_bad_input_is_one_line(tmp_path, capsys, code_object):
    text = tmp_path / "notes.co"
    text.write_text("not a code object\n")
    x86 = tmp_path / "x86.so"
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5], header[6] = 2, 1, 1
    header[18:20] = (62).to_bytes(2, "little")              # EM_X86_64
    x86.write_bytes(bytes(header))
    co = tmp_path / "k.co"
    co.write_bytes(code_object)
    cases = [
        ([str(text)], "not an ELF"),
        ([str(x86)], "not an AMDGPU code object"),
        ([str(co), "--kernel", "nope"], "no kernel named 'nope' (kernels: report_showcase)"),
        ([str(co), "--target", "gfx950"], "gfx942 code object"),
        ([str(co), "--format", "png"], "needs -o"),
        ([str(tmp_path / "missing.co")], "no such file"),
        (["no_such_spec"], "unknown spec"),
    ]
    for args, needle in cases:
        code, out, err = _run(["report", *args], capsys)
        assert code == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("isagen: error: ") and needle in lines[0], (args, err)
        assert "Traceback" not in err and out == ""


class _Terminal(io.StringIO):
    """stderr as a terminal would be: the bar is drawn into it."""

    def isatty(self):
        return True


def test_cli_bar_for_html_and_png_only(tmp_path, monkeypatch, capsys):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["report", "axpy_f32", "-o", str(tmp_path / "r.html")]) == 0
    drawn = terminal.getvalue()
    targets = len(load_spec(resolve_spec("axpy_f32")).targets)       # built and analysed, then rendered
    assert f"0/{targets + 1}" in drawn and f"{targets}/{targets + 1}" in drawn and "rendering html" in drawn
    assert drawn.index("100%") < drawn.index("wrote ")
    terminal.seek(0)
    terminal.truncate()
    assert main(["report", "axpy_f32", "--format", "json"]) == 0
    assert terminal.getvalue() == "" and json.loads(capsys.readouterr().out)["kernels"]
