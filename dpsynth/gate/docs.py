"""The gate's Data Docs: GE's rendered site, stripped of values and of remote assets.

GE lists "unexpected values" of failing expectations. :func:`_render_docs` rewrites the
stored validation results of a file-backed GE context to counts, fractions and schema
column names (:func:`_sanitise_result`) before GE renders them, copies only the rendered
site and strips every reference to a remote script, stylesheet or image, so the pages
open offline and fetch nothing. GE's vendor footer and the static files no page links
to are dropped; :mod:`.docs_style` supplies the styling the remote assets gave. The whitelist of GE counts lives here and is shared by
the gate's summary.
"""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import unquote, urlparse

import numpy as np

from .checks import MARGINALS_SUITE, RECORDS_SUITE, Plan
from .docs_style import OFFLINE_CSS
from .thresholds import GateError

# Integer counts GE reports that carry no value of the table.
_GE_COUNTS = ("element_count", "unexpected_count", "missing_count")
_GE_PERCENTS = {"unexpected_percent": "unexpected_fraction", "missing_percent": "missing_fraction"}
_WITHHELD = "details withheld: GE error messages may quote table values"


def _raised(r: Any) -> bool:
    info = getattr(r, "exception_info", None) or {}
    if isinstance(info, Mapping) and "raised_exception" in info:
        return bool(info.get("raised_exception"))
    # several expectations may report one exception_info per metric
    return any(isinstance(v, Mapping) and v.get("raised_exception") for v in (info.values() if isinstance(info, Mapping) else []))


def _exact_counts(counts: Mapping[str, Any]) -> dict[str, Any]:
    """GE's count and percent fields from a check's exact whole-table counts."""
    rows = int(counts.get("element_count", 0))
    bad, missing = int(counts.get("unexpected_count", 0)), int(counts.get("missing_count", 0))
    present = rows - missing
    out: dict[str, Any] = {"element_count": rows, "unexpected_count": bad}
    if "missing_count" in counts:
        out["missing_count"] = missing
        out["missing_percent"] = 100.0 * missing / rows if rows else 0.0
    out["unexpected_percent"] = 100.0 * float(counts.get("unexpected_fraction", 0.0))
    out["unexpected_percent_total"] = 100.0 * bad / rows if rows else 0.0
    out["unexpected_percent_nonmissing"] = 100.0 * bad / present if present else 0.0
    return out


def _sanitise_result(result: Any, column_names: Sequence[str], plan: Plan | None = None) -> None:
    """Rewrites one stored suite result in place to counts, fractions and schema names.

    With the ``plan``, a check whose exact whole-table counts the scan gathered shows those
    instead of GE's counts over the few witness rows it evaluated; a check asserted on the
    statistics table (the row count) shows no per-row counts (GE's would count that table)."""
    allowed = set(column_names)
    for r in result.results:
        raw = dict(r.result or {})
        clean: dict[str, Any] = {}
        for k in (*_GE_COUNTS, *_GE_PERCENTS, "unexpected_percent_total", "unexpected_percent_nonmissing"):
            v = raw.get(k)
            if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
                clean[k] = v
        check = _check_of(r, plan)
        if check is not None and check.counts is not None:
            clean = _exact_counts(check.counts) if check.counts else {}
        obs = raw.get("observed_value")
        if isinstance(obs, (int, float, np.integer, np.floating)) and not isinstance(obs, bool):
            clean["observed_value"] = obs
        elif isinstance(obs, str) and re.fullmatch(r"[A-Za-z0-9_\[\]]{1,40}", obs):
            clean["observed_value"] = obs  # a dtype name from the type check
        elif isinstance(obs, (list, tuple)):
            clean["observed_value"] = [c if c in allowed else "(a column not in the schema)" for c in obs]
        if "element_count" in clean or "unexpected_count" in clean:
            clean["partial_unexpected_list"] = []
        r.result = clean
        if _raised(r):
            r.exception_info = {
                "raised_exception": True,
                "exception_message": _WITHHELD,
                "exception_traceback": _WITHHELD,
            }


def _check_of(r: Any, plan: Plan | None) -> Any:
    """The plan's check behind one GE result (by the index in its meta), or None."""
    if plan is None:
        return None
    meta = getattr(getattr(r, "expectation_config", None), "meta", None) or {}
    i = meta.get("index")
    return plan.checks[i] if isinstance(i, int) and 0 <= i < len(plan.checks) else None


def scope_note(plan: Plan) -> str:
    """What a reader of the Data Docs must know about what GE evaluated (plain text)."""
    rows, witness, stats = int(plan.statistics.get("rows", 0)), len(plan.table), len(plan.stats)
    return (f"What was checked: all {rows:,} rows of the synthetic table, read in chunks. GE evaluated the "
            f"record checks ({RECORDS_SUITE}) on a witness table of {witness:,} rows drawn from them that "
            "gives each check the whole table's verdict: each categorical column's distinct values, each "
            "numeric or datetime column's smallest and largest value, and one missing value if any. The "
            f"element, unexpected and missing counts shown are exact counts over all {rows:,} rows, not "
            f"over the witness rows. The marginal checks ({MARGINALS_SUITE}) ran on a statistics table of "
            f"{stats:,} rows computed from exact counts over all {rows:,} rows: the row count, each column's "
            "share of codes that do not re-encode, and one TVD per measured marginal; its rows are "
            "statistics, not records.")


