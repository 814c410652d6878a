"""A canary planted in the raw data must appear in no published file, log line or result."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from dpsynth import pipeline

CANARY_TEXT = "CANARY-7f3a91"
CANARY_NUMBER = "987654321.5"


def _planted(tmp_path, demo_paths):
    data, _ = demo_paths
    df = pd.read_csv(data, dtype=str, keep_default_na=False).head(1500)
    df.loc[7, "region"] = CANARY_TEXT        # out-of-domain category (no other bucket)
    df.loc[8, "education"] = CANARY_TEXT     # out-of-domain category (other bucket)
    df.loc[9, "income"] = CANARY_NUMBER      # out-of-bounds number
    path = tmp_path / "planted.csv"
    df.to_csv(path, index=False)
    return path


def _assert_absent(texts: dict[str, bytes]):
    for where, blob in texts.items():
        for canary in (CANARY_TEXT, CANARY_NUMBER, "987654321"):
            assert canary.encode() not in blob, f"canary {canary!r} leaked into {where}"


def _published(folder) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_canary_local(tmp_path, demo_paths, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    folder = pipeline.run_release(pipeline.ReleaseConfig(
        data=_planted(tmp_path, demo_paths), schema=demo_paths[1], method="marginals", epsilon=2.0,
        out=tmp_path / "out", workspace=tmp_path / "ws"))
    texts = _published(folder)
    validation = next((tmp_path / "ws").glob("releases/*/validation.json"))
    texts["validation.json"] = validation.read_bytes()
    out = capsys.readouterr()
    texts["logs"] = (caplog.text + out.out + out.err).encode()
    _assert_absent(texts)


@pytest.mark.flow
def test_canary_flow(prefect_harness, tmp_path, demo_paths, caplog, capfd):
    from dpsynth.orchestration.release import release_flow

    caplog.set_level(logging.DEBUG)
    result = release_flow(data=str(_planted(tmp_path, demo_paths)), schema_path=str(demo_paths[1]),
                          method="marginals", epsilon=2.0, out=str(tmp_path / "out"),
                          workspace=str(tmp_path / "ws"), name="canary")
    from pathlib import Path

    texts = _published(Path(result["release"]))
    texts["validation.json"] = next((tmp_path / "ws").glob("releases/*/validation.json")).read_bytes()
    # Prefect's persisted task results live in the workspace; they hold paths and seconds only.
    texts.update({f"prefect-result {p.name}": p.read_bytes() for p in (tmp_path / "ws" / "prefect-results").iterdir()})
    out = capfd.readouterr()
    texts["logs"] = (caplog.text + out.out + out.err).encode()
    _assert_absent(texts)
