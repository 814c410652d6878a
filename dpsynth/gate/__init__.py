"""The release gate: Great Expectations (1.x) suites on the synthetic table.

A release is published only when :func:`run_gate` says ``success``. The gate looks at
the synthetic table, its codes and the DP measurement, never at raw rows (DESIGN.md,
decision 8). Two suites run on an ephemeral GE context:

``synthetic_records`` (on the decoded synthetic table)
    * ``columns_match_schema``: the schema's columns, in schema order, nothing else;
    * per column: ``exists``; ``type`` (categorical: a string dtype; numeric with
      ``integer: true``: an integer dtype, so every value is whole; other numeric: a
      float or integer dtype; datetime: a ``datetime64`` dtype); ``in_domain``
      (categories plus the ``other`` label, or the numeric or datetime bounds);
      ``not_null`` for columns whose schema declares no missing token (missing values
      are allowed exactly where ``Column.nullable``).

``dp_marginal_accuracy`` (on a small derived table of statistics)
    * ``row_count``: exactly ``expected_rows`` when the release asked for a number of
      rows, otherwise within a band around the measurement's DP row estimate;
    * ``codes_match_table``: the table re-encoded with the schema gives back the codes
      the marginals were computed from (catches a decoder that shifts labels);
    * per marginal size k: ``max_tvd_k<k>`` (every measured k-way marginal's TVD is
      within its threshold, computed from that marginal's own stated ``stddev``) and
      ``mean_tvd_k<k>`` (the mean TVD over the k-way marginals is within its threshold).

The synthetic table is read once, chunk by chunk (:mod:`.scan`): the record checks
run on a few witness values per column that give the whole table's verdicts (distinct
labels; smallest and largest values; a missing value if any), the marginal checks on
exact counts summed over chunks. Memory is one chunk whatever the row count.

The package: :mod:`.scan` (the chunked pass), :mod:`.thresholds` (threshold maths, row estimate), :mod:`.checks` (the
plan of every expectation, computed once), :mod:`.ge` (the GE run and the summary),
:mod:`.docs` (sanitised, offline Data Docs).
"""

from .checks import MARGINALS_SUITE, RECORDS_SUITE
from .ge import run_gate, run_gate_scan, write_data_docs
from .scan import CodeCounts, file_chunks, scan
from .thresholds import (
    DEFAULT_MIN_FACTOR,
    DEFAULT_SD_FACTOR,
    THRESHOLD_KEYS,
    GateError,
    RowEstimate,
    dp_row_estimate,
    predicted_tvd,
    predicted_tvd_sd,
)

__all__ = [
    "THRESHOLD_KEYS",
    "DEFAULT_SD_FACTOR",
    "DEFAULT_MIN_FACTOR",
    "MARGINALS_SUITE",
    "RECORDS_SUITE",
    "GateError",
    "RowEstimate",
    "run_gate",
    "run_gate_scan",
    "CodeCounts",
    "file_chunks",
    "scan",
    "write_data_docs",
    "predicted_tvd",
    "predicted_tvd_sd",
    "dp_row_estimate",
]
