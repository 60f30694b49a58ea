"""The command line: exit codes and one-line errors, gen/list/targets/toolchain output against the
facts they report (targets.py, the generator schema, the toolchain finder, LLVM's readelf)."""

import io
import json
import os
import pty
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import isagen
from isagen.builders import registry
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator, load_generators
from isagen.builders.spec import bundled_specs_dir, load_specs
from isagen.cli import main
from isagen.objects.codeobject import read_code_object
from isagen.targets import TARGETS

ROOT = Path(__file__).resolve().parents[1]
READELF = shutil.which("llvm-readelf-19") or shutil.which("llvm-readelf")


def run_module(*args, env=None, cwd=None):
    """``python -m isagen ...`` in a subprocess."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "isagen", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd or ROOT, timeout=120)


def one_error_line(stderr: str) -> str:
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("isagen: error: ")
    return lines[0]


def spec_text(**params):
    body = "".join(f"  {k}: {v}\n" for k, v in params.items())
    return textwrap.dedent("""\
        kernel: elementwise
        name: cli_axpy
        description: cli test
        targets: [gfx942, gfx950]
        params:
        """) + body


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "cli_axpy.yaml"
    path.write_text(spec_text(op="axpy", dtype="f32", vec=4))
    return path


# ---------------------------------------------------------------------------- python -m isagen
def test_module_entry_point_and_version():
    r = run_module("--version")
    assert r.returncode == 0 and r.stdout.strip() == "isagen 0.1.0"


def test_module_reports_a_bad_spec_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kernel: elementwise\nname: x\ntargets: [gfx942]\nparams: {block: 100}\n")
    r = run_module("gen", str(bad), "-o", str(tmp_path / "out"))
    assert r.returncode == 2
    line = one_error_line(r.stderr)
    assert f"{bad}:4: params.block: 100 is not a power of two" in line


def test_missing_toolchain_is_one_line(tmp_path, spec_file):
    empty = tmp_path / "no_llvm"
    empty.mkdir()
    r = run_module("gen", str(spec_file), "--target", "gfx942", "-o", str(tmp_path / "out"), "--assembler", "llvm",
                   env={"ISAGEN_LLVM_DIR": str(empty)})
    assert r.returncode == 2
    line = one_error_line(r.stderr)
    assert "ISAGEN_LLVM_DIR" in line and "gfx942" in line
    # the .s was still written (generation does not need the toolchain); no .co
    assert (tmp_path / "out" / "cli_axpy.gfx942.s").exists()
    assert not (tmp_path / "out" / "cli_axpy.gfx942.co").exists()
    r = run_module("gen", str(spec_file), "--asm-only", "-o", str(tmp_path / "out2"),
                   env={"ISAGEN_LLVM_DIR": str(empty)})
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "out2").iterdir()) == ["cli_axpy.gfx942.s", "cli_axpy.gfx950.s"]
    # isagen's own assembler (the default) needs no LLVM at all
    r = run_module("gen", str(spec_file), "-o", str(tmp_path / "out3"), env={"ISAGEN_LLVM_DIR": str(empty)})
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "out3").iterdir()) == [
        "cli_axpy.gfx942.co", "cli_axpy.gfx942.s", "cli_axpy.gfx950.co", "cli_axpy.gfx950.s"]


# ---------------------------------------------------------------------------- gen
def test_gen_writes_both_targets_and_reports_resources(tmp_path, spec_file, capsys):
    out = tmp_path / "out"
    assert main(["gen", str(spec_file), "-o", str(out)]) == 0
    stdout = capsys.readouterr().out
    for t in ("gfx942", "gfx950"):
        assert (out / f"cli_axpy.{t}.s").read_text().startswith("// cli_axpy for " + t)
        assert (out / f"cli_axpy.{t}.co").read_bytes()[:4] == b"\x7fELF"
        line = next(l for l in stdout.splitlines() if f"cli_axpy {t}" in l)
        assert re.search(r"ok \d+\.\d\d s · \d+ VGPRs, 0 AGPRs, \d+ SGPRs, LDS 0 B; occupancy \d waves/SIMD", line)
    specs = load_specs([spec_file])
    program = specs[0].build("gfx942")
    occ = program.occupancy()
    assert f"{program.vgprs} VGPRs" in stdout and f"occupancy {occ['waves_per_simd']} waves/SIMD" in stdout


@pytest.mark.skipif(READELF is None, reason="needs llvm-readelf (apt install llvm-19)")
def test_define_override_reaches_the_code_object(tmp_path, spec_file, capsys):
    out = tmp_path / "out"
    assert main(["gen", str(spec_file), "--target", "gfx942", "-D", "block=128", "-o", str(out)]) == 0
    notes = subprocess.run([READELF, "--notes", str(out / "cli_axpy.gfx942.co")], capture_output=True,
                           text=True, check=True).stdout
    assert re.search(r"\.max_flat_workgroup_size:\s+128\b", notes), notes


def test_library_build_shows_progress(tmp_path, capsys):
    lib = tmp_path / "lib"                          # the elementwise specs: quick to build
    lib.mkdir()
    for s in load_specs([bundled_specs_dir()]):
        if s.kernel == "elementwise":
            shutil.copy(s.path, lib)
    specs = load_specs([lib])
    assert len(specs) >= 2
    total = sum(len(s.targets) for s in specs)
    assert main(["gen", str(lib), "--asm-only", "-o", str(tmp_path)]) == 0
    stdout = capsys.readouterr().out
    i = 0
    for s in sorted(specs, key=lambda s: s.path):
        for t in s.targets:
            i += 1
            assert re.search(rf"^\[{i}/{total}\] {s.name} {t} … ok \d+\.\d\d s", stdout, re.M), stdout
            assert (tmp_path / f"{s.name}.{t}.s").exists()
    assert f"wrote {total} files (.s) to {tmp_path}/" in stdout


def test_parallel_library_build_writes_the_serial_builds_files(tmp_path):
    """-j 2 (a process pool) and -j 1 write the same files, byte for byte, and the same lines in the
    same order."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("axpy_f32", "relu_bf16", "gemm_bf16_32x32", "softmax_bf16"):
        shutil.copy(bundled_specs_dir() / f"{name}.yaml", lib)
    outputs = {}
    for jobs in ("1", "2"):
        r = run_module("gen", str(lib), "-j", jobs, "--no-cache", "-o", str(tmp_path / f"j{jobs}"))
        assert r.returncode == 0, r.stderr
        files = sorted((tmp_path / f"j{jobs}").iterdir())
        outputs[jobs] = ({f.name: f.read_bytes() for f in files},
                         [re.sub(r"ok \d+\.\d\d s", "ok", ln) for ln in r.stdout.splitlines()[:-1]])
    assert len(outputs["1"][0]) == 16                       # 4 specs x 2 targets x (.s, .co)
    assert outputs["1"] == outputs["2"]


