"""The tables of `benchmarks/default_sweep.py`: what a careless or ordinary user brings.

Each builder writes one file (or two, for the cases where the schema is drafted from one
file and the release run on another) under a scratch folder and returns a `Case`. Every
builder plants a few rare marker values (`canaries`) in its text cells, so that the sweep can
check that no error or warning line quotes a raw cell. Seeds are fixed: the files are the same
on every run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

CANARY = "Zq-canary"


@dataclass(frozen=True)
class Case:
    """One table of the sweep: the file the schema is drafted from and the file released."""

    name: str
    draft_data: Path
    release_data: Path
    rows: int
    columns: int
    note: str
    canaries: tuple[str, ...] = field(default=())


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


def _canaries(k: int, tag: str) -> list[str]:
    return [f"{CANARY}-{tag}-{i}" for i in range(k)]


def _plant(col: list[str] | np.ndarray, canaries: list[str], rng: np.random.Generator) -> list[str]:
    out = [str(v) for v in col]
    for c, i in zip(canaries, rng.choice(len(out), size=len(canaries), replace=False)):
        out[int(i)] = c
    return out


def _csv_case(root: Path, name: str, df: pd.DataFrame, note: str, canaries: list[str], **to_csv) -> Case:
    """Writes ``df`` to ``root/name.csv`` (no index unless asked) and returns its case."""
    p = root / f"{name}.csv"
    index = to_csv.pop("index", False)
    df.to_csv(p, index=index, **to_csv)
    return Case(name, p, p, len(df), df.shape[1] + int(index), note, tuple(canaries))


def _mixed_frame(n: int, rng: np.random.Generator, canaries: list[str]) -> pd.DataFrame:
    """int, float, string, bool, date and datetime columns, written as a CSV writes them."""
    cities = np.array(["Lyon", "Paris", "Nantes", "Lille", "Brest", "Nice", "Metz", "Pau"])
    start = np.datetime64("2015-01-01")
    days = rng.integers(0, 3000, n)
    secs = rng.integers(0, 86400 * 365 * 5, n)
    return pd.DataFrame({
        "age": rng.integers(16, 95, n),
        "income": np.round(rng.lognormal(10, 1, n), 2),
        "city": _plant(cities[rng.integers(0, len(cities), n)], canaries, rng),
        "member": rng.random(n) < 0.3,
        "joined": (start + days.astype("timedelta64[D]")).astype(str),
        "last_seen": pd.to_datetime("2019-01-01") + pd.to_timedelta(secs, unit="s"),
        "score": np.round(rng.normal(0, 1, n), 3),
    })


def mixed(root: Path) -> Case:
    """20k rows of int/float/string/bool/date/datetime, as pandas writes them."""
    rng, can = _rng("mixed"), _canaries(3, "mixed")
    df = _mixed_frame(20_000, rng, can)
    return _csv_case(root, "mixed", df, "int/float/str/bool/date/datetime", can)


def missing(root: Path) -> Case:
    """10k rows where every type has missing cells: '', NA, NaN, spaces, null, None, N/A."""
    rng, can = _rng("missing"), _canaries(3, "missing")
    df = _mixed_frame(10_000, rng, can).astype(object)
    tokens = ["", "NA", "NaN", "   ", "null", "None", "N/A", "nan", " "]
    for c in df.columns:
        hit = rng.random(len(df)) < 0.08
        df.loc[hit, c] = rng.choice(tokens, hit.sum())
    return _csv_case(root, "missing", df, "missing tokens in every type", can)


def constant(root: Path) -> Case:
    """5k rows with a constant text column, a constant number and an all-empty column."""
    rng, can = _rng("constant"), _canaries(2, "const")
    n = 5_000
    df = pd.DataFrame({
        "country": "FR", "version": 7, "comment": "",
        "grp": _plant(rng.choice(["a", "b", "c"], n), can, rng),
        "value": rng.integers(0, 100, n), "flag": rng.choice(["Y", "N"], n),
    })
    return _csv_case(root, "constant", df, "constant text/number, all-missing column", can)


def ids_text(root: Path) -> Case:
    """20k rows with an ID-like string column, emails and free text beside ordinary ones."""
    rng, can = _rng("ids"), _canaries(3, "ids")
    n = 20_000
    words = np.array("the a patient reported mild severe pain since two days no fever cough".split())
    text = [" ".join(rng.choice(words, rng.integers(3, 12))) for _ in range(n)]
    df = pd.DataFrame({
        "customer_id": [f"C{v:08d}" for v in rng.permutation(10**7)[:n]],
        "email": [f"user{v}@example.org" for v in rng.integers(0, 10**6, n)],
        "notes": _plant(text, can, rng),
        "segment": rng.choice(["retail", "pro", "gov"], n, p=[0.7, 0.25, 0.05]),
        "spend": rng.gamma(2, 50, n).round(2),
    })
    return _csv_case(root, "ids_text", df, "ID-like, email, free text", can)


def unicode_names(root: Path) -> Case:
    """5k rows; unicode and spaces in names and values; names like reserved words."""
    rng, can = _rng("unicode"), _canaries(2, "uni")
    n = 5_000
    towns = np.array(["Zürich", "São Paulo", "東京", " Köln ", "Łódź", "Montréal", "🙂 town"])
    df = pd.DataFrame({
        "Prénom de la ville": _plant(towns[rng.integers(0, len(towns), n)], can, rng),
        "année": rng.integers(1950, 2020, n),
        " leading space": rng.choice(["x", "y"], n),
        "名前": rng.choice(["太郎", "花子", "次郎"], n),
        "class": rng.choice(["A", "B"], n), "select": rng.integers(0, 5, n),
        "None": rng.choice(["yes", "no"], n), "index": np.arange(n) % 7,
        "a.b": rng.random(n).round(3), "1st col": rng.choice(["p", "q"], n),
    })
    return _csv_case(root, "unicode_names", df, "unicode/spaces/reserved-word names", can)


def dup_columns(root: Path) -> Case:
    """3k rows whose header repeats a column name (an export from a spreadsheet)."""
    rng, can = _rng("dup"), _canaries(2, "dup")
    n = 3_000
    a = _plant(rng.choice(["u", "v"], n), can, rng)
    lines = ["id,amount,status,amount"] + [
        f"{a[i]},{rng.integers(0, 100)},{rng.choice(['ok', 'ko'])},{rng.integers(0, 9)}" for i in range(n)]
    p = root / "dup_columns.csv"
    p.write_text("\n".join(lines) + "\n")
    return Case("dup_columns", p, p, n, 4, "duplicated column name", tuple(can))


def odd_numbers(root: Path) -> Case:
    """10k rows: thousands separators, currency, percent, inf, huge and negative floats."""
    rng, can = _rng("odd"), _canaries(2, "odd")
    n = 10_000
    amt = rng.integers(0, 5_000_000, n)
    huge = rng.normal(0, 1, n) * 10.0 ** rng.integers(-5, 300, n)
    huge_s = [repr(float(v)) for v in huge]
    for i in rng.choice(n, 30, replace=False):
        huge_s[int(i)] = rng.choice(["inf", "-inf", "1e308", "-1.7976931348623157e308"])
    df = pd.DataFrame({
        "amount": [f"{v:,}" for v in amt],
        "price": [f"${v / 100:,.2f}" for v in amt],
        "rate": [f"{v:.1f}%" for v in rng.uniform(0, 100, n)],
        "measure": huge_s,
        "delta": rng.normal(-500, 300, n).round(1),
        "label": _plant(rng.choice(["lo", "hi"], n), can, rng),
    })
    return _csv_case(root, "odd_numbers", df, "1,234 / $ / % / inf / 1e300 / negatives", can)


def one_row(root: Path) -> Case:
    """A single data row."""
    p = root / "one_row.csv"
    p.write_text(f"name,age,city\n{CANARY}-one-0,41,Paris\n")
    return Case("one_row", p, p, 1, 3, "one row", (f"{CANARY}-one-0",))


def two_cols(root: Path) -> Case:
    """50k rows of two columns."""
    rng, can = _rng("two"), _canaries(2, "two")
    n = 50_000
    df = pd.DataFrame({"kind": _plant(rng.choice(["a", "b", "c", "d"], n), can, rng),
                       "count": rng.poisson(3, n)})
    return _csv_case(root, "two_cols", df, "two columns", can)


def wide(root: Path) -> Case:
    """10k rows of 64 columns: numbers, small categories, flags."""
    rng, can = _rng("wide"), _canaries(2, "wide")
    n, cols = 10_000, {}
    base = rng.integers(0, 4, n)
    for j in range(64):
        if j % 3 == 0:
            cols[f"q{j:02d}"] = (base * 10 + rng.integers(0, 30, n)).astype(int)
        elif j % 3 == 1:
            cols[f"c{j:02d}"] = np.where(rng.random(n) < 0.7, base, rng.integers(0, 5, n)).astype(str)
        else:
            cols[f"f{j:02d}"] = rng.choice(["Y", "N"], n)
    cols["c01"] = _plant(cols["c01"], can, rng)
    df = pd.DataFrame(cols)
    return _csv_case(root, "wide64", df, "64 columns", can)


def bom_quoted(root: Path) -> Case:
    """5k rows: UTF-8 BOM, CRLF line ends, quoted cells with commas and newlines (Excel)."""
    rng, can = _rng("bom"), _canaries(2, "bom")
    n = 5_000
    notes = _plant(rng.choice(["fine", "call back,\nlater", 'said "no"', "ok, done"], n), can, rng)
    df = pd.DataFrame({"ref": rng.choice(["R1", "R2", "R3"], n), "note": notes,
                       "amount": rng.integers(0, 1000, n)})
    return _csv_case(root, "bom_quoted", df, "BOM, CRLF, quoted commas/newlines", can, encoding="utf-8-sig",
                     lineterminator="\r\n")


def semicolon(root: Path) -> Case:
    """5k rows written by a European spreadsheet: ';' separator, decimal commas."""
    rng, can = _rng("semi"), _canaries(2, "semi")
    n = 5_000
    df = pd.DataFrame({"region": _plant(rng.choice(["Nord", "Sud"], n), can, rng),
                       "taux": [f"{v:.2f}".replace(".", ",") for v in rng.uniform(0, 10, n)],
                       "nb": rng.integers(0, 50, n)})
    return _csv_case(root, "semicolon", df, "';' separator, decimal comma", can, sep=";")


def latin1(root: Path) -> Case:
    """4k rows saved as Latin-1 (a spreadsheet on Windows), not UTF-8."""
    rng, can = _rng("latin1"), _canaries(2, "lat")
    n = 4_000
    df = pd.DataFrame({"ville": _plant(rng.choice(["Orléans", "Besançon", "Nîmes"], n), can, rng),
                       "n": rng.integers(0, 9, n)})
    return _csv_case(root, "latin1", df, "Latin-1 encoded", can, encoding="latin-1")


def parquet_typed(root: Path) -> Case:
    """20k rows of Parquet: categorical (dictionary), nullable int, NaN float, bool, timestamp, date."""
    rng, can = _rng("pq"), _canaries(2, "pq")
    n = 20_000
    ints = pd.array(rng.integers(0, 120, n), dtype="Int64")
    ints[rng.random(n) < 0.05] = pd.NA
    floats = rng.normal(50, 10, n)
    floats[rng.random(n) < 0.05] = np.nan
    df = pd.DataFrame({
        "cat": pd.Categorical(_plant(rng.choice(["alpha", "beta", "gamma"], n), can, rng)),
        "age": ints, "weight": floats, "active": rng.random(n) < 0.5,
        "ts": pd.to_datetime("2020-01-01") + pd.to_timedelta(rng.integers(0, 10**8, n), unit="s"),
        "day": (np.datetime64("2021-01-01") + rng.integers(0, 700, n).astype("timedelta64[D]")),
    })
    df["day"] = df["day"].dt.date
    p = root / "parquet_typed.parquet"
    df.to_parquet(p, index=False)
    return Case("parquet_typed", p, p, n, df.shape[1], "categorical, Int64+NA, NaN, bool, ts, date", tuple(can))


def parquet_nested(root: Path) -> Case:
    """5k rows of Parquet with a list column and a struct column beside flat ones."""
    rng, can = _rng("nest"), _canaries(2, "nest")
    n = 5_000
    tags = [list(rng.choice(["x", "y", "z"], rng.integers(0, 3))) for _ in range(n)]
    addr = [{"zip": str(rng.integers(10000, 99999)), "city": "Paris"} for _ in range(n)]
    t = pa.table({"kind": _plant(rng.choice(["a", "b"], n), can, rng), "n": rng.integers(0, 10, n),
                  "tags": tags, "addr": addr})
    p = root / "parquet_nested.parquet"
    pq.write_table(t, p)
    return Case("parquet_nested", p, p, n, 4, "list and struct columns", tuple(can))


def pandas_index(root: Path) -> Case:
    """4k rows written with pandas' default index: a first column with an empty name."""
    rng, can = _rng("pidx"), _canaries(2, "pidx")
    n = 4_000
    df = pd.DataFrame({"grade": _plant(rng.choice(["A", "B", "C"], n), can, rng), "n": rng.integers(0, 30, n)})
    return _csv_case(root, "pandas_index", df, "pandas index written: a column named ''", can, index=True)