_REMOTE_TAGS = (
    re.compile(r"<script\b[^>]*\bsrc\s*=\s*['\"]?(?:https?:)?//[^>]*>\s*</script\s*>", re.I),
    re.compile(r"<link\b[^>]*\bhref\s*=\s*['\"]?(?:https?:)?//[^>]*>", re.I),
    re.compile(r"<img\b[^>]*\bsrc\s*=\s*['\"]?(?:https?:)?//[^>]*>", re.I),
)
_REMOTE_CSS = re.compile(r"@import\s+url\(\s*['\"]?(?:https?:)?//[^)]*\)\s*;?|url\(\s*['\"]?(?:https?:)?//[^)]*\)", re.I)


# GE's footers are vendor content (a newsletter sign-up, links to tutorials): not part of a release.
_VENDOR_FOOTER = re.compile(r"<footer\b.*?</footer\s*>", re.I | re.S)
_LOCAL_REF = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"'#?:]+)["']""", re.I)


def _strip_remote(folder: Path) -> None:
    """Removes every remote script, stylesheet, image and CSS url from the copied site."""
    for path in folder.rglob("*"):
        suffix = path.suffix.lower()
        if suffix not in (".html", ".htm", ".css"):
            continue
        text = path.read_text(encoding="utf-8")
        if suffix != ".css":
            for pattern in _REMOTE_TAGS:
                text = pattern.sub("", text)
            text = _VENDOR_FOOTER.sub("", text)
            style = f"<style>{OFFLINE_CSS}</style>\n"
            text = re.sub(r"</head\s*>", lambda m: style + m.group(0), text, count=1, flags=re.I)
        path.write_text(_REMOTE_CSS.sub("none", text), encoding="utf-8")


def _prune_static(folder: Path) -> None:
    """Deletes the files of GE's ``static/`` folder that no page links to (walkthrough
    animations, logos and fonts: 4 MB that the stripped pages never show)."""
    used: set[Path] = set()
    for page in folder.rglob("*.htm*"):
        for ref in _LOCAL_REF.findall(page.read_text(encoding="utf-8")):
            used.add((page.parent / unquote(ref)).resolve())
    static = folder / "static"
    if not static.is_dir():
        return
    for path in sorted(static.rglob("*"), reverse=True):  # files before their folders
        if path.is_file() and path.resolve() not in used:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def _empty_folder(folder: str | Path) -> Path:
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise GateError(f"data docs folder {folder} exists and is not empty")
    return folder


def _render_docs(context, plan: Plan, folder: Path) -> Path:
    """Sanitises the stored results of a file context, renders its site into ``folder``."""
    store = context.validation_results_store
    for key in store.list_keys():
        stored = store.get(key)
        _sanitise_result(stored, plan.schema.names, plan)
        store.set(key, stored)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        context.build_data_docs()
    urls = [u.get("site_url") for u in context.get_docs_sites_urls() if u.get("site_url")]
    if not urls:
        raise GateError("GE built no Data Docs site")
    site = Path(unquote(urlparse(urls[0]).path)).parent
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(site, folder, dirs_exist_ok=True)
    _strip_remote(folder)
    _prune_static(folder)
    index = folder / "index.html"
    _add_offline_index(index)
    _add_scope_note(folder, scope_note(plan))
    return index


def _add_scope_note(folder: Path, note: str) -> None:
    """Puts the scope note at the top of the body of every page of the site."""
    import html

    block = f'<aside class="dpsynth-scope"><p>{html.escape(note)}</p></aside>\n'
    for page in folder.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        page.write_text(re.sub(r"<body[^>]*>", lambda m: m.group(0) + block, text, count=1, flags=re.I),
                        encoding="utf-8")


def _add_offline_index(index: Path) -> None:
    """Lists the site's pages at the top of the index.

    GE fills the index's tables with a remote JavaScript library, which is stripped:
    without this list the index would show no links offline.
    """
    import html

    root = index.parent
    items = []
    for kind, pattern in (("validation result", "validations/**/*.html"), ("expectation suite", "expectations/*.html")):
        for page in sorted(root.glob(pattern)):
            rel = page.relative_to(root).as_posix()
            suite = page.relative_to(root).parts[1]
            suite = suite[:-5] if suite.endswith(".html") else suite
            items.append(
                f'<li><a href="{html.escape(rel, quote=True)}">{html.escape(suite)}</a>: {kind}</li>'
            )
    block = '<nav class="dpsynth-pages"><h2>Pages</h2><ul>' + "".join(items) + "</ul></nav>\n"
    text = index.read_text(encoding="utf-8")
    # after the top bar when GE drew one, else at the top of the body
    anchor = r'<div class="container-fluid' if '<div class="container-fluid' in text else r"<body[^>]*>"
    text = re.sub(anchor, lambda m: (block + m.group(0)) if m.group(0).startswith("<div") else (m.group(0) + block),
                  text, count=1, flags=re.I)
    index.write_text(text, encoding="utf-8")
