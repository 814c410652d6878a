"""A release's HTML report for the data owner: one self-contained page that opens offline.

:func:`build_report` renders, in this order: the privacy statement in plain words (red
and first when the release is NOT differentially private, with the dataset's lifetime
spend from the privacy registry), the overall utility score beside the
independent-columns baseline (against the DP measurement, not the real table), the
accuracy for every measured marginal size, which marginals were measured, the release summary, every parameter with its effective value, the published files, the
privacy ledger, the validation gate and the plots.

Modules: :mod:`.privacy` (statement, ledger), :mod:`.accuracy` (utility score,
per-size accuracy, validation), :mod:`.release` (summary, parameters, files),
:mod:`.plots` (the charts, SVG from :mod:`dpsynth.report.svg`), :mod:`.html` (CSS, escaping, numbers, tables).

Everything shown is public: the schema, the DP measurement, the synthetic codes, the
manifest and the gate summary (counts and fractions). No raw row is read. The page
loads nothing from anywhere (no remote CSS, script, font or image; a
Content-Security-Policy forbids it) and every piece of text is HTML-escaped.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..rows.encoding import EncodedTable
from ..gate.scan import CodeCounts
from ..measurement import Measurement
from ..schema import Schema
from .accuracy import accuracy_section, measured_section, measurement_words, utility, validation_section
from .html import CSS, esc
from .plots import plots_section
from .privacy import PRIVACY_META, ledger_section, privacy_box, privacy_meta_tags, release_label
from .release import describe_file, files_section, parameters_section, summary_section

__all__ = ["PRIVACY_META", "build_report", "release_label", "utility"]


def _guidance_section(m: Measurement, schema: Schema) -> str:
    """A warning box when the small-sample guard predicts a loss to independent columns."""
    from ..methods.guidance import assess

    advice = assess(m, schema)
    if advice is None or not advice.below_baseline:
        return ""
    return f'<section class="warning"><h2>Utility warning</h2><p>{esc(advice.message)}</p></section>'


def _tables_note(m: Measurement) -> str:
    """The method's further published DP tables (e.g. sds's aggregate tuples), counted."""
    if not m.tables:
        return ""
    items = "".join(f"<li><code>measurement-{esc(t)}.parquet</code>: {describe_file(f'measurement-{t}.parquet', m)}"
                    "</li>" for t in sorted(m.tables))
    cover = ("they are covered by the same privacy guarantee" if m.statement.differentially_private
             else "they are NOT differentially private")
    return ("<p>Besides the marginals above, the method published these tables (the synthetic table is "
            f"built from them; {cover}):</p><ul>{items}</ul>")


def build_report(
    manifest: Mapping[str, Any],
    schema: Schema,
    codes: EncodedTable | CodeCounts,
    measurement: Measurement,
    gate: Mapping[str, Any],
    files: Mapping[str, int] | None = None,
) -> str:
    """The release report as one self-contained HTML page (a string).

    ``manifest``: the release manifest (or the part known so far: missing keys show as
    "—"); ``codes``: the synthetic codes, or their counts gathered chunk by chunk
    (:class:`dpsynth.gate.scan.CodeCounts`, what a release passes); ``gate``: the summary of
    :func:`dpsynth.gate.run_gate`; ``files``: the published files' sizes in bytes (name
    in the release folder -> size; without it the usual files are listed without sizes).
    """
    codes = CodeCounts.of(codes, measurement)
    title = f"dpsynth release report: {manifest.get('name', schema.name)}"
    privacy = manifest.get("privacy", {})
    status = "passed" if gate.get("success") else "failed"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        *privacy_meta_tags(privacy),
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{esc(title)}</h1>",
        f'<p class="muted">{esc(release_label(privacy))} &middot; validation {status} '
        f"&middot; everything on this page is computed from the {esc(measurement_words(measurement))}, the "
        "synthetic table and the public schema.</p></header>",
        privacy_box(manifest, measurement),
        _guidance_section(measurement, schema),
        accuracy_section(codes, measurement, gate),
        measured_section(measurement),
        _tables_note(measurement),
        summary_section(manifest, schema, codes.n, measurement),
        parameters_section(manifest, measurement),
        files_section(files, measurement),
        ledger_section(manifest, measurement),
        validation_section(gate),
        plots_section(schema, codes, measurement, gate),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