def tsv(root: Path) -> Case:
    """3k rows tab-separated, saved with a .csv name."""
    rng, can = _rng("tsv"), _canaries(2, "tsv")
    n = 3_000
    df = pd.DataFrame({"kind": _plant(rng.choice(["p", "q"], n), can, rng), "n": rng.integers(0, 30, n)})
    return _csv_case(root, "tsv", df, "tab-separated with a .csv name", can, sep="\t")


def _drift_pair(root: Path, tag: str, change: Callable[[pd.DataFrame], pd.DataFrame], note: str) -> Case:
    rng, can = _rng(tag), _canaries(2, tag)
    a = _mixed_frame(10_000, rng, can)
    b = change(_mixed_frame(10_000, np.random.default_rng(99), can))
    pa_, pb = root / f"{tag}_draft.csv", root / f"{tag}_release.csv"
    a.to_csv(pa_, index=False)
    b.to_csv(pb, index=False)
    return Case(tag, pa_, pb, len(b), b.shape[1], note, tuple(can))


def drift_values(root: Path) -> Case:
    """Schema drafted on one month, release on the next: new categories, wider numbers."""
    def change(b: pd.DataFrame) -> pd.DataFrame:
        b = b.copy()
        b.loc[b.index[:800], "city"] = "Toulouse"
        b.loc[b.index[800:1000], "age"] = 130
        b.loc[b.index[1000:1200], "income"] = -5.0
        b.loc[b.index[1200:1300], "joined"] = "2031-06-01"
        return b
    return _drift_pair(root, "drift_values", change, "release file: new category, out-of-range values")


