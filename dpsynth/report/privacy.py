"""The report's privacy part: the plain-language statement at the top of the page and
the ledger.

:func:`privacy_box` turns the release's :class:`~dpsynth.measurement.PrivacyStatement`
(as the manifest states it), its (epsilon, delta) and the dataset's lifetime spend from
the privacy registry into sentences a data owner can read: what an attacker can and
cannot learn, who the guarantee protects (the neighbour relation), and what is left of
the dataset's budget. A release that is not differentially private gets a red box of
the same place and size that says so first. :func:`ledger_section` lists each stage's
cost. The machine-readable fields ``dpsynth verify`` compares are :data:`PRIVACY_META`.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from ..measurement import Measurement
from ..privacy.budget import Charge, total_epsilon
from .html import esc, num, table

__all__ = ["PRIVACY_META", "budget_line", "ledger_section", "privacy_box", "privacy_meta_tags", "release_label"]

#: The privacy fields a report states in machine-readable form (``dpsynth verify`` compares them).
PRIVACY_META = ("epsilon", "delta", "rho", "rho_spent", "epsilon_spent", "neighbours", "differentially_private",
                "guarantee", "statement")


def release_label(privacy: Mapping[str, Any]) -> str:
    """The page header's words: a release that is not DP says so first."""
    if privacy.get("differentially_private", True):
        return "Differentially private synthetic data release"
    return "NOT differentially private synthetic data release"


def privacy_meta_tags(privacy: Mapping[str, Any]) -> list[str]:
    """``<meta name="dpsynth:...">`` tags with the JSON of each :data:`PRIVACY_META` field."""
    return [
        f'<meta name="dpsynth:{k}" content="{esc(json.dumps(privacy.get(k)))}">' for k in PRIVACY_META
    ]


def _odds(eps: float) -> str:
    """e^epsilon in words, e.g. "2.7 times"."""
    if eps > 50:
        return "an astronomically large factor (the bound says almost nothing)"
    return f"{num(math.exp(eps), 3)} times"


def _delta_words(delta: float) -> str:
    if delta <= 0:
        return "with no exception"
    return f"except with a probability of at most &delta; = {num(delta)} (about 1 in {num(round(1 / delta))})"


def _dp_sentences(privacy: Mapping[str, Any], m: Measurement) -> list[str]:
    eps = privacy.get("epsilon_spent")
    delta = privacy.get("delta")
    if eps is None and delta is not None:
        eps = m.total_epsilon(float(delta))
    neighbours = privacy.get("neighbours") or m.statement.neighbours
    kind = "<strong>pure &epsilon;-differentially private</strong>" if delta == 0 else \
        "<strong>differentially private</strong>"
    lead = (f"This release is {kind}: it spent &epsilon; = <strong>{num(eps)}</strong>"
            f" at &delta; = {num(delta)}, for neighbouring tables that differ by "
            f"<strong>{esc(neighbours)}</strong>.")
    record = "one person's record" if "record" in str(neighbours) else "one unit of the neighbour relation"
    out = [f'<p class="lead">{lead}</p>']
    if eps is not None and delta is not None:
        out.append(
            f"<p><strong>What an attacker cannot learn.</strong> Whatever they knew beforehand, even every other "
            f"record of the table, the published files make any conclusion about {record} (whether it is in the "
            f"table at all, or what its values are) at most {_odds(float(eps))} more likely than it was without "
            f"that record, {_delta_words(float(delta))}. Releasing the same table without that record would have "
            "looked almost the same.</p>")
    out.append(
        "<p><strong>What an attacker can learn.</strong> What holds for the table as a whole: how each column is "
        "distributed and how columns go together, as far as the noisy counts below preserve them. A conclusion "
        "that holds for a whole group (for example, that smokers in one region report poorer health) can be "
        "drawn, and applies to a person in that group whether or not their record was used. The schema "
        "(column names, categories and bounds) is public: it is not protected.</p>")
    return out


