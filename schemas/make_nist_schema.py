"""Builds ``schemas/nist.yaml`` and ``schemas/nist-fine.yaml`` from the public NIST CRC data dictionary.

Usage: ``python schemas/make_nist_schema.py [--fine] [PATH/TO/data_dictionary.json]``
(default: ``../shared/data/nist/data_dictionary.json`` beside the repository).

The dictionary is the public domain of the Diverse Communities Data Excerpts: every
category and every numeric range below comes from it, never from the rows. Choices
made here (all public):

* the token ``N`` ("not applicable") is a missing token, so N is a code of its own;
* columns given as ``min``/``max`` are numeric with integer values; special codes next
  to a range (``NOC`` 0, ``POVPIP`` 501, ``WGTP`` 0) widen the bounds to include them;
* bins: ages in 5-year bands, incomes at round dollar amounts, the income-to-poverty
  ratio in steps of 50 (501 = above 5x on its own), density in log-spaced bins,
  weights in doubling bands;
* ``INDP`` has no value list in the dictionary; its codes follow the Census industry
  code ranges, whose sector boundaries (the same sectors as ``INDP_CAT``) are its bins.

``--fine`` (``nist-fine.yaml``): the same public domain at a finer grain, so that a
release decoded from it loses little against a metric that bins the raw values
(SDNist's 20 percentile bins). Still nothing from the rows:

* ages, own children and family size in single years / persons;
* income-to-poverty ratio in steps of 10, with 501 ("above 5x") alone;
* income: 0 alone, then round dollar steps (2,000 to 60,000; 5,000 to 100,000;
  10,000 to 200,000; wider above); weights: 0 alone (WGTP), then a geometric grid
  (ratio 1.15, whole numbers);
* density: SDNist's own public log bins (from the dictionary's maximum), so a decoded
  value lands in the bin it came from;
* ``INDP`` categorical: the Census industry codes as listed in the excerpts' published
  metadata files (``ma2019.json``, ``tx2019.json``, ``national2019.json``; 268 of the
  dictionary's 271 codes), with an ``other`` bucket for a code not listed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
DEFAULT_DICT = HERE.parents[1] / "shared" / "data" / "nist" / "data_dictionary.json"

EDGES = {
    "AGEP": [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 99],
    "NOC": [0, 1, 2, 3, 4, 5, 19],
    "NPF": [2, 3, 4, 5, 6, 7, 8, 20],
    "PINCP": [-9000, 0, 5000, 10000, 20000, 30000, 40000, 50000, 75000, 100000, 150000, 250000, 1341000],
    "POVPIP": [0, 50, 100, 150, 200, 250, 300, 350, 400, 450, 500, 501],
    "PWGTP": [1, 8, 16, 32, 64, 128, 256, 512, 9999],
    "WGTP": [0, 1, 8, 16, 32, 64, 128, 256, 512, 9999],
    # Census 2017+ industry code ranges, one bin per sector (AGR ... MIL), 9920 = unemployed.
    "INDP": [170, 370, 570, 770, 1070, 4070, 4670, 6070, 6470, 6870, 7270, 7860, 7970, 8560, 8770, 9370, 9670, 9920, 9921],
}


def _geometric_whole(lo: int, hi: int, ratio: float = 1.15) -> list[float]:
    """Whole-number edges from lo to hi, each about ``ratio`` times the last (steps of at least 1)."""
    edges = [lo]
    while edges[-1] < hi:
        edges.append(min(hi, max(edges[-1] + 1, round(edges[-1] * ratio))))
    return edges


def _sdnist_density_edges(lo: float, hi: float) -> list[float]:
    """SDNist's DENSITY bins (right-closed on whole numbers: (e_k-1, e_k]) as left-closed edges
    floor(e_k) + 1 on the raw values, clipped to the dictionary's [lo, hi]."""
    logs = np.logspace(1.0, np.log10(hi + 500.0), 21)
    inner = [150.0] + [float(x) for x in logs[8:]]
    cut = sorted({float(np.floor(e) + 1.0) for e in inner if lo < np.floor(e) + 1.0 < hi})
    return [lo] + cut + [hi]


FINE_EDGES = {
    "AGEP": list(range(0, 100)),
    "NOC": list(range(0, 20)),
    "NPF": list(range(2, 21)),
    "POVPIP": list(range(0, 500, 10)) + [500.5, 501],
    "PINCP": [-9000, 0, 1, 2000] + list(range(4000, 60001, 2000)) + list(range(65000, 100001, 5000))
    + list(range(110000, 200001, 10000)) + [250000, 300000, 400000, 500000, 750000, 1341000],
    "PWGTP": _geometric_whole(1, 9999),
    "WGTP": [0.0] + _geometric_whole(1, 9999),
}
METADATA = ("ma2019.json", "tx2019.json", "national2019.json")


def _industry_codes(folder: Path) -> list[str]:
    codes: set[str] = set()
    for name in METADATA:
        meta = json.loads((folder / name).read_text())["schema"]["INDP"]
        codes |= {str(v) for v in meta["values"] if str(v) != "N"}
    return sorted(codes, key=int)


def _density_edges(lo: float, hi: float, bins: int = 10) -> list[float]:
    inner = np.geomspace(lo, hi, bins + 1)[1:-1]
    return [lo] + [float(f"{x:.4g}") for x in inner] + [hi]


def build(dictionary: dict, fine: bool = False, folder: Path | None = None) -> dict:
    columns = []
    table = FINE_EDGES if fine else EDGES
    for name, entry in dictionary.items():
        values = entry.get("values")
        col: dict = {"name": name}
        desc = entry.get("description")
        if name == "INDP" and fine:
            col.update(type="categorical", values=_industry_codes(folder), missing=["N"], other=True)
        elif name == "INDP":
            col.update(type="numeric", edges=EDGES[name], integer=True, missing=["N"])
        elif isinstance(values, dict) and "min" in values:
            extra = [float(k) for k in values if k not in ("min", "max", "N")]
            lo = min([float(values["min"])] + extra)
            hi = max([float(values["max"])] + extra)
            if name == "DENSITY":
                col.update(type="numeric", edges=_sdnist_density_edges(lo, hi) if fine else _density_edges(lo, hi))
            else:
                edges = list(table[name])
                if edges[0] != lo or edges[-1] != hi:
                    raise SystemExit(f"{name}: edges {edges[0]}..{edges[-1]} do not span {lo}..{hi}")
                col.update(type="numeric", edges=edges, integer=True)
            if "N" in values:
                col["missing"] = ["N"]
        else:
            codes = [k for k in values if k != "N"]
            col.update(type="categorical", values=codes)
            if "N" in values:
                col["missing"] = ["N"]
        if desc:
            col["description"] = desc
        columns.append(col)
    return {
        "name": "nist-crc-2019-fine" if fine else "nist-crc-2019",
        "description": "NIST CRC Diverse Communities Data Excerpts (ACS 2019), from data_dictionary.json"
        + (" (fine bins)" if fine else ""),
        "columns": columns,
    }


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--fine"]
    fine = "--fine" in sys.argv[1:]
    src = Path(args[0]) if args else DEFAULT_DICT
    schema = build(json.loads(src.read_text()), fine=fine, folder=src.parent)
    out = HERE / ("nist-fine.yaml" if fine else "nist.yaml")
    header = "# Generated by schemas/make_nist_schema.py from the public NIST CRC data dictionary.\n"
    out.write_text(header + yaml.safe_dump(schema, sort_keys=False, width=120))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
