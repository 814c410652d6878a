"""Where a release's domain came from, and what that means for its guarantee.

DESIGN.md decision 15: a domain read from the rows is not public. Three sources:

* ``public``: a hand-made schema (no ``drafted_from_data`` marker, no ``dp_draft``);
* ``dp_draft``: drafted with DP by ``dpsynth schema infer --epsilon`` (:mod:`dpsynth.privacy.schema_draft`),
  whose cost the dataset's registry holds; the release states that cost beside its own;
* ``data_derived``: columns still marked ``drafted_from_data`` (or an unreviewed
  ``draft: true``): released only by explicit opt-in, labelled NOT differentially private.

This module holds what a release states about its schema (manifest, report, ``verify``)
and the check that a DP draft's cost is in the dataset's registry. What is
and is not checkable is written up in docs/schema-draft.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..schema import Schema, SchemaError

__all__ = ["DRAFT_CHARGE_PREFIX", "data_derived_detail", "draft_charge_name", "require_draft_charged",
           "schema_privacy", "schema_source"]

#: A DP draft's charge in the registry is named this plus the draft's id.
DRAFT_CHARGE_PREFIX = "schema draft "


def draft_charge_name(draft_id: str) -> str:
    """The registry name of a DP draft's charge (listed by ``dpsynth budget show``)."""
    return f"{DRAFT_CHARGE_PREFIX}{draft_id}"


def schema_source(schema: Schema) -> str:
    """``data_derived``, ``dp_draft`` or ``public`` (markers win over a ``dp_draft`` block)."""
    if schema.draft or schema.data_derived_columns:
        return "data_derived"
    return "dp_draft" if schema.dp_draft is not None else "public"


def data_derived_detail(schema: Schema) -> str:
    """The statement's detail of a release on a data-derived schema (NOT DP whatever the method)."""
    cols = ", ".join(schema.data_derived_columns) or "every column (draft: true)"
    return (f"the schema's domain (bounds and categories of {cols}) was read from the private rows "
            "without a DP mechanism and released by explicit opt-in (--accept-data-derived-schema); "
            "the method's own noise does not cover it")


def schema_privacy(schema: Schema) -> dict[str, Any]:
    """The manifest's ``privacy.schema`` section: the domain's source and its own cost."""
    source = schema_source(schema)
    out: dict[str, Any] = {"source": source}
    if source == "data_derived":
        out["differentially_private"] = False
        out["data_derived_columns"] = {k: list(v) for k, v in schema.data_derived_columns.items()}
        out["statement"] = ("bounds and categories were read from the private rows without a DP mechanism: "
                            "they may reveal rare values and extremes of the input")
    elif source == "dp_draft":
        d = schema.dp_draft or {}
        out["differentially_private"] = True
        out.update({k: d[k] for k in ("epsilon", "delta", "rho", "delta_threshold", "dataset") if k in d})
        if "mechanisms" in d:
            out["mechanisms"] = d["mechanisms"]
        out["statement"] = ("the domain was drafted with DP and charged to the dataset's registry; the "
                            "dataset's lifetime spend includes it, this release's own epsilon does not")
    else:
        out["differentially_private"] = True
        out["statement"] = "the schema is taken to be public knowledge (not read from the rows)"
    return out


def require_draft_charged(schema: Schema, workspace: Path, dataset: str) -> None:
    """A DP draft's cost must be in this dataset's registry (else the manifest's lifetime
    spend would leave it out): refuses, before anything is charged, a ``dp_draft`` for
    another dataset or one the registry has no record of (e.g. a forged block)."""
    d: Mapping[str, Any] | None = schema.dp_draft
    if d is None or schema_source(schema) != "dp_draft":
        return
    from .registry import state

    if d["dataset"] != dataset:
        raise SchemaError(
            f"schema {schema.name!r} was drafted with DP for dataset {d['dataset']!r} but this release charges "
            f"dataset {dataset!r}: pass --dataset {d['dataset']} so that the draft's cost counts in its spend"
        )
    name = draft_charge_name(str(d.get("id", "")))
    if not any(r.name == name for r in state(workspace, dataset).releases):
        raise SchemaError(
            f"schema {schema.name!r} says it was drafted with DP (dp_draft), but dataset {dataset!r}'s registry "
            "in this workspace holds no record of that draft, so its cost would not count; nothing was "
            "measured. Draft it again with this --workspace, or remove the dp_draft block only if the "
            "schema's domain is public knowledge"
        )