def _not_dp_sentences(privacy: Mapping[str, Any], m: Measurement) -> list[str]:
    kind = privacy.get("guarantee") or m.statement.kind
    detail = privacy.get("statement") or m.statement.detail
    what = "an anonymised release" if kind == "anonymous" else "a heuristic run outside its privacy theorem"
    out = [f'<p class="lead"><strong>This release is NOT differentially private.</strong> It is {what}'
           + (f": {esc(detail)}." if detail else ".") + " No &epsilon; bound applies to it, whatever the "
           "ledger shows.</p>"]
    out.append(
        "<p><strong>What an attacker may learn.</strong> Someone who knows a few of a person's values (age "
        "band, region, sex) may find the group that person's record was averaged into, and read that group's "
        "other values from the published tables; combining this release with another one of the same table, "
        "or with outside data, can narrow it down further. Whether a given person is in the table may also "
        "show. Only publish it where the data owner accepts that risk.</p>")
    return out


def _lifetime(ds: Mapping[str, Any], dp: bool) -> str:
    """The dataset's cumulative spend over all its releases (from the registry, via the manifest)."""
    n = ds.get("releases_including_this")
    draws = ds.get("draws_including_this")
    again = (f" (measured {num(draws)} times in all: a release measured again, e.g. after its cache was "
             "cleared, is counted again)" if isinstance(draws, int) and isinstance(n, int) and draws > n else "")
    this = "" if dp else (" This release spent none of it, and the disclosure risk it carries is not "
                          "counted there.")
    spent = (f"<p><strong>The dataset's budget.</strong>{this} This is one of {num(n)} release(s) of dataset "
             f"<code>{esc(ds.get('name'))}</code> recorded in the privacy registry{again}; together they have spent "
             f"&epsilon; = <strong>{num(ds.get('spent_epsilon_including_this'))}</strong> "
             f"(composed at &delta; = {num(ds.get('spent_delta'))}).")
    if ds.get("cap_epsilon") is None:
        return spent + (" <strong>No lifetime cap is declared</strong>: nothing stops further releases from "
                        "adding up. Declare one with <code>dpsynth budget set "
                        f"{esc(ds.get('name'))} --epsilon E --delta D</code>.</p>")
    text = (f" Its lifetime cap is &epsilon; = {num(ds['cap_epsilon'])} (&delta; = {num(ds.get('cap_delta'))}): "
            f"&epsilon; = <strong>{num(ds.get('remaining_epsilon'))}</strong> remains for future releases.")
    if ds.get("period"):
        text += (f" Per {esc(ds['period'])}: &epsilon; = {num(ds.get('period_spent_epsilon_including_this'))} "
                 f"spent of {num(ds.get('period_cap_epsilon'))}.")
    return spent + text + "</p>"


def _schema_words(sch: Mapping[str, Any]) -> str:
    """Where the domain (categories, bounds, cut points) came from, and its own cost."""
    source = sch.get("source")
    if source == "data_derived":
        cols = ", ".join(f"{esc(k)} ({esc(', '.join(v))})" for k, v in (sch.get("data_derived_columns") or {}).items())
        return ('<p><strong>The schema was read from the private rows.</strong> Its bounds and categories'
                + (f" of {cols}" if cols else "") + " were taken from the raw data without a DP mechanism and "
                "published by explicit opt-in: they can reveal rare values and extremes of the input, and no "
                "&epsilon; bound covers them.</p>")
    if source == "dp_draft":
        return ("<p><strong>The schema was drafted with DP.</strong> Its categories and bounds were derived "
                f"from the rows with DP mechanisms that spent &epsilon; = {num(sch.get('epsilon'))} at &delta; = "
                f"{num(sch.get('delta'))} (&rho; = {num(sch.get('rho'))}), charged to dataset "
                f"<code>{esc(sch.get('dataset'))}</code>: the dataset's spend below includes it, this release's "
                "own &epsilon; above does not.</p>")
    return ""


