"""`make serve` end to end: a real Prefect server on loopback, the work pool, the
deployments and a worker; a triggered run publishes a release; stop ends it all."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVE = ROOT / "deployments" / "serve.sh"



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


@pytest.mark.slow
@pytest.mark.flow
def test_serve_deploys_runs_and_stops(tmp_path):
    home = tmp_path / "home"  # where the deployments run (entrypoint, data, schemas); releases land here
    home.mkdir()
    for d in ("data", "schemas", "flows", "tasks"):
        (home / d).symlink_to(ROOT / d)
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "DPSYNTH_HOME": str(home),
        "DPSYNTH_PREFECT_PORT": str(_free_port()),
        "DPSYNTH_BIN": str(Path(sys.executable).parent),
        # the worker's user workspace (its registry): never the deployments' home folder
        "DPSYNTH_WORKSPACE": str(tmp_path / "worker-ws"),
    }
    env.pop("PREFECT_API_URL", None)
    state = tmp_path / "prefect" / f"serve-{env['DPSYNTH_PREFECT_PORT']}"
    try:
        url = subprocess.run(["bash", str(SERVE), "start"], env=env, capture_output=True, text=True,
                             timeout=400, check=True).stdout.strip()
        assert url.startswith("http://127.0.0.1:")
        assert _alive(state / "server.pid") and _alive(state / "worker.pid")
        assert (state / "warm.pid").exists()  # the warm release worker (tests/test_warm_worker.py)
        # the dashboard answers (it was started with --no-ui: the links Prefect prints gave 404)
        import urllib.request

        base = url.removesuffix("/api")
        for path in ("/", "/runs/flow-run/00000000-0000-0000-0000-000000000000"):  # a run link, as a browser asks
            request = urllib.request.Request(base + path, headers={"Accept": "text/html"})
            with urllib.request.urlopen(request, timeout=30) as page:
                assert page.status == 200 and "html" in page.headers.get("Content-Type", ""), path
        # a deploy by hand without DPSYNTH_HOME fails at its build step, before it touches the
        # deployments (their last update stays as it was); the step's other refusals (a folder
        # lacking data/ or flows/) are test_deploy_build_step_checks_dpsynth_home's
        prefect = str(Path(sys.executable).parent / "prefect")
        api = {**env, "PREFECT_API_URL": url}

        def updated() -> str:
            out = subprocess.run([prefect, "--no-prompt", "deployment", "inspect", "dpsynth-release/demo-nightly",
                                  "--output", "json"], env=api, capture_output=True, text=True, timeout=120)
            return json.loads(out.stdout)["updated"]

        before = updated()
        no_home = {k: v for k, v in api.items() if k != "DPSYNTH_HOME"}
        bad = subprocess.run([prefect, "--no-prompt", "deploy", "--prefect-file", "deployments/prefect.yaml",
                              "--all"], cwd=ROOT, env=no_home, capture_output=True, text=True, timeout=300)
        assert bad.returncode != 0
        assert "set DPSYNTH_HOME to the folder holding data/" in bad.stdout + bad.stderr
        assert updated() == before
        # idempotent: a second start reuses what runs
        again = subprocess.run(["bash", str(SERVE), "start"], env=env, capture_output=True, text=True, timeout=400)
        assert again.returncode == 0 and again.stdout.strip() == url
        run = subprocess.run(
            [str(Path(sys.executable).parent / "prefect"), "--no-prompt", "deployment", "run",
             "dpsynth-release/demo-nightly", "--param", "name=served-1", "--watch", "--watch-timeout", "300"],
            env={**env, "PREFECT_API_URL": url}, capture_output=True, text=True, timeout=400,
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        manifest = json.loads((home / "releases" / "served-1" / "manifest.json").read_text())
        assert manifest.get("method_requested") == "auto" and manifest["validation"]["success"]
        assert manifest["privacy"]["dataset"]["name"] == "demo-nightly"
        art = subprocess.run(
            [str(Path(sys.executable).parent / "prefect"), "--no-prompt", "artifact", "inspect", "dpsynth-release",
             "-o", "json"], env={**env, "PREFECT_API_URL": url}, capture_output=True, text=True, timeout=120)
        assert art.returncode == 0 and "served-1" in art.stdout and "epsilon spent" in art.stdout
        from dpsynth.privacy import registry

        assert [d.name for d in registry.state(tmp_path / "worker-ws", "demo-nightly").draws] == ["served-1"]
        assert not (home / ".dpsynth").exists()
        # the flow knew it was a deployed run (read from its run's context): it printed the
        # registry line for the worker's console, which only a deployed run does
        assert "dpsynth: privacy registry" in (state / "worker.log").read_text()
        # the parameterised deployment has working defaults: no parameter needed
        run2 = subprocess.run(
            [str(Path(sys.executable).parent / "prefect"), "--no-prompt", "deployment", "run",
             "dpsynth-release/release", "--watch", "--watch-timeout", "300"],
            env={**env, "PREFECT_API_URL": url}, capture_output=True, text=True, timeout=400,
        )
        assert run2.returncode == 0, run2.stdout[-2000:] + run2.stderr[-2000:]
        assert [p.name for p in (home / "releases").iterdir() if p.name.startswith("release-")]
    finally:
        subprocess.run(["bash", str(SERVE), "stop"], env=env, capture_output=True, timeout=120)
    assert not (state / "server.pid").exists() and not (state / "worker.pid").exists()
    assert not (state / "warm.pid").exists() and not (state / "warm" / "sock").exists()
    down = subprocess.run(["bash", str(SERVE), "status"], env=env, capture_output=True, text=True, timeout=60)
    assert down.stdout.strip() == "down"


def test_scheduled_walkthrough_does_not_spend_the_nightly_budget():
    """Defect: the README's walk-through (`make serve`, then `make demo`) charged the demo
    release to the same dataset as the nightly deployment, whose day budget it then refused:
    a Failed nightly run. The nightly has its own dataset; `make demo` charges the schema's."""
    import re

    import yaml

    spec = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    nightly = next(d for d in spec["deployments"] if d["name"] == "demo-nightly")
    demo = re.search(r"^demo:.*?(?=^\S)", (ROOT / "Makefile").read_text(), re.S | re.M).group(0)
    passed = re.search(r"--dataset\s+(\S+)", demo)
    demo_dataset = passed.group(1) if passed else yaml.safe_load((ROOT / "schemas" / "demo.yaml").read_text())["name"]
    assert nightly["parameters"].get("period") == "day"
    assert nightly["parameters"]["dataset"] != demo_dataset, (nightly["parameters"], demo_dataset)


