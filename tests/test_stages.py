"""One release config and one stage sequence for every engine (issue 10: no doubled paths)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dpsynth import pipeline
from dpsynth.cli import build_parser
from dpsynth.pipeline import ReleaseConfig


def _config(tmp_path, demo_paths, **kw) -> ReleaseConfig:
    data, schema = demo_paths
    return ReleaseConfig.from_arguments(data=str(data), schema=str(schema), method="marginals", epsilon=1.0,
                                        out=str(tmp_path / "out"), workspace=str(tmp_path / "ws"), **kw)


def test_from_arguments_maps_text_and_none_to_the_config(tmp_path, demo_paths, monkeypatch):
    monkeypatch.setenv("DPSYNTH_WORKSPACE", str(tmp_path / "env-ws"))
    data, schema = demo_paths
    cfg = ReleaseConfig.from_arguments(data=str(data), schema=str(schema), method="marginals", epsilon=1.0,
                                       out="out", delta=None, rows=None, params=None, seed_file="",
                                       workspace=None, gate=None, sign_key=None)
    assert cfg == ReleaseConfig(data=data, schema=schema, method="marginals", epsilon=1.0, out=Path("out"))
    assert cfg.workspace == tmp_path / "env-ws" and cfg.seed_file is None and cfg.params == {}
    with pytest.raises(TypeError, match="unknown release settings \\['epsilom'\\]"):
        ReleaseConfig.from_arguments(data="d.csv", schema="s.yaml", method="marginals", epsilom=1.0, out="o")


def test_to_arguments_round_trips_every_field(tmp_path, demo_paths):
    cfg = _config(tmp_path, demo_paths, rows=5, params={"k": "2"}, seed_file=str(tmp_path / "seed"),
                  gate={"max_tvd_k1": 0.5}, sign_key=str(tmp_path / "key"), dataset="demo", period="day",
                  period_epsilon=2.0, internal_report=True, name="n", delta=1e-7)
    args = cfg.to_arguments()
    assert set(args) == {f.name for f in dataclasses.fields(ReleaseConfig)}
    assert all(not isinstance(v, Path) for v in args.values())  # storable as flow parameters
    assert ReleaseConfig.from_arguments(**args) == cfg


def test_cli_options_build_the_config_through_one_mapping(tmp_path, demo_paths, monkeypatch):
    """Every `dpsynth release` option named like a config field reaches the config."""
    seen: list[ReleaseConfig] = []

    def stop(config, progress=None):
        seen.append(config)
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "run_release", stop)
    from dpsynth.cli import main

    data, schema = demo_paths
    main(["release", "--engine", "local", "--data", str(data), "--schema", str(schema), "--method", "marginals",
          "--epsilon", "0.5", "--out", str(tmp_path), "--rows", "9", "--param", "a=b", "--gate", "max_tvd_k1=0.3",
          "--dataset", "demo", "--name", "x", "--workspace", str(tmp_path / "ws")])
    (cfg,) = seen
    assert cfg == ReleaseConfig(data=data, schema=schema, method="marginals", epsilon=0.5, out=tmp_path, rows=9,
                                params={"a": "b"}, gate={"max_tvd_k1": 0.3}, dataset="demo", name="x",
                                workspace=tmp_path / "ws")
    release = next(a for a in build_parser()._subparsers._group_actions[0].choices["release"]._actions
                   if a.dest == "delta")
    assert release.default is None  # the config's default applies, not a copy of it


def test_every_engine_follows_one_stage_sequence(tmp_path, demo_paths):
    """The local engine is run_stages over the stage functions: the order, the cache flag,
    the orchestration time, and a failure after measuring counted as spent."""
    calls: list[str] = []
    local = pipeline.local_runner()

    def recording(stage, *args):
        calls.append(stage)
        return local(stage, *args)

    plan = pipeline.prepare(_config(tmp_path, demo_paths, internal_report=True))
    timings = {"prepare": 0.0}
    done = pipeline.run_stages(plan, recording, timings, started=0.0)
    assert calls == ["encode", "measure", "synthesize", "validate", "internal_report", "publish"]
    assert Path(done.folder).is_dir() and done.cached == []
    assert set(done.timings) == {"prepare", "encode", "measure", "synthesize", "validate", "internal_report",
                                 "orchestration"}

    def broken(stage, *args):
        if stage == "synthesize":
            raise RuntimeError("injected")
        return local(stage, *args)

    plan = pipeline.prepare(_config(tmp_path, demo_paths, name="second"))
    with pytest.raises(pipeline.BudgetSpent, match="synthesize failed after measuring"):
        pipeline.run_stages(plan, broken, {})


def test_flow_and_local_engine_share_the_sequence():
    """The flow (dpsynth/orchestration/release.py) holds no stage order of its own: it calls run_stages."""
    import inspect

    import dpsynth.orchestration.release as release

    src = inspect.getsource(release)
    assert "run_stages(" in src and "claim_name" not in src and "charge_dataset" not in src
    assert set(release._TASKS) | {"publish"} == set(pipeline.engine._STAGE_FUNCTIONS)


def test_the_api_passes_other_config_settings_through_the_same_mapping(tmp_path, demo_paths):
    """dpsynth.release takes any ReleaseConfig field by keyword and refuses an unknown one by
    name, before anything is read or spent."""
    import dpsynth

    data, schema = demo_paths
    with pytest.raises(TypeError, match=r"unknown release settings \['sign_keys'\]"):
        dpsynth.release(data, schema, method="marginals", epsilon=1.0, out=tmp_path / "out",
                        workspace=tmp_path / "ws", sign_keys="k")
    assert not (tmp_path / "ws" / "releases").exists()


def test_encode_tolerates_a_concurrent_encode_of_the_same_input(tmp_path, demo_paths, monkeypatch):
    """Two releases of one input (different names) encode into the same cache folder; the
    one that finishes second must keep the first one's codes, not fail. Before the fix its
    directory rename failed (ENOTEMPTY) and the release exited 1 (seen in CI as a flaky
    two-process registry race)."""
    from dpsynth.pipeline import stages
    from dpsynth.schema import load_schema

    data, schema_path = demo_paths
    schema = load_schema(schema_path)
    real = stages.encode_to_parts
    ws = tmp_path / "ws"

    def rival_finishes_first(data_, schema_, tmp, **kw):
        real(data_, schema_, tmp, **kw)
        real(data_, schema_, tmp.parent / "codes", **kw)  # the other process's rename landed

    monkeypatch.setattr(stages, "encode_to_parts", rival_finishes_first)
    path = stages.encode_stage(Path(data), schema, ws, "0" * 64)
    assert path.is_dir() and any(path.iterdir())
    assert [p.name for p in path.parent.iterdir()] == ["codes"]  # no temporary folder left