def privacy_box(manifest: Mapping[str, Any], m: Measurement) -> str:
    """The plain-language privacy statement, first on the page."""
    privacy = manifest.get("privacy") or {}
    dp = bool(privacy.get("differentially_private", m.statement.differentially_private))
    parts = _dp_sentences(privacy, m) if dp else _not_dp_sentences(privacy, m)
    if privacy.get("schema"):
        parts.append(_schema_words(privacy["schema"]))
    if privacy.get("dataset"):
        parts.append(_lifetime(privacy["dataset"], dp))
    for note in privacy.get("notes", []):
        parts.append(f'<p class="note">Note: {esc(note)}</p>')
    title = "Privacy: what this release protects" if dp else "NOT differentially private"
    cls = "privacy" if dp else "privacy notdp"
    return f'<section class="{cls}" id="privacy"><h2>{title}</h2>{"".join(parts)}</section>'


def budget_line(privacy: Mapping[str, Any], m: Measurement) -> tuple[str, str]:
    """Budget and spend in one line: (epsilon, delta, rho) asked for, epsilon spent and its parts."""
    eps = privacy.get("epsilon_spent")
    if eps is None and privacy.get("delta") is not None:
        eps = m.total_epsilon(float(privacy["delta"]))
    pure = sum(c.epsilon for c in m.charges)
    if privacy.get("delta") == 0 and privacy.get("rho") is None:  # every charge pure epsilon
        asked = (f"&epsilon; = {num(privacy.get('epsilon'))}, pure &epsilon;-DP: &delta; = 0, no zCDP "
                 f"conversion (configured with &delta; = {num(privacy.get('delta_requested'))}, which changed "
                 "nothing)")
    else:
        asked = (f"&epsilon; = {num(privacy.get('epsilon'))}, &delta; = {num(privacy.get('delta'))}, "
                 f"&rho; = {num(privacy.get('rho'))} (zCDP)")
    if not privacy.get("differentially_private", m.statement.differentially_private):
        asked = f"not applicable: the method gives no DP guarantee (the release was configured with {asked})"
    if privacy.get("delta") == 0 and privacy.get("rho") is None:
        return asked, f"&epsilon; = {num(eps)} (pure &epsilon;, &delta; = 0)"
    spent = f"&epsilon; = {num(eps)} (zCDP part &rho; = {num(privacy.get('rho_spent', m.rho))}"
    return asked, spent + (f", pure &epsilon; part {num(pure)})" if pure else ")")


def ledger_section(manifest: Mapping[str, Any], m: Measurement) -> str:
    """The ledger: each stage's zCDP (rho) and pure-epsilon cost, and the (epsilon, delta) total.

    The total is :func:`~dpsynth.privacy.budget.total_epsilon` of the stages (pure parts
    add, the zCDP part converts), the same function the ledger and the manifest use.
    """
    privacy = manifest.get("privacy") or {}
    stages = privacy.get("ledger")
    charges = [Charge.from_dict(s) for s in stages] if stages else list(m.charges)
    rho_total = sum(c.rho for c in charges)
    eps_total = sum(c.epsilon for c in charges)

    def share(part: float, whole: float) -> str:
        return f"{100 * part / whole:.1f}%" if whole > 0 and part > 0 else "—"

    rows = [
        [f"<code>{esc(c.stage)}</code>", esc(c.mechanism), num(c.rho), num(c.epsilon),
         share(c.rho, rho_total) if c.rho else share(c.epsilon, eps_total)]
        for c in charges
    ]
    rows.append(["<strong>total</strong>", "", f"<strong>{num(rho_total)}</strong>",
                 f"<strong>{num(eps_total)}</strong>", ""])
    delta = privacy.get("delta")
    total = ""
    if delta is not None:
        eps = total_epsilon(charges, float(delta))
        how = ("pure &epsilon;-DP: the stages' &epsilon; added, no &rho; part" if float(delta) == 0
               else "pure &epsilon; parts added, the &rho; part converted")
        total = f'<p>Total: &epsilon; = <strong>{num(eps)}</strong> at &delta; = {num(delta)} ({how}).</p>'
    note = (
        '<p class="note">Each stage\'s cost: zCDP stages in &rho; (they add up, and their sum converts to '
        "(&epsilon;, &delta;)), pure-DP stages in &epsilon; (added by basic composition). Share = the "
        "stage's part of the total of its kind.</p>"
    )
    head = ["stage", "mechanism", "rho", "pure epsilon", "share"]
    return "<h2>Privacy ledger</h2>" + note + table(head, rows, numeric=(2, 3, 4)) + total
