"""Evaluation of a synthetic table against its target: utility metrics and the NIST score.

* :mod:`.metrics`: TVD of k-way marginals, correlations and the other utility metrics
  (METRICS.md), used by the gate's thresholds and the internal report;
* :mod:`.nist_score`: the NIST CRC (SDNist) k-marginal score.
"""
