"""A release run from the CLI on a lasting Prefect server (issue 25): its flow run still sends
heartbeats (crash detection), yet its end does not wait for Prefect's heartbeat thread, and
the flow asks the API nothing it already knows (its deployment, its parameters' encoding)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dpsynth.orchestration.heartbeat import HEARTBEAT_EVENT, beat_until

ROOT = Path(__file__).resolve().parents[1]
DEMO, DEMO_SCHEMA = ROOT / "data" / "demo.csv", ROOT / "schemas" / "demo.yaml"


def test_beats_start_at_once_repeat_at_the_interval_and_stop():
    sent: list[float] = []
    with beat_until(lambda: sent.append(time.monotonic()), 0.05) as thread:
        time.sleep(0.32)
    n = len(sent)
    time.sleep(0.15)
    assert 3 <= n <= 9 and len(sent) == n  # nothing sent once the block has ended
    assert not thread.is_alive()


def test_a_long_interval_does_not_hold_the_end_and_a_failed_send_is_skipped():
    sent: list[int] = []

    def send() -> None:
        sent.append(1)
        raise RuntimeError("the API is down")

    t0 = time.monotonic()
    with beat_until(send, 3600.0) as thread:
        time.sleep(0.05)
    assert time.monotonic() - t0 < 0.5  # an hour's interval: the end does not wait for it
    assert sent == [1] and not thread.is_alive()


def test_the_deployment_is_read_from_the_runs_context(monkeypatch):
    from prefect.context import FlowRunContext

    from dpsynth.orchestration import release

    monkeypatch.setattr(FlowRunContext, "get", classmethod(lambda cls: None))
    assert release._deployment_id() is None  # not in a flow run
    run = SimpleNamespace(deployment_id="4b0c6f1e-0000-4000-8000-000000000001")
    monkeypatch.setattr(FlowRunContext, "get", classmethod(lambda cls: SimpleNamespace(flow_run=run)))
    assert release._deployment_id() == run.deployment_id


def test_plain_parameters_are_stored_without_prefects_encoder(tmp_path):
    """Defect: every flow run imported FastAPI (0.1 CPU s) to encode parameters that are
    already plain JSON; anything else still goes through Prefect's encoder."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from prefect import Flow\n"
        "from dpsynth.orchestration.release import flow_parameters, release_flow\n"
        "from dpsynth.pipeline import ReleaseConfig\n"
        f"config = ReleaseConfig(data=Path({str(DEMO)!r}), schema=Path({str(DEMO_SCHEMA)!r}), epsilon=1.0,\n"
        f"                       out=Path({str(tmp_path / 'out')!r}), params={{'select': 'aim'}}, gate={{'tvd_2way': 0.2}})\n"
        "params = flow_parameters(config)\n"
        "mine = release_flow.serialize_parameters(params)\n"
        "assert 'fastapi' not in sys.modules, 'FastAPI imported'\n"
        "assert mine == Flow.serialize_parameters(release_flow, params), 'not what Prefect stores'\n"
        "assert release_flow.serialize_parameters({'x': (1, 2)}) == {'x': [1, 2]}\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.flow
def test_a_flow_run_on_a_lasting_server_ends_without_waiting_for_a_heartbeat(prefect_harness, monkeypatch):
    """Defect: Prefect's heartbeat thread sleeps in one-second steps and the run's end joins
    it, so a release waited up to 1 s after its last stage (about 0.9 s for this short flow).
    With the flow's own heartbeats the run still sends one at its start, with Prefect's
    interval (an hour here), and ends at once."""
    import prefect.events
    from prefect import flow
    from prefect.context import FlowRunContext
    from prefect.settings import get_current_settings, temporary_settings

    from dpsynth.orchestration.heartbeat import heartbeats, own_heartbeats

    sent = []
    monkeypatch.setattr(prefect.events, "emit_event", lambda **kw: sent.append(kw))
    seen: dict = {}

    @flow(name="dpsynth-heartbeat-probe", persist_result=False)
    def probe() -> str:
        with heartbeats():
            seen["prefects"] = get_current_settings().flows.heartbeat_frequency
            seen["run"] = str(FlowRunContext.get().flow_run.id)
            seen["ended"] = time.monotonic()
        return "done"

    probe()  # a first run pays the clients' and event worker's start: not what is measured
    with temporary_settings({"flows.heartbeat_frequency": 3600}), own_heartbeats() as seconds:
        sent.clear()
        assert probe() == "done"
        took = time.monotonic() - seen["ended"]
    assert seconds == 3600 and seen["prefects"] is None  # Prefect's thread is off for the call
    beats = [e for e in sent if e["event"] == HEARTBEAT_EVENT]
    assert [b["resource"]["prefect.resource.id"] for b in beats] == [f"prefect.flow-run.{seen['run']}"]
    assert [r["prefect.resource.role"] for r in beats[0]["related"]] == ["flow"]
    assert took < 0.5, f"the flow run's end took {took:.2f} s"


@pytest.mark.flow
def test_a_cli_release_on_a_running_server_sends_the_flows_own_heartbeats(prefect_harness, tmp_path, monkeypatch):
    """The CLI's runner on a lasting server: the release's flow run sends its heartbeats from
    the flow (Prefect's thread off) and never asks the API for its deployment."""
    import prefect.events
    import prefect.runtime.deployment as runtime_deployment
    import prefect.settings

    from dpsynth.orchestration import server as srv
    from dpsynth.orchestration.runner import run_release_flow
    from dpsynth.pipeline import ReleaseConfig

    sent = []
    monkeypatch.setattr(prefect.events, "emit_event", lambda **kw: sent.append(kw))

    def no_lookup():
        raise AssertionError("the deployment was looked up on the API")

    monkeypatch.setitem(runtime_deployment.FIELDS, "id", no_lookup)
    running = srv.ApiServer(url=prefect.settings.PREFECT_API_URL.value(), kind="running")
    config = ReleaseConfig(data=DEMO, schema=DEMO_SCHEMA, method="marginals", epsilon=1.0, out=tmp_path / "out",
                           workspace=tmp_path / "ws", name="beats")
    result = run_release_flow(config, running)
    assert (Path(result["release"]) / "manifest.json").exists()
    beats = [e for e in sent if e["event"] == HEARTBEAT_EVENT]
    assert len(beats) == 1 and beats[0]["resource"]["prefect.resource.id"].startswith("prefect.flow-run.")