def test_serve_runs_the_dashboard():
    text = SERVE.read_text()
    assert "--no-ui" not in text and "PREFECT_UI_ENABLED=true" in text


def _home_check() -> str:
    import yaml

    steps = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())["build"]
    (step,) = [s["prefect.deployments.steps.run_shell_script"] for s in steps
               if s.get("prefect.deployments.steps.run_shell_script", {}).get("id") == "check-dpsynth-home"]
    assert step["shell"] is True
    return step["script"]


@pytest.mark.parametrize("layout, ok", [(None, False), ((), False), (("data", "schemas"), False),
                                        (("data", "schemas", "flows"), True)])
def test_deploy_build_step_checks_dpsynth_home(tmp_path, layout, ok):
    """The deploy-time check of deployments/prefect.yaml, run as Prefect runs it (a shell)."""
    env = {k: v for k, v in os.environ.items() if k != "DPSYNTH_HOME"}
    if layout is not None:
        for d in layout:
            (tmp_path / d).mkdir()
        env["DPSYNTH_HOME"] = str(tmp_path)
    out = subprocess.run(_home_check(), shell=True, env=env, capture_output=True, text=True, timeout=30)
    assert (out.returncode == 0) is ok
    if not ok:
        assert "set DPSYNTH_HOME" in out.stderr and ("unset" in out.stderr) is (layout is None)
