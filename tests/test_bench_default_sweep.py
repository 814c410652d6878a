"""benchmarks/default_sweep.py: its tables carry their planted values, a reviewed draft is the
draft without markers and nothing else, and the leak check finds a planted value in any line."""

from __future__ import annotations

import pandas as pd

from benchmarks.default_sweep import _leaks, _strip_markers
from benchmarks.default_sweep_tables import BUILDERS, build_all
from dpsynth.privacy.schema_source import schema_source
from dpsynth.schema import load_schema
from dpsynth.schema.draft import draft_from_dataframe


def test_each_table_holds_its_planted_values(tmp_path):
    cases = build_all(tmp_path, {"one_row", "mixed", "semicolon", "drift_extra"})
    assert [c.name for c in cases] == ["mixed", "one_row", "semicolon", "drift_extra"]
    for case in cases:
        text = case.draft_data.read_text(encoding="utf-8")
        assert case.canaries and all(c in text for c in case.canaries)
    extra = cases[-1]
    assert len(pd.read_csv(extra.release_data).columns) == len(pd.read_csv(extra.draft_data).columns) + 1
    assert len(BUILDERS) >= 12


def test_the_reviewed_draft_drops_the_markers_only(tmp_path):
    df = pd.DataFrame({"g": ["a", "b"] * 30, "n": list(range(30)) * 2})
    src = tmp_path / "d.yaml"
    src.write_text(draft_from_dataframe(df, "t").to_yaml())
    _strip_markers(src, tmp_path / "r.yaml")
    draft, reviewed = load_schema(src), load_schema(tmp_path / "r.yaml")
    assert schema_source(draft) == "data_derived" and schema_source(reviewed) == "public"
    assert [c.to_dict() for c in reviewed.columns] == [
        {k: v for k, v in c.to_dict().items() if k != "drafted_from_data"} for c in draft.columns]


def test_the_leak_check_reads_every_line():
    from benchmarks.default_sweep_tables import Case
    case = Case("t", None, None, 1, 1, "", ("Zq-canary-t-0",))
    assert _leaks(case, "prepare: started\nsampling rows: Zq-canary-t-0 done") == ["Zq-canary-t-0"]
    assert _leaks(case, "dpsynth: error: column 'x' is bad") == []
