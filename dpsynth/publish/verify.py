"""Re-checks a published release folder, for consumers who did not build it.

What it proves (see docs/verify.md for the trust model): the folder is internally
consistent. Without a signature it does not prove who made it; with ``key`` (the
publisher's HMAC key) it also checks ``manifest.sig``.

Checks, in order:

* paths: every manifest entry is a relative path inside the folder (no absolute path,
  no ``..``, no symbolic link on the way); nothing outside the folder is ever opened;
* files: the required files are listed and present, each with its sha256, and
  nothing unlisted was added; Data Docs (``data-docs/``) are optional, and listed
  exactly when the manifest's ``data_docs`` says so;
* table: ``synthetic.csv`` is exactly what ``synthetic.parquet`` writes as CSV, and the
  table is valid against ``schema.yaml`` with the manifest's row count;
* ledger: recomputed from ``measurement.json``'s charges (and the noise scales they
  state), it equals the manifest's ledger, rho and epsilon, and fits the manifest's
  budget, whose rho follows from its (epsilon, delta);
* statement: the privacy statement agrees across manifest, measurement.json and
  report.html (its machine-readable tags and its header);
* schema source: a manifest that claims DP while ``schema.yaml`` still carries
  ``drafted_from_data`` markers (or ``draft: true``) fails; the manifest's
  ``privacy.schema`` matches ``schema.yaml``; a ``dp_draft`` block's rho fits its stated
  (epsilon, delta), and the dataset's stated lifetime spend covers this release and its
  draft. Markers deleted by hand, or a ``dp_draft`` block written by hand, are not
  detectable here (docs/schema-draft.md says what is and is not checkable).
"""

from __future__ import annotations

import hmac
import html
import io
import json
import math
import os
import re
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

import pandas as pd

from .bundle import MANIFEST, SIGNATURE, manifest_signature, sha256_file
from ..measurement import PrivacyStatement
from ..privacy.budget import BudgetExceeded, Charge, Ledger, LedgerError, is_pure, stated_budget, total_epsilon
from ..schema import SchemaError, load_schema
from ..gate.validation import record_checks

__all__ = ["REQUIRED_FILES", "verify_release"]

REQUIRED_FILES = (
    "synthetic.parquet", "synthetic.csv", "measurement.parquet", "measurement.json",
    "schema.yaml", "validation.json", "report.html",
)
_REL = 1e-9


def _close(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=_REL, abs_tol=1e-12)
    except (TypeError, ValueError):
        return False


def _confined(folder: Path, rel: str) -> str | None:
    """Why ``rel`` is not a plain path inside ``folder`` (None when it is)."""
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or "\\" in rel or any(part in ("", ".", "..") for part in rel.split("/")):
        return "is not a plain relative path inside the release (absolute or with '..')"
    here = folder
    for part in p.parts:
        here = here / part
        if here.is_symlink():
            return "goes through a symbolic link"
    return None


def _check_files(folder: Path, files: Mapping[str, Any]) -> tuple[list[str], set[str]]:
    """Problems with the file list, and the entries safe and intact to read."""
    problems, good = [], set()
    for rel in sorted(files):
        why = _confined(folder, rel)
        if why:
            problems.append(f"{rel}: {why}")
            continue
        path = folder / rel
        if not path.is_file():
            problems.append(f"{rel}: listed in the manifest but missing")
        elif sha256_file(path) != files[rel]:
            problems.append(f"{rel}: sha256 differs from the manifest")
        else:
            good.add(rel)
    for req in REQUIRED_FILES:
        if req not in files:
            problems.append(f"{req}: required, but not listed in the manifest")
    for p in _walk(folder):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            problems.append(f"{rel}: a symbolic link in the release")
        elif p.is_file() and rel not in files and rel not in (MANIFEST, SIGNATURE):
            problems.append(f"{rel}: present but not listed in the manifest")
    return problems, good


