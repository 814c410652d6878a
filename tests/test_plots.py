"""Tests of dpsynth.report.svg: the report's charts as plain SVG."""

from __future__ import annotations

from xml.etree import ElementTree

import numpy as np

from dpsynth.report.svg import bar_chart_svg, nice_ticks, svg_data_uri, tvd_strip_svg

SVG = "{http://www.w3.org/2000/svg}"


def _paths(svg: str) -> list[ElementTree.Element]:
    return ElementTree.fromstring(svg).findall(f"{SVG}path")


def test_bars_escape_labels_and_scale_to_the_data():
    nasty = '"><script>alert(1)</script>&'
    svg = bar_chart_svg(nasty, ["a", nasty, "c"], [(np.array([0.2, 0.5, 0.3]), "#111111"),
                                                     (np.array([0.1, 0.6, 0.3]), "#222222")])
    root = ElementTree.fromstring(svg)  # well-formed although every label is hostile
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert nasty in texts and "<script" not in svg
    bars = {p.get("fill"): p.get("d") for p in _paths(svg)}
    assert bars["#111111"].count("z") == 3 and bars["#222222"].count("z") == 3
    # the tallest bar (0.6) reaches higher (smaller y) than the 0.5 one
    tops = [float(seg.split("V")[1].split("h")[0]) for seg in bars["#222222"].split("z")[:3]]
    assert tops[1] == min(tops)


def test_bars_hide_labels_when_asked():
    svg = bar_chart_svg("wide", [f"code{i}" for i in range(80)], [(np.ones(80) / 80, "#111111")], show_labels=False)
    assert "code7" not in svg


def test_tvd_strip_marks_marginals_over_their_threshold():
    errors = [{"k": 1, "tvd": 0.01, "threshold": 0.05}, {"k": 1, "tvd": 0.02, "threshold": 0.05},
              {"k": 2, "tvd": 0.09, "threshold": 0.04}]
    svg = tvd_strip_svg(errors)
    ElementTree.fromstring(svg)
    assert "k = 1" in svg and "k = 2" in svg and "(2 marginals)" in svg
    diamonds = [p for p in _paths(svg) if p.get("fill") == "#c62828"]
    assert len(diamonds) == 2  # the one marginal over its threshold, and its legend entry
    assert "TVD over its threshold" in svg
    assert tvd_strip_svg([]) is None
    ok = tvd_strip_svg(errors[:2])
    assert "over its threshold" not in ok
    assert tvd_strip_svg(errors) == svg  # deterministic


def test_nice_ticks_and_data_uri():
    assert nice_ticks(0.37) == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert nice_ticks(0.0) == [0.0, 1.0]
    assert nice_ticks(1.0)[-1] >= 1.0
    assert svg_data_uri("<svg/>").startswith("data:image/svg+xml;base64,")


def test_long_labels_are_never_cut_and_the_chart_grows_to_hold_them():
    """Defect: long category labels were cut to 18 characters with an ellipsis, and the
    missing-value bar had no label (an empty missing token)."""
    import re

    from dpsynth.report.plots import bar_labels
    from dpsynth.schema import schema_from_dict

    long = "Associate degree, occupational program"
    schema = schema_from_dict({"name": "s", "columns": [
        {"name": "edu", "type": "categorical", "values": ["none", long], "missing": [""]},
        {"name": "age", "type": "numeric", "bounds": [0, 99], "bins": 2, "missing": ["NA"]}]})
    edu, age = schema.columns
    assert bar_labels(edu) == ["none", long, "(missing)"]
    assert bar_labels(age)[-1] == "(missing: NA)"
    svg = bar_chart_svg("edu", bar_labels(edu), [(np.array([0.2, 0.5, 0.3]), "#000")])
    assert f">{long}</text>" in svg and "…" not in svg and ">(missing)</text>" in svg
    height = int(re.search(r'height="(\d+)"', svg).group(1))
    assert height >= 30 + 200 + len(long) * 6  # plot area kept, the label's length added below it
    short = bar_chart_svg("x", ["a", "b"], [(np.array([0.5, 0.5]), "#000")])
    assert 'height="300"' in short  # short labels: the usual size