def drift_extra(root: Path) -> Case:
    """Release file with one column more than the file the schema was drafted from."""
    return _drift_pair(root, "drift_extra", lambda b: b.assign(region=np.where(b.age > 50, "N", "S")),
                       "release file: an extra column")


def drift_missing(root: Path) -> Case:
    """Release file lacking one of the drafted columns."""
    return _drift_pair(root, "drift_missing", lambda b: b.drop(columns=["score"]), "release file: a column less")


def drift_order(root: Path) -> Case:
    """Release file with the same columns in another order."""
    return _drift_pair(root, "drift_order", lambda b: b[list(reversed(b.columns))], "release file: columns reordered")


def drift_format(root: Path) -> Case:
    """Schema drafted from a Parquet file, release run on the CSV pandas wrote of the same rows."""
    rng, can = _rng("fmt"), _canaries(2, "fmt")
    df = _mixed_frame(8_000, rng, can)
    pa_, pb = root / "drift_format_draft.parquet", root / "drift_format_release.csv"
    df.to_parquet(pa_, index=False)
    df.to_csv(pb, index=False)
    return Case("drift_format", pa_, pb, len(df), df.shape[1], "drafted on Parquet, released on its CSV", tuple(can))


def dates_eu(root: Path) -> Case:
    """6k rows whose dates are written day/month/year, as a European spreadsheet shows them."""
    rng, can = _rng("eu"), _canaries(2, "eu")
    n = 6_000
    days = np.datetime64("2018-01-01") + rng.integers(0, 1500, n).astype("timedelta64[D]")
    df = pd.DataFrame({"visit": pd.to_datetime(days).strftime("%d/%m/%Y"),
                       "ward": _plant(rng.choice(["A", "B", "C"], n), can, rng), "stay": rng.integers(1, 20, n)})
    return _csv_case(root, "dates_eu", df, "dates as dd/mm/yyyy", can)