def _walk(folder: Path) -> list[Path]:
    """Every entry under ``folder``, never descending through a symbolic link."""
    out = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        out += [Path(root) / n for n in names + [d for d in dirs if (Path(root) / d).is_symlink()]]
    return sorted(out)


def _check_table(folder: Path, manifest: Mapping[str, Any]) -> list[str]:
    from ..rows.encoding import write_csv

    try:
        schema = load_schema(folder / "schema.yaml")
    except SchemaError as exc:
        return [f"schema.yaml: {exc}"]
    df = pd.read_parquet(folder / "synthetic.parquet")
    problems = [
        f"synthetic.parquet: check failed: {c['name']}"
        for c in record_checks(df, schema, manifest.get("rows")) if not c["success"]
    ]
    if not problems:
        buf = io.StringIO()
        write_csv(df, schema, buf)
        if buf.getvalue() != (folder / "synthetic.csv").read_text(encoding="utf-8"):
            problems.append("synthetic.csv: does not hold the same table as synthetic.parquet")
    return problems


def _implied_sigma_problems(charges: list[Charge]) -> list[str]:
    """A Gaussian charge that states its sigma must cost rho = sensitivity^2 / (2 sigma^2)."""
    out = []
    for c in charges:
        sigma = c.detail.get("sigma_k", c.detail.get("sigma"))
        sens = c.detail.get("sensitivity_l2", 1.0)
        if not isinstance(sens, (int, float)):
            sens = 1.0  # sqrt(Delta_k): sigma_k is stated per unit of sensitivity
        if isinstance(sigma, (int, float)) and sigma > 0 and c.rho > 0:
            if not _close(c.rho, float(sens) ** 2 / (2.0 * float(sigma) ** 2)):
                out.append(f"measurement.json: stage {c.stage} states sigma {sigma} but is charged rho {c.rho}")
    return out


def _stated_scale_problems(charges: list[Charge], measurement: Mapping[str, Any]) -> list[str]:
    """No published noise scale may be smaller than the least noise the charges allow: the
    pool of all of them (a marginal measured in several rounds and merged has less noise
    than any one of its measurements, never less than that pool)."""
    from ..precheck import pooled_noise_sd

    floor = pooled_noise_sd(charges)
    if floor is None:
        return []
    stated = [(f"marginal {e.get('key')}", e.get("stddev"), e.get("mechanism")) for e in measurement.get("measured", [])]
    if measurement.get("records"):
        r = measurement["records"]
        stated.append(("record count", r.get("stddev"), r.get("mechanism")))
    return [
        f"measurement.json: {what} states noise sd {sd} below the {floor:.6g} its charges allow"
        for what, sd, mech in stated
        if mech != "none" and isinstance(sd, (int, float)) and sd < floor * (1 - _REL)
    ]


def _check_ledger(manifest: Mapping[str, Any], measurement: Mapping[str, Any]) -> list[str]:
    privacy = manifest.get("privacy", {})
    try:
        budget = stated_budget(privacy)
        charges = [Charge.from_dict(c) for c in measurement["charges"]]
        stated = [Charge.from_dict(s) for s in privacy["ledger"] if s.get("spent", True)]
    except (KeyError, TypeError, ValueError) as exc:
        return [f"privacy sections are malformed ({type(exc).__name__})"]
    problems = _implied_sigma_problems(charges) + _stated_scale_problems(charges, measurement)
    rho = sum(c.rho for c in charges)
    eps = total_epsilon(charges, budget.delta)
    if privacy.get("delta") == 0:  # pure epsilon-DP: only pure-epsilon charges can give it
        if not is_pure(charges):
            problems.append("manifest: states pure epsilon-DP (delta 0) but the charges in measurement.json "
                            "are not all pure epsilon")
        if privacy.get("rho") is not None:
            problems.append("manifest: states pure epsilon-DP (delta 0) but also a zCDP rho")
    elif not _close(privacy.get("rho"), budget.rho):
        problems.append("manifest: rho does not follow from its epsilon and delta")
    if not _close(measurement.get("rho"), rho):
        problems.append("measurement.json: rho is not the sum of its charges")
    mine = sorted((c.stage, round(c.rho, 15), round(c.epsilon, 15)) for c in charges)
    theirs = sorted((c.stage, round(c.rho, 15), round(c.epsilon, 15)) for c in stated)
    if len(mine) != len(theirs) or any(
        a[0] != b[0] or not _close(a[1], b[1]) or not _close(a[2], b[2]) for a, b in zip(mine, theirs)
    ):
        problems.append("manifest: ledger differs from the charges in measurement.json")
    if not _close(privacy.get("rho_spent"), rho):
        problems.append("manifest: rho_spent differs from the charges in measurement.json")
    if not _close(privacy.get("epsilon_spent"), eps):
        problems.append("manifest: epsilon_spent differs from the charges in measurement.json")
    try:
        Ledger(budget, charges)  # the same check that refused over-budget plans before measuring
    except (BudgetExceeded, LedgerError) as exc:
        problems.append(f"ledger is over the budget or inconsistent: {exc}")
    return problems


