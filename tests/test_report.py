"""Tests of dpsynth.report: a self-contained, escaped HTML release report.

One demo release and one real gate summary per module (GE's import is slow); the
escaping tests use a tiny hand-made schema and a hand-written gate summary.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest

from dpsynth.rows.encoding import EncodedTable, decode, encode, read_table
from dpsynth.gate import run_gate
from dpsynth.methods.base import Measurement, NoisyMarginal
from dpsynth.methods.marginals import MarginalsMethod
from dpsynth.privacy.accounting import epsilon_from_rho
from dpsynth.privacy.budget import Budget, Charge, Ledger
from dpsynth.report import build_report
from dpsynth.schema import load_schema, schema_from_dict

ROOT = Path(__file__).resolve().parents[1]
_VOID = {"meta", "img", "br", "hr", "input", "link", "col", "area", "base", "source", "wbr"}
_REMOTE = re.compile(r"""\b(?:src|href)\s*=\s*['"]?\s*(?:https?:)?//""", re.I)
_IMG = re.compile(r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"')


class _Balance(HTMLParser):
    """Checks that every non-void element is closed in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in _VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def _check_html(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    parser = _Balance()
    parser.feed(page)
    parser.close()
    assert not parser.errors, parser.errors[:5]
    assert not parser.stack, parser.stack


def _manifest(name: str, schema, m: Measurement, budget: Budget, rows: int) -> dict:
    """The fields publish_stage writes into manifest.json."""
    return {
        "name": name,
        "method": m.method,
        "parameters": dict(m.params),
        "schema": schema.name,
        "privacy": {
            "epsilon": budget.epsilon,
            "delta": budget.delta,
            "rho": budget.rho,
            "rho_spent": m.rho,
            "epsilon_spent": epsilon_from_rho(m.rho, budget.delta),
            "accounting": "zCDP, converted with Canonne-Kamath-Steinke (2020)",
            "neighbours": "add or remove one record",
            "ledger": [{**c.to_dict(), "spent": True} for c in m.charges],
        },
        "rows": rows,
        "rows_requested": None,
    }


@pytest.fixture(scope="module")
def demo():
    schema = load_schema(ROOT / "schemas" / "demo.yaml")
    raw = encode(read_table(ROOT / "data" / "demo.csv", schema), schema)
    method, budget = MarginalsMethod(), Budget(epsilon=1.0, delta=1e-6)
    rng = np.random.default_rng(99)
    m = method.measure(raw, Ledger(budget, method.plan(schema, budget)), rng)
    codes = method.synthesize(m, schema, None, rng)
    gate = run_gate(decode(codes, rng), codes, m, None)
    manifest = _manifest("demo-report-test", schema, m, budget, codes.n)
    return schema, m, codes, gate, manifest, build_report(manifest, schema, codes, m, gate)


def test_report_is_self_contained_html(demo):
    schema, _, _, _, _, page = demo
    _check_html(page)
    assert not _REMOTE.search(page)
    assert "@import" not in page and "url(" not in page
    assert "Content-Security-Policy" in page
    images = _IMG.findall(page)
    assert len(images) == len(schema.columns) + 1  # one per column, one TVD-by-size plot
    for data in images:
        svg = base64.b64decode(data).decode("utf-8")
        root = ElementTree.fromstring(svg)  # well-formed XML
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert "href" not in svg and "<script" not in svg and "url(" not in svg
    assert len(re.findall(r"<img\b", page)) == len(images)


def test_report_shows_release_ledger_and_validation(demo):
    schema, m, codes, gate, manifest, page = demo
    assert gate["success"]
    assert "demo-report-test" in page and "marginals" in page
    assert "passed" in page and f"{gate['statistics']['successful']} of {gate['statistics']['evaluated']}" in page
    assert f"{codes.n:,}" in page
    for c in m.charges:  # every ledger stage, with its share of the total
        assert c.stage in page
    assert page.count("10.0%") >= len(schema.columns)
    for col in schema.columns:
        assert f"{col.name}: {col.cardinality} codes" in page
    assert "Privacy ledger" in page and "Marginal accuracy" in page


def test_failed_gate_is_shown(demo):
    schema, m, codes, gate, manifest, _ = demo
    broken = dict(gate, success=False, failed=["region: in_domain", "max_tvd_k1"])
    broken["expectations"] = [dict(e) for e in gate["expectations"]]
    broken["expectations"][0]["success"] = False
    page = build_report(manifest, schema, codes, m, broken)
    assert "failed: not publishable" in page
    assert "<code>region: in_domain</code>" in page and "<code>max_tvd_k1</code>" in page
    assert 'class="failed"' in page


def test_report_escapes_every_text():
    nasty = "<b>x</b>"
    schema = schema_from_dict(
        {
            "name": "<script>alert('s')</script>",
            "columns": [
                {"name": nasty, "type": "categorical", "values": ["<i>a</i>", "b&c", "$10 \\ $x_"], "other": True,
                 "other_label": "\"><img src=x>"},
                {"name": "n", "type": "numeric", "bounds": [0, 10], "bins": 2, "missing": ["<NA>"]},
            ],
        }
    )
    rng = np.random.default_rng(0)
    codes = EncodedTable(schema, np.column_stack([rng.integers(0, 4, 50), rng.integers(0, 3, 50)]).astype(np.uint8))
    m = Measurement(
        method="marginals",
        params={"<p onclick=1>": "</table><!--x"},
        charges=(Charge(stage="measure/1-way/<b>x</b>", rho=0.5, mechanism="<gauss>"),),
        measured=(NoisyMarginal(attrs=(nasty,), counts=np.array([20.0, 20.0, 5.0, -3.0]), stddev=1.0),),  # n has none
    )
    gate = {
        "success": False,
        "failed": [f"{nasty}: in_domain"],
        "statistics": {"evaluated": 1, "successful": 0, "failed": 1, "rows": 50},
        "expectations": [
            {"name": "in_domain", "column": nasty, "expectation": "expect_<x>", "success": False,
             "observed": {"unexpected_count": 3, "<k>": 1}},
        ],
        "marginal_errors": [{"marginal": nasty, "k": 1, "tvd": 0.1, "threshold": 0.05}],
        "thresholds": {"max_tvd_k1": 0.05, "overridden": []},
    }
    manifest = {"name": "<i>release</i>", "privacy": {"epsilon": 1.0, "delta": 1e-6, "rho": 0.5}}
    page = build_report(manifest, schema, codes, m, gate)
    _check_html(page)
    for raw in (nasty, "<i>a</i>", "<script", "<img src=x", "<i>release</i>", "<gauss>", "<p onclick", "<!--x", "<NA>", "<k>"):
        assert raw not in page, raw
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "&lt;i&gt;release&lt;/i&gt;" in page
    assert "no 1-way DP marginal" in page
    assert len(_IMG.findall(page)) == 3


def test_minimal_inputs_still_render():
    schema = schema_from_dict({"name": "t", "columns": [{"name": "a", "type": "categorical", "values": ["x", "y"]}]})
    codes = EncodedTable(schema, np.zeros((5, 1), dtype=np.uint8))
    m = Measurement(method="custom", params={}, charges=())
    page = build_report({}, schema, codes, m, {})
    _check_html(page)
    assert "failed: not publishable" in page  # no gate summary: never shown as passed


def test_ledger_totals_a_pure_epsilon_ledger(demo):
    """A pure-epsilon ledger (private sampling) was shown with a total of 0 when the
    report summed rho alone; its total is now the same total_epsilon the ledger uses."""
    from dpsynth.report.privacy import budget_line, ledger_section

    schema, m, codes, _, manifest, _ = demo
    pure = dataclasses.replace(m, charges=(Charge(stage="measure/private-sampling", epsilon=0.75,
                                                  mechanism="private-sampling"),))
    privacy = {**manifest["privacy"], "rho_spent": 0.0,
               "ledger": [{**pure.charges[0].to_dict(), "spent": True}]}
    privacy.pop("epsilon_spent")
    full = {**manifest, "privacy": privacy}
    assert "Total: &epsilon; = <strong>0.75</strong>" in ledger_section(full, pure)
    assert budget_line(full["privacy"], pure)[1] == "&epsilon; = 0.75 (zCDP part &rho; = 0, pure &epsilon; part 0.75)"