def test_assembler_llvm_gives_the_same_machine_code(tmp_path, spec_file):
    for asm in ("isagen", "llvm"):
        assert main(["gen", str(spec_file), "--assembler", asm, "-o", str(tmp_path / asm)]) == 0
    for t in ("gfx942", "gfx950"):
        a, b = (read_code_object(tmp_path / asm / f"cli_axpy.{t}.co") for asm in ("isagen", "llvm"))
        assert a.text == b.text and a.metadata == b.metadata
        assert a.kernel().descriptor.raw == b.kernel().descriptor.raw
    assert main(["gen", str(spec_file), "--assembler", "gas"]) == 2


def test_force_emits_with_the_reason(tmp_path, spec_file, capsys):
    out = tmp_path / "out"
    args = ["gen", str(spec_file), "--target", "gfx942", "-D", "unroll=16", "-D", "min_occupancy=4",
            "--asm-only", "-o", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "params.min_occupancy" in one_error_line(err) and "--force" in err
    assert not (out / "cli_axpy.gfx942.s").exists()
    assert main(args + ["--force"]) == 0
    captured = capsys.readouterr()
    assert "REJECTED" in captured.out and captured.err == ""
    header = (out / "cli_axpy.gfx942.s").read_text().split(".amdgcn_target")[0]
    assert "REJECTED" in header and "min_occupancy=4" in header and "waves/SIMD" in header


def test_target_selection(tmp_path, spec_file, capsys):
    only942 = tmp_path / "only942.yaml"
    only942.write_text(spec_text(op="add", dtype="bf16", vec=8).replace("[gfx942, gfx950]", "[gfx942]")
                       .replace("name: cli_axpy", "name: only942"))
    assert main(["gen", str(only942), "--target", "gfx950", "--asm-only", "-o", str(tmp_path)]) == 2
    assert "gfx950 is not one of them" in one_error_line(capsys.readouterr().err)
    # in a library build a spec without the target is skipped, the others are built
    assert main(["gen", str(only942), str(spec_file), "--target", "gfx950", "--asm-only", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "skip only942" in out and (tmp_path / "cli_axpy.gfx950.s").exists()
    assert not (tmp_path / "only942.gfx950.s").exists()
    assert main(["gen", str(spec_file), "--target", "gfx90a", "-o", str(tmp_path)]) == 2
    assert "unsupported target 'gfx90a'" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("text, words", [
    ("kernel: elementwise\nname: a\ntargets: [gfx942\n", "malformed YAML"),
    ("kernel: nope\nname: a\ntargets: [gfx942]\n", "unknown kernel generator 'nope'"),
    ("kernel: elementwise\nname: a\ntargets: [gfx942]\nblock: 64\n", "block: unknown field"),
    ("kernel: elementwise\nname: a\ntargets: [gfx942]\nparams: {dtype: bf16, vec: 1}\n",
     "params.vec: vec=1 with bf16 is 2 bytes per lane"),
])
def test_spec_errors_exit_2_with_one_line(tmp_path, capsys, text, words):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["gen", str(path), "-o", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    line = one_error_line(captured.err)
    assert str(path) in line and words in line


@pytest.fixture
def overflow_generators(monkeypatch):
    """Two throwaway generators that ask for more registers / LDS than the target has."""
    load_generators()
    monkeypatch.setattr(registry, "GENERATORS", dict(registry.GENERATORS))

    @generator("test_vgpr_hog", params={"vgprs": Param("int", 300, "VGPRs to allocate")})
    def vgpr_hog(p, target):
        k = KernelBuilder(p.name, target, workgroup_size=64)
        k.vgpr(p.vgprs, "hog")
        return k

    @generator("test_lds_hog", params={"lds": Param("int", 1 << 20, "LDS bytes")})
    def lds_hog(p, target):
        k = KernelBuilder(p.name, target, workgroup_size=64)
        k.lds(p.lds, "hog")
        return k


@pytest.mark.parametrize("kernel, words", [("test_vgpr_hog", "out of VGPRs allocating 'hog'"),
                                           ("test_lds_hog", "LDS overflow allocating 'hog'")])
def test_register_and_lds_overflow_exit_2(tmp_path, capsys, overflow_generators, kernel, words):
    path = tmp_path / "hog.yaml"
    path.write_text(f"kernel: {kernel}\nname: hog\ntargets: [gfx942]\n")
    assert main(["gen", str(path), "--asm-only", "-o", str(tmp_path)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert words in line and f"{path} [gfx942]" in line
    if kernel == "test_lds_hog":
        assert str(TARGETS["gfx942"].lds_bytes) in line


def test_duplicate_names_in_a_library_build(tmp_path, spec_file, capsys):
    twin = tmp_path / "twin.yaml"
    twin.write_text(spec_file.read_text())
    assert main(["gen", str(spec_file), str(twin), "--asm-only", "-o", str(tmp_path)]) == 2
    assert "would overwrite each other" in one_error_line(capsys.readouterr().err)


def test_unwritable_output_is_one_line(tmp_path, spec_file, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["gen", str(spec_file), "--asm-only", "-o", str(blocker / "out")]) == 2
    assert f"cannot create the output directory {blocker / 'out'}" in one_error_line(capsys.readouterr().err)


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "gen" in capsys.readouterr().out


OBJDUMP = shutil.which("llvm-objdump-19")


@pytest.mark.skipif(OBJDUMP is None, reason="needs llvm-objdump-19 (apt install llvm-19)")
def test_disasm_matches_llvm_objdump(tmp_path, spec_file, capsys):
    out = tmp_path / "out"
    assert main(["gen", str(spec_file), "--target", "gfx942", "-o", str(out)]) == 0
    co = out / "cli_axpy.gfx942.co"
    capsys.readouterr()
    assert main(["disasm", str(co), "--kernel", "cli_axpy"]) == 0
    ours = [l.split("//")[0].split() for l in capsys.readouterr().out.splitlines() if l.startswith("\t")]
    llvm = subprocess.run([OBJDUMP, "-d", str(co)], capture_output=True, text=True, check=True).stdout
    theirs = [l.split("//")[0].split() for l in llvm.splitlines() if l.startswith("\t")]
    assert ours == theirs and len(ours) > 10
    assert main(["disasm", str(co), "--kernel", "nope"]) == 2
    assert "no kernel named 'nope'" in one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------------------- list / targets / toolchain
def test_list_shows_specs_and_schema(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for s in load_specs([bundled_specs_dir()]):
        line = next(l for l in out.splitlines() if l.strip().startswith(s.name + " "))
        assert s.kernel in line and ", ".join(s.targets) in line
        assert s.params.describe() in out
    generators = out.split("Generators")[1]
    sections = re.split(r"^  (?=\S)", generators, flags=re.M)[1:]       # one per generator
    by_name = {sec.split(":")[0]: sec for sec in sections}
    for name, gen in load_generators().items():
        assert name in by_name, name
        for pname, p in gen.params.items():
            row = next(l for l in by_name[name].splitlines() if l.strip().startswith(pname + " "))
            cols = row.split()
            expected = ("true" if p.default else "false") if isinstance(p.default, bool) else str(p.default)
            assert cols[1] == p.type and cols[2] == expected, row


def test_list_reports_an_invalid_spec(tmp_path, capsys):
    (tmp_path / "ok.yaml").write_text(spec_text(op="add"))
    (tmp_path / "broken.yaml").write_text("kernel: elementwise\nname: b\ntargets: [gfx942]\nparams: {op: div}\n")
    assert main(["list", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "broken.yaml: INVALID" in captured.out and "cli_axpy" in captured.out
    assert "params.op: 'div' is not one of" in one_error_line(captured.err)


def test_targets_prints_the_table(capsys):
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    for t in TARGETS.values():
        assert f"{t.name} ({t.target_id})" in out
        block = out.split(f"{t.name} ({t.target_id})")[1].split("\n\n")[0]
        assert f"{t.wave_size} lanes" in block
        assert f"{t.lds_bytes} bytes" in block and f"{t.lds_banks} banks" in block
        assert f"{t.max_sgprs} per wave" in block and f"{t.unified_regs_per_lane} per lane" in block
        assert ", ".join(map(str, t.lds_dma_widths)) + " bytes per lane" in block
        assert t.fp8_format.upper() in block
        for p in t.products:
            row = next(l for l in out.splitlines() if l.strip().startswith(p.name + " "))
            cols = row.split()
            assert cols[1] == t.name and int(cols[2]) == p.cus and int(cols[3]) == p.xcds
            assert int(cols[4]) == p.clock_mhz
            assert float(cols[5]) == pytest.approx(p.peak_bf16_tflops, abs=0.05)
            assert float(cols[6]) == pytest.approx(p.peak_fp8_tflops, abs=0.05)
            assert float(cols[7]) == pytest.approx(p.hbm_tb_s) and int(cols[8]) == p.hbm_gib
        mfma_block = out.split(f"MFMAs on {t.name}")[1].split("\n\n")[0]
        for m in t.mfmas:
            row = next(l for l in mfma_block.splitlines() if l.split() and l.split()[0] == m.mnemonic)
            cols = row.split()
            assert cols[1] == f"{m.m}x{m.n}x{m.k}" and int(cols[-2]) == m.passes and int(cols[-1]) == 4 * m.passes


def test_toolchain_report_names_each_targets_assembler(capsys):
    from isagen.objects.toolchain import find_toolchain

    assert main(["toolchain"]) == 0
    out = capsys.readouterr().out
    for t in TARGETS:
        tc = find_toolchain(t)
        line = next(l for l in out.splitlines() if l.startswith(t + " "))
        assert tc.assembler.name in line


# ---------------------------------------------------------------------------- demo
def test_demo_generates_assembles_runs_and_checks(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ISAGEN_BACKEND", "emu")
    out = tmp_path / "demo"
    assert main(["demo", "-o", str(out), "-n", "3001"]) == 0
    stdout = capsys.readouterr().out
    s_file, co_file = out / "axpy_f32.gfx942.s", out / "axpy_f32.gfx942.co"
    assert str(s_file) in stdout and str(co_file) in stdout
    assert co_file.read_bytes()[:4] == b"\x7fELF"
    # the lines it shows are the .s file's own
    shown = [l.strip() for l in stdout.splitlines() if "s_load_dwordx2" in l]
    assert shown and all(l in s_file.read_text() for l in shown)
    check = next(l for l in stdout.splitlines() if l.startswith("5. check"))
    assert check.endswith("-> OK")
    assert float(re.search(r"\(([\d.]+) ulp\)", check).group(1)) <= 1.0
    assert "grid 2 workgroups x 256 lanes" in stdout      # 3001 elements / (256 lanes x 4 x 2 per lane)


# ---------------------------------------------------------------------------- help, usage errors, signals
def test_every_command_has_help(capsys):
    from isagen.cli import cli

    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert top.startswith("Usage: isagen [OPTIONS] COMMAND")
    names = cli.list_commands()
    assert names[:2] == ["gen", "list"] and {"run", "report", "model", "disasm", "demo"} <= set(names)
    for name in names:
        assert re.search(rf"^  {name}\s+\S", top, re.M), name           # listed with its one-line help
        assert main([name, "-h"]) == 0
        shown = capsys.readouterr().out
        assert shown.startswith(f"Usage: isagen {name} [OPTIONS]"), name
        # every option listed, by every name, at the start of a row: "-t, --target TARGET", "--cache / --no-cache"
        listed = [set(re.split(r",? |/", line.strip().split("  ")[0])) for line in shown.splitlines()
                  if line.startswith("  -")]
        for opt in cli.get_command(name).options:
            assert any(set(opt.names) <= names for names in listed), (name, opt.names, shown)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"isagen {isagen.__version__}\n"
    assert main([]) == 2 and capsys.readouterr().out.startswith("Usage: isagen")     # bare: the help, as a mistake


def test_help_lists_lazy_commands_without_importing_them():
    # run/report/model live with their logic (torch, the report model, the timing model); `isagen --help`
    # lists them from cli.LAZY, and `isagen gen --help` does not touch them either
    for argv in (["--help"], ["gen", "--help"]):
        code = ("import sys; from isagen.cli import main; rc = main(sys.argv[1:]); "
                "print(sorted(m for m in sys.modules if m.startswith(('isagen.runtime', 'isagen.report', "
                "'isagen.model', 'torch'))))")
        r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[-1] == "[]", (argv, r.stdout)


def test_lazy_commands_one_line_help_matches_their_module():
    # the one-line help of a lazy command is written in cli.LAZY; each is the command it lists
    from isagen.cli import LAZY, cli

    for name, (module, short) in LAZY.items():
        command = __import__(module, fromlist=["command"]).command
        assert cli.get_command(name) is command and command.short() == short
        assert command.help and command.params


@pytest.mark.parametrize("argv, expected", [
    (["a.yaml", "-j2", "-Dblock=128", "--out-dir=o", "-D", "vec=4", "--no-cache"],
     {"specs": ("a.yaml",), "jobs_n": 2, "defines": ("block=128", "vec=4"), "out_dir": "o", "use_cache": False}),
    (["--target", "gfx950", "-t", "gfx942", "a.yaml", "b.yaml", "--force", "--asm-only"],   # the last value wins
     {"specs": ("a.yaml", "b.yaml"), "target": "gfx942", "force": True, "asm_only": True, "use_cache": True}),
    (["-o", "-x", "--", "-weird.yaml", "--force"],            # a value may start with '-'; '--' ends the options
     {"out_dir": "-x", "specs": ("-weird.yaml", "--force"), "force": False}),
    (["a.yaml"], {"target": "all", "out_dir": "out", "defines": (), "jobs_n": None, "assembler": None}),
])
def test_gen_parses_the_usual_conventions(argv, expected):
    from isagen.cli import cli

    values = cli.get_command("gen").parse(argv)
    assert {k: values[k] for k in expected} == expected


@pytest.mark.parametrize("argv, words", [
    (["gen", "--bogus"], ["gen: no such option", "--bogus", "isagen gen --help"]),
    (["gen"], ["gen: missing argument", "SPEC"]),
    (["nosuch"], ["no such command", "nosuch"]),
    (["run", "axpy_f32", "--backend", "cuda"], ["run: invalid value for '--backend'", "'cuda'"]),
    (["demo", "-n", "many"], ["'-n'", "'many' is not a valid integer"]),
    (["report", "x.co", "--dynamic-lds", "-8"], ["'--dynamic-lds'", "-8 is negative"]),
    (["report", "x.co", "--format", "pdf"], ["'--format'", "'pdf'"]),
    (["gne", "x"], ["no such command 'gne'", "Did you mean 'gen'?", "(see 'isagen --help')"]),
    (["gen", "x", "--for"], ["gen: no such option '--for'", "Did you mean '--force'?"]),
    (["gen", "x", "--force=yes"], ["gen: option '--force' does not take a value"]),
    (["gen", "x", "-j"], ["gen: option '-j' requires an argument"]),
    (["targets", "extra"], ["targets: got unexpected extra argument (extra)"]),
    (["model", "no/such.co"], ["model: invalid value for 'FILE'", "'no/such.co' does not exist"]),
    (["model", "specs"], ["'specs' is a directory"]),
    (["--bogus"], ["no such option '--bogus'", "(see 'isagen --help')"]),
])
def test_usage_errors_are_one_line_exit_2(capsys, argv, words):
    assert main(argv) == 2
    captured = capsys.readouterr()
    line = one_error_line(captured.err)
    assert all(w in line for w in words), line
    assert captured.out == ""


def test_usage_error_from_the_installed_entry_point_is_one_line():
    r = run_module("gen", "--target")
    assert r.returncode == 2 and "--target" in one_error_line(r.stderr) and r.stdout == ""


def test_interrupt_is_130_and_broken_pipe_is_quiet(monkeypatch, capsys):
    import isagen.cli as command_line

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(command_line, "toolchain_report", interrupted)
    assert main(["toolchain"]) == 130
    assert capsys.readouterr().err == "isagen: interrupted\n"

    def reader_gone():
        raise BrokenPipeError

    monkeypatch.setattr(command_line, "toolchain_report", reader_gone)
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert main(["toolchain"]) == 0
    assert stderr.closed                      # nothing more is said on a pipe that is gone


def _elementwise_library(tmp_path, count=2):
    lib = tmp_path / "lib"
    lib.mkdir()
    for s in [s for s in load_specs([bundled_specs_dir()]) if s.kernel == "elementwise"][:count]:
        shutil.copy(s.path, lib)
    return lib


def test_library_build_draws_a_bar_on_a_terminal_only(tmp_path):
    lib = _elementwise_library(tmp_path)
    piped = run_module("gen", str(lib), "--asm-only", "--no-cache", "-o", str(tmp_path / "a"))
    assert piped.returncode == 0 and piped.stderr == ""
    # the same build with stderr on a pseudo-terminal: the bar is drawn there, stdout is unchanged
    leader, follower = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "isagen", "gen", str(lib), "--asm-only", "--no-cache", "-o",
                             str(tmp_path / "a")],
                            stdout=subprocess.PIPE, stderr=follower, text=True, env=env, cwd=ROOT)
    os.close(follower)
    stdout, _ = proc.communicate(timeout=120)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:                        # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    assert proc.returncode == 0
    total = sum(len(s.targets) for s in load_specs([lib]))
    text = drawn.decode()
    assert "building" in text and f"{total}/{total}" in text and "100%" in text
    strip_times = lambda s: re.sub(r"\d+\.\d+ s", "T s", s)                   # noqa: E731
    assert strip_times(stdout) == strip_times(piped.stdout)


def test_shell_completion_offers_commands_and_choices():
    r = run_module(env={"_ISAGEN_COMPLETE": "bash_complete", "COMP_WORDS": "isagen r", "COMP_CWORD": "1"})
    assert r.returncode == 0 and r.stdout.split() == ["plain,run", "plain,report"], r
    r = run_module(env={"_ISAGEN_COMPLETE": "bash_complete", "COMP_WORDS": "isagen run x --backend ",
                        "COMP_CWORD": "4"})
    assert r.stdout.split() == ["plain,hip", "plain,emu"], r


@pytest.mark.parametrize("words, cword, expected", [
    ("isagen gen --no", 2, ["plain,--no-cache"]),
    ("isagen gen --force --fo", 3, []),                     # given once already: not offered again
    ("isagen gen -D x=1 -", 4, None),                       # -D repeats: offered again (checked below)
    ("isagen report x.co -f j", 4, ["plain,json"]),
    ("isagen report x.co --format=h", 3, ["plain,html"]),
    ("isagen model ", 2, ["file,"]),                       # a file name: the shell completes it
    ("isagen --ver", 1, ["plain,--version"]),
    ("isagen nosuch ", 2, []),
])
def test_shell_completion_of_options_values_and_files(words, cword, expected):
    r = run_module(env={"_ISAGEN_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    assert r.returncode == 0 and r.stderr == "", r
    if expected is None:
        assert "plain,-D" in r.stdout.split() and "plain,--target" in r.stdout.split(), r.stdout
    else:
        assert r.stdout.split() == expected, r.stdout


def test_shell_completion_scripts(tmp_path):
    # zsh and fish get each command's one-line help beside it
    r = run_module(env={"_ISAGEN_COMPLETE": "zsh_complete", "COMP_WORDS": "isagen mo", "COMP_CWORD": "1"})
    from isagen.cli import LAZY
    assert r.stdout.splitlines() == ["plain", "model", LAZY["model"][1]], r
    r = run_module(env={"_ISAGEN_COMPLETE": "fish_complete", "COMP_WORDS": "isagen gen --as", "COMP_CWORD": "--as"})
    assert r.stdout.splitlines()[:2] == ["plain", "--asm-only"], r
    for shell in ("zsh", "fish"):
        r = run_module(env={"_ISAGEN_COMPLETE": f"{shell}_source"})
        assert r.returncode == 0 and f"_ISAGEN_COMPLETE={shell}_complete" in r.stdout, r
    # bash: source the script and complete as bash would, with `isagen` on the PATH
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = run_module(env={"_ISAGEN_COMPLETE": "bash_source"}).stdout
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "isagen").write_text(f"#!/bin/sh\nexec {sys.executable} -m isagen \"$@\"\n")
    (bindir / "isagen").chmod(0o755)
    (tmp_path / "complete.bash").write_text(script)
    probe = ('. ./complete.bash; COMP_WORDS=(isagen run x --backend ""); COMP_CWORD=4; '
             '_isagen_completion isagen; printf "%s\\n" "${COMPREPLY[@]}"')
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([bash, "--norc", "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["hip", "emu"], r


GEN_IMPORTS_SCRIPT = """
import contextlib, io, sys
before = set(sys.modules)
from isagen.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(["gen", sys.argv[1], "--target", "gfx942", "--no-cache", "-o", sys.argv[2]])
imported = sorted(set(sys.modules) - before)
import json
print(json.dumps([rc, imported]))
"""


def test_gen_start_up_imports_only_what_it_uses(tmp_path):
    # issue 17: a one-spec `isagen gen` writing a .co in process needs neither the decoder nor LLVM's
    # toolchain search (subprocess), the process pool, numpy, nor the build cache with --no-cache; the
    # second run reads the parsed ISA tables, opcode table and spec (isagen.isa.defs_cache), so it
    # imports neither PyYAML nor json (the first run does, to make them)
    env = dict(os.environ, ISAGEN_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    spec = str(bundled_specs_dir() / "gemm_bf16.yaml")
    never = {"isagen.isa.decoder", "isagen.objects.toolchain", "isagen.objects.cache", "subprocess",
             "multiprocessing", "concurrent.futures", "isagen.runtime", "torch", "numpy", *NOT_ON_THE_GEN_PATH}
    for run in (1, 2):
        out = subprocess.run([sys.executable, "-c", GEN_IMPORTS_SCRIPT, spec, str(tmp_path / "out")], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        rc, imported = json.loads(out.stdout.strip().splitlines()[-1])
        assert rc == 0
        assert not never & set(imported), sorted(never & set(imported))
        if run == 2:
            assert not {"yaml", "json"} & set(imported), sorted({"yaml", "json"} & set(imported))
    assert (tmp_path / "out" / "gemm_bf16.gfx942.co").stat().st_size > 0


# the command line's parser costs nothing to import: no click (its import took ~18 ms, with uuid, platform,
# datetime, inspect and gettext), no argparse (gettext); help, suggestions and completion import textwrap,
# difflib and shlex only when asked for
NOT_ON_THE_GEN_PATH = {"click", "argparse", "gettext", "uuid", "platform", "textwrap", "difflib", "shlex"}


def test_gen_command_imports_no_cli_framework(tmp_path):
    # the whole process as a user runs it (python -m isagen: __main__, the console script's path), every
    # module it imports listed by -X importtime
    env = dict(os.environ, ISAGEN_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "isagen", "gen",
                        str(bundled_specs_dir() / "gemm_bf16.yaml"), "--target", "gfx942", "--no-cache", "-o",
                        str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "isagen.cli" in imported and "isagen.cmdline" in imported
    top = {name.split(".")[0] for name in imported}
    assert not NOT_ON_THE_GEN_PATH & top, sorted(NOT_ON_THE_GEN_PATH & top)
    assert (tmp_path / "out" / "gemm_bf16.gfx942.co").stat().st_size > 0


GEN_ALL_SCRIPT = """
import contextlib, io, json, sys
from isagen.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(["gen", sys.argv[1], "--no-cache", "-j", "1", "-o", sys.argv[2]])
print(json.dumps([rc, "numpy" in sys.modules]))
"""


def test_building_every_bundled_spec_loads_no_numpy(tmp_path):
    # issue 17: the generators compute lane addresses and choose LDS swizzles in pure Python (numpy's
    # import alone is a large part of a one-spec `isagen gen`); numpy stays with the models and tests
    env = dict(os.environ, ISAGEN_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", GEN_ALL_SCRIPT, str(bundled_specs_dir()), str(tmp_path / "out")],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rc, numpy_loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert rc == 0
    assert not numpy_loaded
    built = {p.name for p in (tmp_path / "out").glob("*.co")}
    expected = {f"{s.name}.{t}.co" for s in load_specs([bundled_specs_dir()]) for t in s.targets}
    assert built == expected and len(expected) > 40, sorted(built ^ expected)
