"""End-to-end release through the library stages (no Prefect)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dpsynth import pipeline
from dpsynth.publish import bundle
from dpsynth.rows.encoding import DataError, file_sha256
from dpsynth.methods import ParamError
from dpsynth.methods.marginals import MarginalsMethod
from dpsynth.privacy import BudgetExceeded
from dpsynth.schema import SchemaError, load_schema
from dpsynth.publish.verify import verify_release


def _config(tmp_path, demo_paths, **kw) -> pipeline.ReleaseConfig:
    data, schema = demo_paths
    base = dict(data=data, schema=schema, method="marginals", epsilon=1.0, out=tmp_path / "out",
                workspace=tmp_path / "ws")
    base.update(kw)
    return pipeline.ReleaseConfig(**base)


def test_release_bundle_and_manifest(tmp_path, demo_paths, seed_file):
    folder = pipeline.run_release(_config(tmp_path, demo_paths, seed_file=seed_file, rows=777))
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["manifest.json", "measurement.json", "measurement.parquet", "report.html",
                     "schema.yaml", "synthetic.csv", "synthetic.parquet", "validation.json"]  # no Data Docs by default
    m = json.loads((folder / "manifest.json").read_text())
    assert m["data_docs"] is False and not any(k.startswith("data-docs/") for k in m["files"])
    assert "Data Docs</th><td>not included" in (folder / "report.html").read_text()
    assert verify_release(folder) == []
    assert m["method"] == "marginals" and m["rows"] == 777
    assert m["privacy"]["epsilon"] == 1.0 and m["privacy"]["delta"] == 1e-6
    assert m["privacy"]["epsilon_spent"] <= 1.0 + 1e-9
    assert len(m["privacy"]["ledger"]) == 10 and all(s["spent"] for s in m["privacy"]["ledger"])
    assert set(m["timings"]) >= {"prepare", "encode", "measure", "synthesize", "validate", "publish"}
    assert m["seed_commitment"].startswith("hmac-sha256:")
    for rel, digest in m["files"].items():
        assert bundle.sha256_file(folder / rel) == digest
    assert {"numpy", "pandas", "pyarrow", "python"} <= set(m["versions"])
    assert m["code_version"].startswith("0.1.0") and m["schema_sha256"] == load_schema(demo_paths[1]).fingerprint()
    text = (folder / "manifest.json").read_text()
    seed = seed_file.read_bytes()
    assert seed.decode() not in text
    assert file_sha256(demo_paths[0]) not in text  # never a hash of the raw input
    df = pd.read_parquet(folder / "synthetic.parquet")
    assert list(df.columns) == load_schema(demo_paths[1]).names and len(df) == 777
    csv = pd.read_csv(folder / "synthetic.csv", dtype=str, keep_default_na=False)
    assert csv.shape == (777, 10) and set(csv["income"]) & {"NA"}


def test_data_docs_only_when_asked_styled_offline_and_verified(tmp_path, demo_paths):
    folder = pipeline.run_release(_config(tmp_path, demo_paths, name="docs-run", data_docs=True))
    m = json.loads((folder / "manifest.json").read_text())
    assert m["data_docs"] is True and "data-docs/index.html" in m["files"]
    assert verify_release(folder) == []
    assert "Data Docs</th><td>included" in (folder / "report.html").read_text()
    pages = list((folder / "data-docs").rglob("*.html"))
    assert {p.parts[-3] for p in (folder / "data-docs" / "validations").rglob("*.html")} == {"docs-run"}
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "__none__" not in text and "newsletter" not in text.lower() and "<footer" not in text
        assert ".card-header" in text  # our offline stylesheet, in place of the remote Bootstrap
    size = sum(p.stat().st_size for p in (folder / "data-docs").rglob("*") if p.is_file())
    assert size < 1_000_000  # GE's unlinked animations, logos and fonts (4 MB) are not copied
    # the manifest must say truly whether Data Docs are there
    forged = json.loads((folder / "manifest.json").read_text())
    forged["data_docs"] = False
    (folder / "manifest.json").write_text(json.dumps(forged))
    assert any("Data Docs are not included" in p for p in verify_release(folder))


def test_same_seed_gives_byte_identical_files(tmp_path, demo_paths, seed_file):
    a = pipeline.run_release(_config(tmp_path / "a", demo_paths, seed_file=seed_file))
    b = pipeline.run_release(_config(tmp_path / "b", demo_paths, seed_file=seed_file))
    for f in ("synthetic.parquet", "synthetic.csv", "measurement.parquet", "measurement.json", "schema.yaml",
              "validation.json"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    ma, mb = (json.loads((x / "manifest.json").read_text()) for x in (a, b))
    for m in (ma, mb):  # run times, and GE's Data Docs and the report (which show run times), differ
        m.pop("timings")
        m["files"] = {k: v for k, v in m["files"].items() if not k.startswith("data-docs/") and k != "report.html"}
    assert ma == mb
    other = tmp_path / "seed2"
    other.write_bytes(b"another-secret-seed-0123456789")
    c = pipeline.run_release(_config(tmp_path / "c", demo_paths, seed_file=other))
    assert (a / "synthetic.csv").read_bytes() != (c / "synthetic.csv").read_bytes()


def test_retry_after_crash_reuses_the_measurement(tmp_path, demo_paths, monkeypatch, measure_calls):
    calls = measure_calls
    cfg = _config(tmp_path, demo_paths)  # no seed: a redraw would give different noise

    def crash(*a, **k):
        raise RuntimeError("injected crash")

    monkeypatch.setattr(pipeline.stages, "synthesize_stage", crash)
    with pytest.raises(RuntimeError, match="injected"):
        pipeline.run_release(cfg)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    mfile = next((tmp_path / "ws" / "releases").glob("*/measurement/measurement.parquet"))
    before = mfile.read_bytes()
    monkeypatch.undo()
    measure_calls.clear()
    folder = pipeline.run_release(cfg)
    assert calls == []  # not measured again: no new noise, no second charge
    assert (folder / "measurement.parquet").read_bytes() == before
    ledger = json.loads(next((tmp_path / "ws" / "releases").glob("*/measurement/ledger.json")).read_text())
    assert ledger["rho_spent"] == pytest.approx(ledger["budget"]["rho"])


def test_name_measured_with_other_inputs_is_refused(tmp_path, demo_paths):
    pipeline.run_release(_config(tmp_path, demo_paths, name="r1", out=tmp_path / "o1"))
    with pytest.raises(pipeline.ReleaseError, match="already measured"):
        pipeline.run_release(_config(tmp_path, demo_paths, name="r1", epsilon=2.0, out=tmp_path / "o2"))


def test_existing_release_is_never_overwritten(tmp_path, demo_paths):
    folder = pipeline.run_release(_config(tmp_path, demo_paths))
    before = (folder / "synthetic.csv").read_bytes()
    with pytest.raises(pipeline.ReleaseError, match="never overwritten"):
        pipeline.run_release(_config(tmp_path, demo_paths))
    assert (folder / "synthetic.csv").read_bytes() == before


def test_crash_before_rename_leaves_no_release(tmp_path, demo_paths, monkeypatch):
    def boom(tmp):
        raise OSError("disk gone")

    monkeypatch.setattr(bundle, "_before_rename", boom)
    with pytest.raises(pipeline.BudgetSpent, match="budget of this release was spent: disk gone") as info:
        pipeline.run_release(_config(tmp_path, demo_paths))
    assert isinstance(info.value.__cause__, OSError)
    assert list((tmp_path / "out").iterdir()) == []
    monkeypatch.undo()
    folder = pipeline.run_release(_config(tmp_path, demo_paths))  # resumes from cached stages
    assert (folder / "manifest.json").exists()


def _no_measurement(tmp_path) -> bool:
    return not list((tmp_path / "ws").glob("releases/*/measurement"))


@pytest.mark.parametrize("kw, exc, word", [
    ({"epsilon": -1.0}, ValueError, "epsilon"),
    ({"delta": 2.0}, ValueError, "delta"),
    ({"method": "nope"}, ParamError, "nope"),
    ({"params": {"bogus": "1"}}, ParamError, "bogus"),
])
def test_bad_requests_fail_before_spending(tmp_path, demo_paths, kw, exc, word):
    with pytest.raises(exc, match=word):
        pipeline.run_release(_config(tmp_path, demo_paths, **kw))
    assert _no_measurement(tmp_path)


def test_plan_over_budget_is_refused(tmp_path, demo_paths, monkeypatch):
    def greedy(self, schema, budget):
        from dpsynth.privacy import Charge
        return (Charge(stage="measure/all", rho=budget.rho * 1.01),)

    monkeypatch.setattr(MarginalsMethod, "plan", greedy)
    with pytest.raises(BudgetExceeded):
        pipeline.run_release(_config(tmp_path, demo_paths))
    assert _no_measurement(tmp_path)


def test_bad_inputs_fail_before_spending(tmp_path, demo_paths):
    data, schema = demo_paths
    df = pd.read_csv(data, dtype=str, keep_default_na=False)
    cases = {
        "missing": (df.drop(columns=["health"]), "health"),
        "extra": (df.assign(ssn="123"), "ssn"),
        "empty": (df.iloc[:0], "no rows"),
    }
    for label, (frame, word) in cases.items():
        path = tmp_path / f"{label}.csv"
        frame.to_csv(path, index=False)
        with pytest.raises(DataError, match=word):
            pipeline.run_release(_config(tmp_path, demo_paths, data=path, name=label))
        assert _no_measurement(tmp_path), label
    bad_schema = tmp_path / "s.yaml"
    bad_schema.write_text("name: x\ncolumns:\n  - {name: a, type: numeric, bins: 3}\n")
    with pytest.raises(SchemaError, match="'a'"):
        pipeline.run_release(_config(tmp_path, demo_paths, schema=bad_schema))
    with pytest.raises(pipeline.ReleaseError, match="no such file"):
        pipeline.run_release(_config(tmp_path, demo_paths, data=tmp_path / "absent.csv"))
    short = tmp_path / "short-seed"
    short.write_bytes(b"123")
    with pytest.raises(ValueError, match="16 bytes"):
        pipeline.run_release(_config(tmp_path, demo_paths, seed_file=short))
    assert _no_measurement(tmp_path)


def test_row_oddities_are_mapped_not_raised(tmp_path, demo_paths):
    data, _ = demo_paths
    df = pd.read_csv(data, dtype=str, keep_default_na=False).head(400)
    df.loc[0, "region"] = "atlantis"        # unseen category, no other bucket
    df.loc[1, "education"] = "wizardry"      # unseen category -> other
    df.loc[2, "age"] = "-40"                 # out of bounds -> clamped
    df.loc[3, "income"] = "lots"             # unparseable -> missing
    df.loc[4, "hours_per_week"] = ""         # empty -> missing
    df.loc[5, "sex"] = ""                    # empty in a non-nullable column -> fill
    path = tmp_path / "odd.csv"
    df.to_csv(path, index=False)
    folder = pipeline.run_release(_config(tmp_path, demo_paths, data=path, rows=300))
    out = pd.read_csv(folder / "synthetic.csv", dtype=str, keep_default_na=False)
    for value in ("atlantis", "wizardry", "-40", "lots"):
        assert not (out == value).any().any()


def test_internal_report_stays_in_the_workspace(tmp_path, demo_paths):
    folder = pipeline.run_release(_config(tmp_path, demo_paths, internal_report=True))
    reports = list((tmp_path / "ws").glob("releases/*/internal-utility-report.json"))
    assert len(reports) == 1
    r = json.loads(reports[0].read_text())
    assert "NOT FOR PUBLICATION" in r["label"]
    assert r["tvd_by_k"]["1"]["mean"] < 0.05  # 1-way marginals are what the baseline measures
    assert r["tvd_by_k"]["2"]["mean"] > r["tvd_by_k"]["1"]["mean"]  # it learns no correlation
    assert not list(folder.rglob("*internal*"))


def test_internal_report_page_scores_every_pair_against_the_real_table(tmp_path, demo_paths):
    """Defect: --internal-report wrote a JSON file under the release key's folder and said
    nothing; the data owner gets an HTML page with every 2-way and a sample of 3-way
    marginals against the real table, and the console says where it is."""
    import io
    import re

    from dpsynth import progress

    sink = io.StringIO()
    with progress.reporting(progress.Console(sink)):
        folder = pipeline.run_release(_config(tmp_path, demo_paths, internal_report=True, method="pgm"))
    page_path = tmp_path / "ws" / "internal-reports" / f"{folder.name}.html"
    line = [ln for ln in sink.getvalue().splitlines() if ln.startswith("internal report")]
    assert line == [f"internal report (private, computed from the raw data: never publish it): {page_path}"]
    page = page_path.read_text()
    assert "INTERNAL - NOT FOR PUBLICATION" in page and "do not publish it" in page
    assert "Every 2-way marginal scored, worst first (45)" in page  # 10 columns: all 45 pairs
    assert "Every 3-way marginal scored, worst first (120)" in page  # 120 triples <= 200: all of them
    from dpsynth.measurement import Measurement

    pairs = [nm.attrs for nm in Measurement.load(folder).measured if len(nm.attrs) == 2]
    assert len(pairs) == 9  # MST: a spanning tree of the 10 columns
    assert len(re.findall(r"<td>yes</td>", page)) == 9  # exactly those pairs are marked measured
    assert not list(folder.rglob("*internal*")) and "INTERNAL" not in (folder / "report.html").read_text()
    r = json.loads(next((tmp_path / "ws").glob("releases/*/internal-utility-report.json")).read_text())
    assert r["scored_marginals"]["2"]["marginals"] == 45 and r["scored_marginals"]["3"]["of"] == 120
    assert r["scored_marginals"]["2"]["mean_tvd"] < r["scored_marginals"]["2"]["independent_mean_tvd"]


def test_internal_report_samples_triples_of_a_wide_table():
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.report.internal import internal_page
    from dpsynth.schema import schema_from_dict

    schema = schema_from_dict({"name": "w", "columns": [
        {"name": f"c{i}", "type": "categorical", "values": ["a", "b"]} for i in range(14)]})
    codes = np.random.default_rng(1).integers(0, 2, size=(500, 14)).astype(np.uint8)
    table = EncodedTable(schema, codes)
    page, summary = internal_page("w", "INTERNAL", table, table, {("c0", "c1")}, max_triples=50)
    assert summary["2"]["marginals"] == 91 and summary["3"] == {**summary["3"], "marginals": 50, "of": 364}
    assert summary["2"]["max_tvd"] == 0.0  # the same table: exact
    assert page.count("<td>yes</td>") == 1  # only the measured pair c0 x c1


def test_broken_synthesizer_fails_the_gate_and_publishes_nothing(tmp_path, demo_paths, monkeypatch):
    from dpsynth.methods.marginals import IndependentSampler

    original = IndependentSampler.sample  # marginals streams its synthesis block by block

    def swapped(self, n, rng):
        codes = original(self, n, rng).copy()
        i, j = self.schema.index("region"), self.schema.index("health")  # both have 4 codes
        codes[:, [i, j]] = codes[:, [j, i]]
        return codes

    monkeypatch.setattr(IndependentSampler, "sample", swapped)
    with pytest.raises(pipeline.ValidationFailed, match="region") as err:
        pipeline.run_release(_config(tmp_path, demo_paths, epsilon=5.0))
    assert "nothing was published" in str(err.value)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    kept = json.loads(next((tmp_path / "ws").glob("releases/*/validation.json")).read_text())
    assert kept["success"] is False and "max_tvd_k1" in kept["failed"]
    over = {e["marginal"] for e in kept["marginal_errors"] if e["tvd"] > e["threshold"]}
    assert over == {"region", "health"}
