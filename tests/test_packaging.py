"""Packaging: what ``pip install dpsynth`` puts into a user's environment (issue 15).

* no top-level package named ``flows`` or ``tasks`` (they would clash with a user's
  own): the Prefect orchestration installs as ``dpsynth.orchestration``, and the
  repository's ``flows/``/``tasks/`` are shims that are not installed;
* test-only tools in the ``test`` extra, never in the runtime dependencies;
* ``import dpsynth`` loads none of the heavy dependencies, and the library modules
  never load Prefect, Great Expectations or matplotlib at import.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("prefect", "great_expectations", "matplotlib", "scipy", "pandas", "pyarrow", "cvxpy", "sqlalchemy")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys, json; {statement}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_package_discovery_installs_only_dpsynth():
    find = _pyproject()["tool"]["setuptools"]["packages"]["find"]
    assert find["include"] == ["dpsynth", "dpsynth.*"]
    from setuptools import find_packages

    found = find_packages(str(ROOT), include=find["include"])
    assert "dpsynth.orchestration" in found and "dpsynth.orchestration.tasks" in found
    assert {p.split(".")[0] for p in found} == {"dpsynth"}


def test_test_tools_are_an_extra_not_runtime_dependencies():
    project = _pyproject()["project"]
    runtime = " ".join(project["dependencies"]).lower()
    for tool in ("pytest", "opendp", "pac-synth", "mbi", "jax"):
        assert tool not in runtime, tool
    test_extra = " ".join(project["optional-dependencies"]["test"]).lower()
    assert "pytest" in test_extra and "opendp" in test_extra


def test_supported_pythons_are_declared():
    """3.11-3.13: the pinned stack (prefect 3.8.8 and the rest) installed from the wheel on
    3.11.7, 3.12.1 and 3.13.0, and the core tests passed on each (issue 15 note)."""
    assert _pyproject()["project"]["requires-python"] == ">=3.11,<3.14"


def test_import_dpsynth_is_light():
    loaded = _loaded_after("import dpsynth")
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_library_modules_do_not_load_orchestration_or_plotting():
    loaded = _loaded_after("import dpsynth.api, dpsynth.pipeline, dpsynth.cli, dpsynth.report")
    assert not loaded & {"prefect", "great_expectations", "matplotlib"}, loaded


def test_a_release_of_one_method_imports_only_that_method():
    """The registry imports a method's module on lookup: preparing an sds release loads
    neither microaggregation (scipy.spatial) nor scipy.stats (0.8 s of a CLI release before)."""
    code = ("import sys, dpsynth.pipeline, dpsynth.publish.bundle; from dpsynth.methods import METHODS, get_method; "
            "get_method('sds', {}); assert sorted(METHODS) == sorted(METHODS._where)")
    out = subprocess.run([sys.executable, "-c", code + "; print(sorted(sys.modules))"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = set(eval(out.stdout.strip().splitlines()[-1]))  # noqa: S307 - our own printed list
    assert "dpsynth.methods.sds" in loaded
    assert not loaded & {"dpsynth.microaggregation", "dpsynth.methods.pgm", "dpsynth.methods.one_step",
                         "dpsynth.onestep", "scipy.stats", "scipy.spatial"}, sorted(loaded & {
                             "dpsynth.microaggregation", "scipy.stats", "scipy.spatial"})


def test_the_registry_refuses_a_class_under_another_name(monkeypatch):
    from dpsynth import methods

    registry = methods._Registry({"marginals": ".sds:SdsMethod"})
    with pytest.raises(RuntimeError, match="registered as 'marginals'"):
        registry["marginals"]
    assert "marginals" in registry and len(registry) == 1 and "sds" not in registry


def test_repository_shims_point_at_the_installed_flow():
    from dpsynth.orchestration.release import release_flow

    sys.path.insert(0, str(ROOT))
    try:
        import flows.release as shim
    finally:
        sys.path.remove(str(ROOT))
    assert shim.release_flow is release_flow


@pytest.mark.slow
def test_wheel_has_no_top_level_flows_or_tasks(tmp_path):
    """Builds the wheel (pip, isolated build) and lists it."""
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0 and "Could not find a version that satisfies" in out.stderr:
        pytest.skip("no package index to fetch the build backend from")
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("dpsynth-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"dpsynth", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "dpsynth/orchestration/release.py" in names and "dpsynth/py.typed" in names
    assert any(n.startswith("dpsynth/orchestration/prefect_schema/prefect-") for n in names)  # the shipped schema
    assert not any(n.startswith(("flows/", "tasks/")) for n in names)


def test_solvers_and_dask_are_extras_not_runtime_dependencies():
    """Defect (issue 15, install): cvxpy and its solvers (about 240 MB) and dask.distributed
    (14 packages) were installed for everyone, though only private sampling, the marginal
    correction and a Dask cluster use them."""
    project = _pyproject()["project"]
    runtime = " ".join(project["dependencies"]).lower()
    for heavy in ("cvxpy", "clarabel", "dask"):
        assert heavy not in runtime, heavy
    extras = project["optional-dependencies"]
    assert any("cvxpy" in r for r in extras["solvers"]) and any("dask[distributed]" in r for r in extras["dask"])
    assert "dpsynth[solvers,dask]" in extras["test"]  # `make test` and CI keep every path


@pytest.mark.parametrize("method, params, dask, extra", [
    ("private-sampling", {"Delta": "4", "heuristic": "true", "d": "1", "m": "64"}, None, "solvers"),
    ("marginals", {"correct_marginals": "true"}, None, "solvers"),
    ("marginals", {}, "local:1", "dask"),
])
def test_a_missing_extra_is_refused_before_anything_is_read(tmp_path, monkeypatch, method, params, dask, extra):
    import importlib.util

    from dpsynth import extras, pipeline
    from dpsynth.precheck import PrecheckError

    real = importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("cvxpy", "distributed") else real(name, *a))
    cfg = pipeline.ReleaseConfig(data=ROOT / "data" / "demo.csv", schema=ROOT / "schemas" / "demo.yaml", method=method,
                                 epsilon=1.0, out=tmp_path / "out", workspace=tmp_path / "ws", params=params,
                                 rows=40 if method == "private-sampling" else None, dask_address=dask)
    with pytest.raises(PrecheckError, match=rf"pip install 'dpsynth\[{extra}\]'"):
        pipeline.prepare(cfg)
    assert not (tmp_path / "ws").exists() or not list((tmp_path / "ws").glob("releases/*"))
    with pytest.raises(extras.MissingExtra, match=rf"dpsynth\[{extra}\]"):
        extras.require("cvxpy" if extra == "solvers" else "distributed")


def test_make_demo_installs_only_the_package_not_the_test_extra():
    """Defect: `make demo` on a fresh clone installed the test extra too (2:18, a 1.3 GB
    environment of 146 packages, most of it for the tests)."""
    import re

    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:(.*)$", text, re.M).group(1).split() == ["$(VENV)/.installed-demo"]
    recipe = re.search(r"^\$\(VENV\)/\.installed-demo:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert re.search(r"pip install [-a-z ]*-e \.\n", recipe) and "[" not in recipe
    full = re.search(r"^\$\(VENV\)/\.installed:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert '-e ".[test]"' in full and ".installed-demo" in full  # the full install satisfies the demo too


def test_make_test_runs_in_parallel_with_the_prefect_tests_grouped():
    import re
    from types import SimpleNamespace

    import conftest

    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^test: .*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert "-n $(TEST_WORKERS) --dist loadgroup" in recipe
    assert any("pytest-xdist" in r for r in _pyproject()["project"]["optional-dependencies"]["test"])
    marks: dict[str, list] = {"flow": [], "plain": []}

    def item(name, fixtures, marked, slow=False):
        return SimpleNamespace(name=name, fixturenames=fixtures, add_marker=marked.append,
                               get_closest_marker=lambda m: object() if slow and m == "slow" else None)

    items = [item("flow", ("tmp_path", "prefect_harness"), marks["flow"]),
             item("plain", ("tmp_path",), marks["plain"])]
    conftest.pytest_collection_modifyitems(None, items)
    assert [m.kwargs.get("name", m.args[0] if m.args else None) for m in marks["flow"]] == ["prefect"]
    assert [m.name for m in marks["flow"]] == ["xdist_group"] and marks["plain"] == []


def test_slow_tests_are_handed_out_first_in_their_collection_order():
    """A long test met last by the workers runs alone at the end (the 8-minute tail of
    test_nist_complete_mode_beats_the_independent_baseline); slow ones go first."""
    from types import SimpleNamespace

    import conftest

    def item(name, slow):
        return SimpleNamespace(name=name, fixturenames=(), add_marker=lambda m: None,
                               get_closest_marker=lambda m: object() if slow and m == "slow" else None)

    items = [item("a", False), item("b", True), item("c", False), item("d", True)]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.name for i in items] == ["b", "d", "a", "c"]


def test_the_prefect_harness_tests_run_on_one_worker(tmp_path):
    """Defect: under pytest 9 xdist's group suffix (set on ``item._nodeid``) was lost, so
    ``--dist loadgroup`` handed the flow tests to both workers and each started a Prefect
    harness. Run with the real hook on a stand-in harness: the flow tests share a worker."""
    import os
    import subprocess
    import sys

    pytest.importorskip("xdist")
    (tmp_path / "conftest.py").write_text(
        "import importlib.util, os, pytest\n"
        f"spec = importlib.util.spec_from_file_location('repo_conftest', {str(ROOT / 'tests' / 'conftest.py')!r})\n"
        "repo = importlib.util.module_from_spec(spec); spec.loader.exec_module(repo)\n"
        "pytest_collection_modifyitems = repo.pytest_collection_modifyitems\n"
        "@pytest.fixture(scope='session')\n"
        "def prefect_harness():\n"
        "    return os.environ['PYTEST_XDIST_WORKER']\n")
    (tmp_path / "test_g.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_flow(prefect_harness, i):\n"
        "    open(f'flow-{prefect_harness}-{i}', 'w').close()\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_plain(i):\n"
        "    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p",
                          "no:cacheprovider", "test_g.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    workers = {p.name.split("-")[1] for p in tmp_path.glob("flow-*")}
    assert len(list(tmp_path.glob("flow-*"))) == 6 and len(workers) == 1, workers


def test_a_pgm_release_from_codes_loads_neither_pandas_nor_pyarrow_nor_scipy():
    """Measuring and sampling ``pgm select=aim`` from integer codes needs numpy only: pandas and
    pyarrow (about 75 MB of a process's memory, docs/pgm.md's head-to-head) are imported by the
    functions that read, decode or write rows, not at module import (before, ``rows.encoding``,
    ``measurement``, ``schema.timecols`` and four more loaded both at import); the budget's
    epsilon-to-rho conversion solves in plain Python (before, it imported scipy.optimize: about
    40 MB). Nor yaml (a schema from a mapping needs no parser; 0.8 MB) nor logging (pgm's debug
    records go to logging only where the caller imported it; 0.4 MB)."""
    code = (
        "import sys, numpy as np\n"
        "from dpsynth.methods import get_method\n"
        "from dpsynth.privacy.budget import Budget, Ledger\n"
        "from dpsynth.rows.encoding import EncodedTable\n"
        "from dpsynth.schema import schema_from_dict\n"
        "cols = [{'name': f'c{j}', 'type': 'categorical', 'values': [str(v) for v in range(4)]} for j in range(4)]\n"
        "schema = schema_from_dict({'name': 't', 'columns': cols})\n"
        "rng = np.random.default_rng(0)\n"
        "codes = rng.integers(0, 4, size=(2000, 4)).astype(np.uint16)\n"
        "codes[:, 1] = (codes[:, 0] + (rng.random(2000) < 0.2)) % 4\n"
        "budget = Budget(epsilon=1.0, delta=1e-9)\n"
        "method = get_method('pgm', {'select': 'aim', 'degree': 2})\n"
        "ledger = Ledger(budget, method.plan(schema, budget))\n"
        "m = method.measure(EncodedTable(schema=schema, codes=codes), ledger, rng)\n"
        "synth = method.synthesize(m, schema, None, rng)\n"
        "assert synth.codes.shape[1] == 4, synth.codes.shape\n"
        "print(sorted({k.split('.')[0] for k in sys.modules} & {'pandas', 'pyarrow', 'scipy', 'yaml', 'logging'}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_the_names_taken_off_the_codes_path_keep_their_places():
    """Work on codes imports ``rows.table``, not ``rows.encoding``, and ``evaluation.metrics``
    imports the NIST score on first use (session 39, docs/pgm.md "Where our peak memory goes"):
    the old imports still give the same objects, in a fresh process where nothing else has
    imported them first."""
    code = (
        "import sys\n"
        "from dpsynth.evaluation.metrics import clipped_distributions\n"
        "assert 'dpsynth.evaluation.nist_score' not in sys.modules\n"
        "from dpsynth.evaluation.metrics import nist_kmarginal_score, NIST_DENSITY_MAX, _density_edges\n"
        "from dpsynth.evaluation import nist_score\n"
        "assert nist_kmarginal_score is nist_score.nist_kmarginal_score and _density_edges is nist_score._density_edges\n"
        "from dpsynth.rows import encoding, table\n"
        "from dpsynth.rows.encoding import DataError, EncodedTable, code_dtype, validate_codes\n"
        "assert (DataError, EncodedTable, code_dtype, validate_codes) == "
        "(table.DataError, table.EncodedTable, table.code_dtype, table.validate_codes)\n"
        "import dpsynth.evaluation.metrics as m\n"
        "try:\n    m.no_such_name\nexcept AttributeError:\n    pass\nelse:\n    raise AssertionError\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "ok", out.stdout + out.stderr


def test_the_release_command_imports_pandas_and_pyarrow_before_it_forks_its_gate_worker(tmp_path):
    """The row modules import pandas and pyarrow where they use them; the release command
    imports them (``load_arrow``) before it forks its gate worker, so that the worker shares
    them as it did when every module imported them at its top (without it, a whole release of
    the demo table peaked about 6 MB higher: 253.5 -> 259.9 MB). It imports no scipy before the
    fork: the budget's conversion no longer needs it, and the worker imports its own with Great
    Expectations (before, ``load_solver`` imported scipy.optimize there: the two processes held
    about 5 MB more in all, docs/privacy.md "The conversion's solver")."""
    wanted = ("pandas", "pyarrow.compute", "pyarrow.csv", "pyarrow.parquet")
    code = (
        "import sys\n"
        "from dpsynth.gate import worker\n"
        "def start():\n"
        f"    print(sorted(m for m in {wanted!r} if m in sys.modules), 'scipy' in sys.modules)\n"
        "    raise SystemExit(0)\n"
        "worker.start = start\n"
        "from dpsynth.cli import main\n"
        f"main(['release', '--data', 'data/demo.csv', '--schema', 'schemas/demo.yaml', '--epsilon', '1', '--out',"
        f" {str(tmp_path / 'out')!r}, '--workspace', {str(tmp_path / 'ws')!r}, '--engine', 'local', '--quiet'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == f"{sorted(wanted)} False", out.stdout + out.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # stopped before any release