_META = re.compile(r'<meta name="dpsynth:([a-z_]+)" content="([^"]*)">')


def _check_statement(manifest: Mapping[str, Any], measurement: Mapping[str, Any], report: str) -> list[str]:
    from ..report import PRIVACY_META, release_label

    privacy = manifest.get("privacy", {})
    problems = []
    try:
        st = PrivacyStatement.from_dict(measurement["statement"])
    except (KeyError, TypeError, ValueError):
        return ["measurement.json: has no valid privacy statement"]
    expected = {"differentially_private": st.differentially_private, "guarantee": st.kind,
                "neighbours": st.neighbours or None, "statement": st.detail or None}
    for key, value in expected.items():
        if privacy.get(key) != value:
            problems.append(f"manifest: privacy {key} differs from measurement.json")
    tags = {k: html.unescape(v) for k, v in _META.findall(report)}
    for key in PRIVACY_META:
        try:
            shown = json.loads(tags[key])
        except (KeyError, ValueError):
            problems.append(f"report.html: does not state {key}")
            continue
        same = _close(shown, privacy.get(key)) if isinstance(shown, (int, float)) and not isinstance(
            shown, bool) else shown == privacy.get(key)
        if not same:
            problems.append(f"report.html: {key} differs from the manifest")
    if html.escape(release_label(privacy)) not in report:
        problems.append("report.html: its header does not state the manifest's privacy guarantee")
    return problems


