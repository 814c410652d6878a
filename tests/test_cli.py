from __future__ import annotations

import json

import pytest

from dpsynth.cli import main


def _release(tmp_path, demo_paths, *extra):
    data, schema = demo_paths
    return main(["release", "--data", str(data), "--schema", str(schema), "--method", "marginals",
                 "--epsilon", "1", "--out", str(tmp_path / "out"), "--workspace", str(tmp_path / "ws"),
                 "--engine", "local", *extra])


def test_release_prints_progress_and_publishes(tmp_path, demo_paths, capsys):
    assert _release(tmp_path, demo_paths, "--name", "r", "--rows", "50") == 0
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    for stage in ("prepare", "encode", "measure", "synthesize", "validate"):
        assert f"{stage}: started" in err and f"{stage}: done in" in err  # progress: stderr, like tqdm
        assert stage not in out  # stdout keeps only the result
    assert "encode: 5,000 rows" in err  # the encode counter
    assert err.index("validate: done in") < err.index("publish: started")  # a monitor can tell publish from validate
    assert "published" in out
    manifest = json.loads((tmp_path / "out" / "r" / "manifest.json").read_text())
    assert manifest["rows"] == 50 and manifest["data_docs"] is False
    assert not (tmp_path / "out" / "r" / "data-docs").exists()


def test_quiet_release_prints_only_the_result_and_warnings(tmp_path, demo_paths, capsys):
    assert _release(tmp_path, demo_paths, "--name", "q", "--quiet") == 0
    captured = capsys.readouterr()
    assert ": started" not in captured.err and "rows" not in captured.err
    assert _our_lines(captured.err) == [line for line in captured.err.splitlines() if line.strip()]
    assert any("no lifetime privacy cap" in line for line in _our_lines(captured.err))  # warnings stay
    assert captured.out.splitlines()[0].startswith("published ")


def test_wall_time_is_the_process_time(tmp_path, demo_paths):
    """Defect: the printed wall time began after the imports (29.6 s printed, 41.0 s taken).
    It is now the process's age: at least the time the whole command took to reach it."""
    import re
    import subprocess
    import sys
    import time

    data, schema = demo_paths
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "dpsynth.cli", "release", "--data", str(data), "--schema", str(schema),
         "--method", "marginals", "--epsilon", "1", "--out", str(tmp_path / "o"), "--engine", "local",
         "--workspace", str(tmp_path / "ws"), "--quiet"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    wall = float(re.search(r"^wall ([0-9.]+) s since the command started", proc.stdout, re.M).group(1))
    started = re.search(r"^published (.+)$", proc.stdout, re.M)
    assert started
    # the interpreter's start and the imports count (they are ~1-3 s here): only exit is left out
    assert took - 2.0 <= wall <= took + 0.05, (wall, took)


