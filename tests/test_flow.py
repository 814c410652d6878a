"""The Prefect release flow, on one shared test harness."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.flow


def _run(tmp_path, demo_paths, **kw):
    from dpsynth.orchestration.release import release_flow

    data, schema = demo_paths
    args = dict(data=str(data), schema_path=str(schema), method="marginals", epsilon=1.0,
                out=str(tmp_path / "out"), workspace=str(tmp_path / "ws"))
    args.update(kw)
    return release_flow(**args)


def test_full_release(prefect_harness, tmp_path, demo_paths, seed_file):
    result = _run(tmp_path, demo_paths, name="full", seed_file=str(seed_file))
    folder = tmp_path / "out" / "full"
    assert result["release"] == str(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["privacy"]["epsilon_spent"] <= 1.0 + 1e-9
    assert set(result["timings"]) >= {"encode", "measure", "synthesize", "validate", "orchestration"}
    assert list((tmp_path / "ws" / "prefect-results").iterdir())  # task results stay in the workspace


def test_task_results_need_no_storage_block(prefect_harness, tmp_path, demo_paths):
    """Defect: every run saved a storage block on the API and every cached task loaded it
    back by name (0.5-0.8 s of API calls per release). The results are files of the
    private workspace, written through an unsaved local file system."""
    from prefect.client.orchestration import get_client

    _run(tmp_path, demo_paths, name="noblock")
    assert list((tmp_path / "ws" / "prefect-results").iterdir())
    with get_client(sync_client=True) as client:
        names = [d.name or "" for d in client.read_block_documents()]
    assert not [n for n in names if n.startswith("dpsynth-ws-")], names


def test_retry_reuses_cached_measurement(prefect_harness, tmp_path, demo_paths, monkeypatch, measure_calls):
    import dpsynth.orchestration.tasks.synthesize as synth_task

    calls = measure_calls
    original_synth = synth_task.synthesize_stage

    def crash(*a, **k):
        raise RuntimeError("injected crash in synthesize")

    monkeypatch.setattr(synth_task, "synthesize_stage", crash)
    with pytest.raises(RuntimeError, match="injected"):
        _run(tmp_path, demo_paths, name="retry")
    assert calls == [1]
    assert not (tmp_path / "out" / "retry").exists()
    monkeypatch.setattr(synth_task, "synthesize_stage", original_synth)
    result = _run(tmp_path, demo_paths, name="retry")
    assert calls == [1]  # measured once: no noise redrawn, ledger charged once
    assert "measure" in result["cached"]
    ledgers = list((tmp_path / "ws" / "releases").glob("*/measurement/ledger.json"))
    assert len(ledgers) == 1


def test_scheduled_name_placeholder(prefect_harness, tmp_path, demo_paths):
    import re

    result = _run(tmp_path, demo_paths, name="nightly-{scheduled}")
    name = result["release"].rsplit("/", 1)[1]
    assert re.fullmatch(r"nightly-20\d{6}T\d{6}Z-[0-9a-f]{8}", name), name


def test_scheduled_names_are_unique_per_run_and_stable_per_retry():
    from datetime import datetime, timezone

    from dpsynth.orchestration.release import scheduled_name

    when = datetime(2026, 11, 23, 2, 0, 0, tzinfo=timezone.utc)
    a = scheduled_name("demo-{scheduled}", when, "1f0e2d3c-aaaa-bbbb-cccc-000000000001")
    b = scheduled_name("demo-{scheduled}", when, "9a8b7c6d-aaaa-bbbb-cccc-000000000002")
    assert a == "demo-20261123T020000Z-1f0e2d3c" and a != b  # two runs in the same second differ
    assert scheduled_name("demo-{scheduled}", when, "1f0e2d3c-aaaa-bbbb-cccc-000000000001") == a  # a retry keeps it


def test_a_deployment_without_dpsynth_home_is_refused_with_the_fix(monkeypatch):
    from dpsynth.pipeline import ReleaseError
    from dpsynth.orchestration.release import _check_deployment_home

    monkeypatch.setenv("DPSYNTH_WORKSPACE", "/.dpsynth/workspace")  # "{{ $DPSYNTH_HOME }}" was empty at deploy
    with pytest.raises(ReleaseError, match="DPSYNTH_HOME"):
        _check_deployment_home()
    monkeypatch.setenv("DPSYNTH_WORKSPACE", "/srv/dpsynth/.dpsynth/workspace")
    _check_deployment_home()  # a real home passes


def test_flow_parameters_cover_every_config_field(tmp_path, demo_paths):
    import dataclasses
    import inspect

    from dpsynth.pipeline import ReleaseConfig
    from dpsynth.orchestration.release import flow_parameters, release_flow

    cfg = ReleaseConfig(data=demo_paths[0], schema=demo_paths[1], method="marginals", epsilon=1.0, out=tmp_path)
    params = flow_parameters(cfg)
    assert set(params) == set(inspect.signature(release_flow.fn).parameters)
    assert len(params) == len(dataclasses.fields(ReleaseConfig))


def test_deployments_point_at_the_flow_with_valid_parameters():
    import importlib
    import inspect
    from pathlib import Path

    import yaml

    spec = yaml.safe_load((Path(__file__).resolve().parents[1] / "deployments" / "prefect.yaml").read_text())
    assert spec["deployments"]
    for dep in spec["deployments"]:
        module, _, attr = dep["entrypoint"].partition(":")
        flow = getattr(importlib.import_module(module.removesuffix(".py").replace("/", ".")), attr)
        accepted = set(inspect.signature(flow.fn).parameters)
        assert set(dep.get("parameters", {})) <= accepted, dep["name"]
        for cron in dep.get("schedules", []):
            assert len(cron["cron"].split()) == 5


def test_flow_holds_the_name_and_charges_the_dataset(prefect_harness, tmp_path, demo_paths):
    """The flow takes the name's lock and charges the registry (a deployment's period budget)."""
    from dpsynth import pipeline
    from dpsynth.privacy import registry

    first = _run(tmp_path, demo_paths, name="night-1", dataset="demo-table", period="day", period_epsilon=1.2)
    manifest = json.loads((tmp_path / "out" / "night-1" / "manifest.json").read_text())
    assert manifest["privacy"]["dataset"]["name"] == "demo-table" and first["release"]
    with pytest.raises(registry.RegistryRefused, match="this day"):
        _run(tmp_path, demo_paths, name="night-2", dataset="demo-table", period="day", period_epsilon=1.2)
    assert len(list((tmp_path / "ws" / "releases").glob("*/measurement/COMPLETE"))) == 1
    data, schema = demo_paths
    cfg = pipeline.ReleaseConfig(data=data, schema=schema, method="marginals", epsilon=1.0,
                                 out=tmp_path / "out", workspace=tmp_path / "ws", name="night-3")
    with pipeline.claim_name(pipeline.prepare(cfg)):  # another run holds night-3
        with pytest.raises(pipeline.ReleaseError, match="being built by another run"):
            _run(tmp_path, demo_paths, name="night-3")
    assert [r.name for r in registry.state(tmp_path / "ws", "demo-table").releases] == ["night-1"]


def test_flow_reports_the_small_sample_guard_like_the_local_engine(prefect_harness, tmp_path, demo_paths, monkeypatch):
    """The Prefect path asks the same guard as run_release, and returns its warning for the CLI."""
    from dpsynth.pipeline import engine

    seen = []

    def guard(plan, measurement_dir):
        seen.append(measurement_dir.name)
        return "expected utility below the independent baseline"

    monkeypatch.setattr(engine, "utility_warning", guard)
    result = _run(tmp_path, demo_paths, name="guarded")
    assert seen == ["measurement"]
    assert "expected utility below the independent baseline" in result["warnings"]


def test_flow_prints_the_local_engines_stage_lines(prefect_harness, tmp_path, demo_paths):
    """Defect: run from the CLI or the API the Prefect engine printed nothing until the end
    (41 s for a first pgm release). It now says each stage, warnings and counters as the
    local engine does, to the reporter installed by the caller."""
    import io

    from dpsynth import progress

    sink = io.StringIO()
    with progress.reporting(progress.Console(sink, warn_prefix="dpsynth: ")):
        _run(tmp_path, demo_paths, name="talks")
    lines = sink.getvalue().splitlines()
    for stage in ("prepare", "encode", "measure", "synthesize", "validate"):
        assert f"{stage}: started" in lines and any(ln.startswith(f"{stage}: done in ") for ln in lines), lines
    assert lines.index("encode: started") < lines.index("measure: started") < lines.index("validate: started")
    assert "encode: 5,000 rows" in lines
    assert not any("/releases/" in ln for ln in lines)  # no private release key in a progress line
