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
:mod:`.docs` (sanitised, offline Data Docs), :mod:`.session` (the GE context), :mod:`.worker`
(the GE process beside the release) and :mod:`.validation` (record validity against the schema).
"""

from .. import lazy_exports

# public name -> module of this package that defines it (imported on first use, so that
# importing :mod:`.worker` or :mod:`.validation` does not load the GE run and its imports)
_EXPORTS = {
    "THRESHOLD_KEYS": "thresholds",
    "DEFAULT_SD_FACTOR": "thresholds",
    "DEFAULT_MIN_FACTOR": "thresholds",
    "MARGINALS_SUITE": "checks",
    "RECORDS_SUITE": "checks",
    "GateError": "thresholds",
    "RowEstimate": "thresholds",
    "run_gate": "ge",
    "run_gate_scan": "ge",
    "CodeCounts": "scan",
    "file_chunks": "scan",
    "scan_table": "scan",
    "write_data_docs": "ge",
    "predicted_tvd": "thresholds",
    "predicted_tvd_sd": "thresholds",
    "dp_row_estimate": "thresholds",
}
__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