def coded_missing(root: Path) -> Case:
    """5k survey rows whose numbers hold word codes: 'unknown', 'refused', '-'."""
    rng, can = _rng("coded"), _canaries(2, "coded")
    n = 5_000
    age = rng.integers(18, 90, n).astype(str).astype(object)
    age[rng.random(n) < 0.05] = "unknown"
    age[rng.random(n) < 0.03] = "refused"
    inc = np.round(rng.lognormal(10, 1, n), 2).astype(str).astype(object)
    inc[rng.random(n) < 0.05] = "-"
    df = pd.DataFrame({"age": age, "income": inc, "region": _plant(rng.choice(["N", "S", "E", "W"], n), can, rng)})
    return _csv_case(root, "coded_missing", df, "numbers with word codes (unknown/refused/-)", can)


def big(root: Path) -> Case:
    """200k rows of the mixed table with 5 more columns."""
    rng, can = _rng("big"), _canaries(3, "big")
    n = 200_000
    df = _mixed_frame(n, rng, can)
    for j in range(5):
        df[f"k{j}"] = rng.integers(0, 3 + 2 * j, n)
    return _csv_case(root, "big200k", df, "200k rows x 12", can)


BUILDERS: tuple[Callable[[Path], Case], ...] = (
    mixed, missing, constant, ids_text, unicode_names, dup_columns, odd_numbers, one_row, two_cols,
    wide, bom_quoted, semicolon, tsv, latin1, pandas_index, parquet_typed, parquet_nested, drift_values, drift_extra,
    drift_missing, drift_order, drift_format, dates_eu, coded_missing, big,
)


def build_all(root: Path, only: set[str] | None = None) -> list[Case]:
    """Writes every table (or those named in ``only``) under ``root`` and returns their cases."""
    root.mkdir(parents=True, exist_ok=True)
    cases = []
    for b in BUILDERS:
        if only and b.__name__ not in only:
            continue
        cases.append(b(root))
    (root / "cases.json").write_text(json.dumps([c.name for c in cases]))
    return cases
