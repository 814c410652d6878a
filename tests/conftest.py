"""Shared fixtures. Flow tests share one Prefect test harness per session."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Tests never touch the real home: the default workspace (one per user, in the user's data
# folder) points into a temporary folder for the whole session, in this process and in
# every subprocess a test starts. Tests of the default's resolution monkeypatch these.
_SESSION_HOME = Path(tempfile.mkdtemp(prefix="dpsynth-tests-"))
os.environ["DPSYNTH_WORKSPACE"] = str(_SESSION_HOME / "workspace")
os.environ["XDG_DATA_HOME"] = str(_SESSION_HOME / "xdg-data")
os.environ["XDG_CACHE_HOME"] = str(_SESSION_HOME / "xdg-cache")  # the Prefect database template, too


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_HOME, ignore_errors=True)


def shared_data() -> Path | None:
    """../shared/data beside the repository (absent in a user's checkout)."""
    env = os.environ.get("DPSYNTH_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(ROOT.parent / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c
    return None


@pytest.fixture
def shared_data_dir() -> Path:
    d = shared_data()
    if d is None:
        pytest.skip("../shared/data is absent")
    return d


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`: -n 2 --dist loadgroup) every test that uses the shared
    Prefect harness runs in one group, on one worker: one server start-up, not one per worker.

    The ``slow`` tests run first (otherwise in collection order): the workers take tests one
    at a time in this order, so a long test met last would leave one worker running it alone
    while the other has finished (the last 8 minutes of a 35-minute run under load 10); the
    short tests at the end fill the gaps."""
    loadgroup = bool(getattr(getattr(config, "option", None), "loadgroup", False))  # set on xdist's workers
    for item in items:
        if "prefect_harness" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("prefect"))
            _name_the_group(item, "prefect", loadgroup)
    items[:] = sorted(items, key=lambda item: item.get_closest_marker("slow") is None)


def _name_the_group(item, group: str, loadgroup: bool) -> None:
    """The group's suffix on the test's id, which xdist's scheduler groups by. xdist 3.8 adds
    it by setting ``item._nodeid``, which pytest 9 no longer reads (it keeps the id in
    ``item._id``): the group was ignored and both workers started a Prefect harness."""
    if loadgroup and hasattr(item, "_id") and "@" not in item.nodeid:
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(f"{item.nodeid}@{group}")


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """One temporary Prefect API for all flow tests (starting one costs 5-45 s)."""
    home = tmp_path_factory.mktemp("prefect-home")
    os.environ["PREFECT_HOME"] = str(home)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def demo_paths() -> tuple[Path, Path]:
    return ROOT / "data" / "demo.csv", ROOT / "schemas" / "demo.yaml"


@pytest.fixture
def seed_file(tmp_path) -> Path:
    p = tmp_path / "seed"
    p.write_bytes(b"0123456789abcdef-test-seed-not-secret")
    return p


@pytest.fixture
def measure_calls():
    """Counts calls of the marginals method's ``measure`` (one entry per call): a test asserts
    a rerun, retry or republish measured (and so charged) nothing new. The patch is its own,
    so a test's ``monkeypatch.undo()`` keeps the count going (``clear()`` starts it again)."""
    from dpsynth.methods.marginals import MarginalsMethod

    calls: list[int] = []
    original = MarginalsMethod.measure

    def counting(self, *a, **k):
        calls.append(1)
        return original(self, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MarginalsMethod, "measure", counting)
        yield calls
