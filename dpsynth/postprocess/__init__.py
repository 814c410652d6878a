"""Post-processing of a synthetic sample (no privacy cost: it reads only DP outputs).

* :mod:`.correction`: marginal correction by importance reweighting and raking
  (``correct_marginals``);
* :mod:`.fitting`: proportional fitting (IPF), shared by the correction and ``sds``;
* :mod:`.histograms`: a noisy histogram projected onto a known total, and rows allocated to a
  distribution by expected counts (``marginals``, ``sds``).
"""