def test_release_out_defaults_to_releases(tmp_path, demo_paths, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data, schema = demo_paths
    assert main(["release", "--data", str(data), "--schema", str(schema), "--method", "marginals", "--epsilon", "1",
                 "--workspace", str(tmp_path / "ws"), "--engine", "local", "--name", "o", "--quiet"]) == 0
    assert (tmp_path / "releases" / "o" / "manifest.json").is_file()


def test_epsilon_has_help(capsys):
    from dpsynth.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["release", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--epsilon EPSILON privacy budget of this release" in text
    assert "--out OUT folder that receives the release folder (default: releases)" in text


def test_data_docs_flag_publishes_data_docs(tmp_path, demo_paths):
    assert _release(tmp_path, demo_paths, "--name", "d", "--rows", "50", "--data-docs") == 0
    assert json.loads((tmp_path / "out" / "d" / "manifest.json").read_text())["data_docs"] is True
    assert (tmp_path / "out" / "d" / "data-docs" / "index.html").is_file()


@pytest.mark.parametrize("extra, code, words", [
    (["--param", "x=1"], 2, ["unknown parameter", "'x'"]),
    (["--epsilon", "0"], 2, ["epsilon"]),
    (["--rows", "0"], 2, ["rows"]),
])
def test_failures_are_one_line(tmp_path, demo_paths, capsys, extra, code, words):
    assert _release(tmp_path, demo_paths, *extra) == code
    err = _our_lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("dpsynth: error:")
    for w in words:
        assert w in err[0]


def _our_lines(err: str) -> list[str]:
    """stderr lines written by dpsynth (in-process, other libraries' handlers may add their own)."""
    return [line for line in err.splitlines() if line.startswith("dpsynth")]


def test_failure_contract_in_a_fresh_process(tmp_path, demo_paths):
    import subprocess
    import sys

    data, schema = demo_paths
    proc = subprocess.run(
        [sys.executable, "-m", "dpsynth.cli", "release", "--data", str(data), "--schema", str(schema),
         "--method", "marginals", "--epsilon", "1", "--out", str(tmp_path / "o"), "--engine", "local",
         "--workspace", str(tmp_path / "ws"), "--param", "bogus=1", "--quiet"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and "'bogus'" in proc.stderr


def test_failure_is_the_last_stderr_line_after_progress(tmp_path, demo_paths):
    """Without --quiet, progress lines come first on stderr; the reason is still one line, the last."""
    import subprocess
    import sys

    data, schema = demo_paths
    proc = subprocess.run(
        [sys.executable, "-m", "dpsynth.cli", "release", "--data", str(data), "--schema", str(schema),
         "--method", "marginals", "--epsilon", "1", "--out", str(tmp_path / "o"), "--engine", "local",
         "--workspace", str(tmp_path / "ws"), "--param", "bogus=1"],
        capture_output=True, text=True,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and lines[-1].startswith("dpsynth: error: ") and "'bogus'" in lines[-1]
    assert [line for line in lines if line.startswith("dpsynth")] == [lines[-1]]


def test_existing_release_exits_nonzero(tmp_path, demo_paths, capsys):
    assert _release(tmp_path, demo_paths, "--name", "r") == 0
    assert _release(tmp_path, demo_paths, "--name", "r") == 2
    assert "never overwritten; pass another --name" in capsys.readouterr().err


def test_schema_infer_warns_and_drafts(tmp_path, demo_paths, capsys):
    data, _ = demo_paths
    out = tmp_path / "draft.yaml"
    assert main(["schema", "infer", str(data), "--out", str(out)]) == 0
    assert "reading the private data" in capsys.readouterr().err
    from dpsynth.schema import load_schema

    s = load_schema(out)
    assert s.column("age").type == "numeric" and s.column("region").type == "categorical"
    assert s.column("income").missing == ("NA",)
    capsys.readouterr()
    assert main(["schema", "check", str(out)]) == 1  # a draft: not releasable as it is
    err = capsys.readouterr().err
    assert "a DRAFT read from the private data (draft: true)" in err and "  age: bounds derived from the rows" in err


def test_methods_lists_baseline(capsys):
    assert main(["methods"]) == 0
    assert "marginals" in capsys.readouterr().out


def test_methods_is_a_short_table_dp_first_recommended_marked(capsys):
    """Defect: `dpsynth methods` printed about 150 lines of docstrings, alphabetically (a NOT DP
    method third), with Sphinx markup, and did not say which to use."""
    from dpsynth.methods import METHODS

    assert main(["methods"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= len(METHODS) + 7 and max(map(len, lines)) <= 120
    assert lines[0].split() == ["method", "guarantee", "when", "to", "use", "it"]
    assert lines[1].startswith("auto (default)")  # not a method: the default, which chooses one
    table = lines[2:len(METHODS) + 2]
    rows = [ln.split() for ln in table]
    names = [r[0] for r in rows]
    assert set(names) == set(METHODS) and names[0] == "pgm" and rows[0][1] == "*"
    words = [" ".join(ln.split()[1:3]) for ln in table]
    not_dp = [i for i, ln in enumerate(table) if "NOT DP" in ln]
    assert not_dp == [len(METHODS) - 1] and names[-1] == "microaggregation"  # DP methods first
    assert any("pure DP" in w for w in words)
    assert "* recommended: --method pgm --param select=aim --param degree=2" in "\n".join(lines)
    assert "dpsynth methods --verbose" in lines[-1]


def test_methods_text_has_no_sphinx_markup(capsys):
    for argv in (["methods"], ["methods", "--verbose"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        for markup in ("``", ":func:", ":class:", ":mod:", ":meth:", ":data:"):
            assert markup not in out, (argv, markup)


def test_methods_shows_description_guarantee_and_parameters(capsys):
    from dpsynth.methods import METHODS

    assert main(["methods", "--verbose"]) == 0
    out = capsys.readouterr().out
    blocks = {b.split(":", 1)[0]: b for b in out.split("\n\n")}
    assert set(METHODS) <= set(blocks)
    assert "DP 1-way histogram" in blocks["marginals"] and "parameters: none" in blocks["marginals"]
    assert "guarantee: Differentially private (neighbouring tables: add or remove one record)" in blocks["sds"]
    assert "--param reporting_length=  whole number  (default 3)" in blocks["sds"]
    assert "--param accuracy_mode=  one of prioritize_long, prioritize_short, balanced  (default prioritize_short)" in blocks["sds"]
    assert "--param fabrication_mode=  one of uncontrolled, progressive, balanced, minimize, or none" in blocks["sds"]
    assert "NOT DP" in blocks["private-sampling"] and "--param heuristic=  true or false  (default false)" in out
    assert "replace one record" in blocks["private-sampling"]  # the same relation its releases state


def test_methods_states_every_guarantee_description_and_range(capsys):
    """Each registered method's block: a one-sentence description, a declared guarantee
    (DP with its neighbour relation, or NOT DP), and ranges for the numeric parameters."""
    from dpsynth.methods import METHODS

    assert main(["methods", "--verbose"]) == 0
    blocks = {b.split(":", 1)[0]: b.splitlines() for b in capsys.readouterr().out.split("\n\n")}
    for name, cls in METHODS.items():
        lines = blocks[name]
        assert lines[0].rstrip().endswith("."), lines[0]  # a whole sentence, not a cut line
        guarantee = [ln for ln in lines if ln.startswith("  guarantee: ")]
        assert len(guarantee) == 1 and "not declared" not in guarantee[0], (name, guarantee)
        if cls.guarantee.differentially_private:
            assert f"(neighbouring tables: {cls.guarantee.neighbours})" in guarantee[0]
        else:
            assert "NOT differentially private" in guarantee[0]
    ma = "\n".join(blocks["microaggregation"])
    assert "guarantee: NOT differentially private: anonymised release" in ma
    assert "--param group_size=  whole number >= 2" in ma
    assert "pure epsilon-DP" in "\n".join(blocks["microaggregation-dp"])
    assert "--param degree=  2 or 3" in "\n".join(blocks["pgm"])
    assert "--param max_cells=  whole number in [2, 50000000]  (default 50000)" in "\n".join(blocks["one-step"])
    assert "--param m=  whole number >= the Walsh functions" in "\n".join(blocks["private-sampling"])


def test_gate_override_can_fail_a_release(tmp_path, demo_paths, capsys):
    assert _release(tmp_path, demo_paths, "--name", "strict", "--gate", "max_tvd_k1=0.000001") == 1
    err = _our_lines(capsys.readouterr().err)
    assert len(err) == 1 and "validation failed: max_tvd_k1" in err[0]
    assert "To publish: raise --epsilon" in err[0] and "--gate KEY=VALUE" in err[0]  # what to change
    assert not (tmp_path / "out" / "strict").exists()


def test_release_imports_pause_the_collector_and_always_restart_it(monkeypatch):
    """`dpsynth release` imports the pipeline with the cyclic collector paused and freezes
    what the import made; a failing import must not leave the collector off."""
    import gc

    from dpsynth.cli import release as cli

    monkeypatch.setattr(cli, "_FROZE", [])
    try:
        with pytest.raises(ImportError):
            with cli._long_lived_imports():
                assert not gc.isenabled()
                raise ImportError("a failing import")
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_python_dash_m_dpsynth_is_the_cli():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "dpsynth", "methods"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("method ") and "pgm *" in proc.stdout