def verify_release(folder: str | Path, key: bytes | None = None) -> list[str]:
    """Returns the problems found (empty: the release checks out)."""
    folder = Path(folder)
    try:
        text = (folder / MANIFEST).read_text(encoding="utf-8")
        manifest: dict[str, Any] = json.loads(text)
        files = dict(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{MANIFEST}: cannot be read ({type(exc).__name__})"]
    problems, good = _check_files(folder, files)
    problems += _check_data_docs(manifest, files)
    if key is not None:
        problems += _check_signature(folder, text, key)
    try:
        measurement = json.loads((folder / "measurement.json").read_text()) if "measurement.json" in good else None
    except ValueError:
        measurement, problems = None, problems + ["measurement.json: is not JSON"]
    if measurement is not None:
        problems += _check_ledger(manifest, measurement)
        if "report.html" in good:
            problems += _check_statement(manifest, measurement, (folder / "report.html").read_text(encoding="utf-8"))
    if {"schema.yaml", "synthetic.parquet", "synthetic.csv"} <= good:
        problems += _check_table(folder, manifest)
    if "schema.yaml" in good:
        problems += _check_schema_source(folder, manifest)
    if measurement is not None and "schema.yaml" in good:
        problems += _check_groups(folder, measurement)
    return problems


def _check_groups(folder: Path, measurement: Mapping[str, Any]) -> list[str]:
    """A marginal on merged values must map every code of its column (the schema's
    cardinality) onto cells 0..k-1, all used, k its axis's length."""
    try:
        schema = load_schema(folder / "schema.yaml")
    except SchemaError:
        return []  # reported by _check_table
    cards = {c.name: c.cardinality for c in schema.columns}
    problems = []
    for e in measurement.get("measured", []):
        attrs, shape = list(e.get("attrs", [])), list(e.get("shape", []))
        for a, g in (e.get("groups") or {}).items():
            ok = (a in attrs and a in cards and isinstance(g, list) and len(g) == cards[a]
                  and all(isinstance(x, int) for x in g) and set(g) == set(range(max(g) + 1))
                  and len(shape) == len(attrs) and shape[attrs.index(a)] == max(g) + 1)
            if not ok:
                problems.append(f"measurement.json: marginal {e.get('key')} has an invalid map of merged codes for {a!r}")
    return problems


def _check_schema_source(folder: Path, manifest: Mapping[str, Any]) -> list[str]:
    """A DP claim needs a schema without data-derived markers; the schema's cost must agree."""
    from ..privacy.accounting import epsilon_from_rho
    from ..privacy.schema_source import schema_privacy

    try:
        schema = load_schema(folder / "schema.yaml")
    except SchemaError:
        return []  # reported by the table check
    privacy = manifest.get("privacy") or {}
    problems = []
    if privacy.get("differentially_private") and (schema.draft or schema.data_derived_columns):
        cols = ", ".join(schema.data_derived_columns) or "draft: true"
        problems.append(f"manifest: claims differential privacy, but schema.yaml was read from the private rows "
                        f"(drafted_from_data: {cols}): the release is NOT differentially private")
    if "schema" in privacy and privacy["schema"] != schema_privacy(schema):
        problems.append("manifest: privacy.schema differs from what schema.yaml states")
    d = schema.dp_draft
    if d is not None and not (schema.draft or schema.data_derived_columns):
        conv = float(d["delta"]) - float(d.get("delta_threshold", 0.0))
        if not 0 < conv < 1 or epsilon_from_rho(float(d["rho"]), conv) > float(d["epsilon"]) * (1 + _REL) + 1e-12:
            problems.append("schema.yaml: dp_draft's rho does not fit its stated epsilon and delta")
        ds = privacy.get("dataset") or {}
        spent, at = ds.get("spent_epsilon_including_this"), ds.get("spent_delta")
        if isinstance(spent, (int, float)) and isinstance(at, (int, float)) and 0 < at < 1:
            rho = float(privacy.get("rho_spent") or 0.0) + float(d["rho"])
            left = float(at) - float(ds.get("threshold_delta_including_this") or 0.0)
            if not left > 0 or epsilon_from_rho(rho, left) > float(spent) * (1 + 1e-6) + 1e-9:
                problems.append("manifest: the dataset's stated spend does not include the schema draft's cost")
    return problems


def _check_data_docs(manifest: Mapping[str, Any], files: Mapping[str, Any]) -> list[str]:
    """Data Docs are optional; the manifest's ``data_docs`` must say truly whether they are there."""
    listed = any(rel.startswith("data-docs/") for rel in files)
    says = manifest.get("data_docs")
    if says is None:  # releases from before the field: either way
        return []
    if says is True and "data-docs/index.html" not in files:
        return ["manifest: says Data Docs are included, but data-docs/index.html is not listed"]
    if says is False and listed:
        return ["manifest: says Data Docs are not included, but data-docs/ files are listed"]
    if not isinstance(says, bool):
        return ["manifest: data_docs must be true or false"]
    return []


def _check_signature(folder: Path, manifest_text: str, key: bytes) -> list[str]:
    sig = folder / SIGNATURE
    if not sig.is_file() or sig.is_symlink():
        return [f"{SIGNATURE}: missing: the release is not signed"]
    if not hmac.compare_digest(sig.read_text().strip(), manifest_signature(manifest_text, key)):
        return [f"{SIGNATURE}: does not match the manifest under this key"]
    return []
