"""Microaggregation library and the anonymous method: PVEC, nets, partitions, embedding.

Statistical tests use fixed seeds and a false-alarm rate of at most 1e-6, and show that
they reject a wrong temperature (x0.7 and x1.3).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpsynth.rows.encoding import encode, read_table
from dpsynth.methods import ParamError, get_method
from dpsynth.methods.microaggregation_common import BLOCKS, blocks_from_frame, embeddings
from dpsynth.microaggregation import (
    Embedding,
    alpha_net,
    anonymous_net,
    block_means,
    group_sums,
    divide_and_merge,
    nearest_point,
    project_simplex_rows,
    project_weights,
    pvec,
    pvec_acceptance_rate,
)
from dpsynth.privacy.budget import Budget, Ledger
from dpsynth.schema import load_schema

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 1e-6


def _rotation(p: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((p, p)))
    return q


def _draws(A: np.ndarray, m: int, seed: int) -> np.ndarray:
    return pvec(A, np.random.default_rng(seed), size=m)


# --- PVEC --------------------------------------------------------------------

A2 = _rotation(2, 1) @ np.diag([4.0, 0.5]) @ _rotation(2, 1).T


def _angle_cdf(A: np.ndarray):
    grid = np.linspace(0.0, 2 * np.pi, 200_001)
    v = np.stack([np.cos(grid), np.sin(grid)], axis=1)
    dens = np.exp(np.einsum("ij,jk,ik->i", v, A, v))
    cdf = np.concatenate([[0.0], np.cumsum((dens[1:] + dens[:-1]) / 2)])
    cdf /= cdf[-1]
    return lambda x: np.interp(x, grid, cdf)


def _ks_p2(samples: np.ndarray) -> float:
    theta = np.mod(np.arctan2(samples[:, 1], samples[:, 0]), 2 * np.pi)
    return stats.kstest(theta, _angle_cdf(A2)).pvalue


def test_pvec_matches_exact_density_in_2d():
    assert _ks_p2(_draws(A2, 20_000, 7)) > ALPHA


@pytest.mark.parametrize("factor", [0.7, 1.3])
def test_pvec_test_rejects_a_wrong_temperature_in_2d(factor):
    assert _ks_p2(_draws(factor * A2, 20_000, 8)) < ALPHA


A3 = _rotation(3, 2) @ np.diag([3.0, 1.0, 0.0]) @ _rotation(3, 2).T
NZ, NT = 6, 8


def _cell_probs(A: np.ndarray) -> np.ndarray:
    """Exact probabilities of the (z, theta) cells of the sphere (area element dz dtheta)."""
    z = (np.arange(600) + 0.5) / 600 * 2 - 1
    th = (np.arange(800) + 0.5) / 800 * 2 * np.pi
    Z, T = np.meshgrid(z, th, indexing="ij")
    r = np.sqrt(1 - Z**2)
    v = np.stack([r * np.cos(T), r * np.sin(T), Z], axis=-1)
    dens = np.exp(np.einsum("...j,jk,...k->...", v, A, v))
    cells = dens.reshape(NZ, 600 // NZ, NT, 800 // NT).sum(axis=(1, 3))
    return cells.ravel() / cells.sum()


def _chi2_p3(samples: np.ndarray) -> float:
    zi = np.clip(((samples[:, 2] + 1) / 2 * NZ).astype(int), 0, NZ - 1)
    th = np.mod(np.arctan2(samples[:, 1], samples[:, 0]), 2 * np.pi)
    ti = np.clip((th / (2 * np.pi) * NT).astype(int), 0, NT - 1)
    obs = np.bincount(zi * NT + ti, minlength=NZ * NT)
    exp = _cell_probs(A3) * samples.shape[0]
    return stats.chisquare(obs, exp).pvalue


def test_pvec_matches_exact_density_in_3d():
    assert _chi2_p3(_draws(A3, 20_000, 11)) > ALPHA


@pytest.mark.parametrize("factor", [0.7, 1.3])
def test_pvec_test_rejects_a_wrong_temperature_in_3d(factor):
    assert _chi2_p3(_draws(factor * A3, 20_000, 12)) < ALPHA


@pytest.mark.parametrize("A", [A3, _rotation(8, 3) @ np.diag(np.linspace(6, 0, 8)) @ _rotation(8, 3).T])
def test_pvec_acceptance_rate_matches_theory(A):
    rng = np.random.default_rng(5)
    m = 20_000
    _, tries = pvec(A, rng, size=m, return_tries=True)
    theory = pvec_acceptance_rate(A)
    observed = m / tries
    sd = theory * math.sqrt((1 - theory) / m) + theory * 0.01  # sampling + Monte Carlo of theory
    assert abs(observed - theory) < 5.3 * sd, (observed, theory)
    assert theory >= 0.9 * math.sqrt(2 / (math.e * A.shape[0]))  # KGM worst-case bound


# --- nets ----------------------------------------------------------------------


@pytest.mark.parametrize("t, alpha", [(1, 0.3), (2, 0.5), (2, 0.25), (3, 0.25), (4, 0.5)])
def test_net_covering_radius_is_at_most_alpha(t, alpha):
    rng = np.random.default_rng(t)
    g = rng.standard_normal((40_000, t))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    pts = np.concatenate([g * rng.random((40_000, 1)) ** (1 / t), g[:5000]])  # inside and on the sphere
    net = alpha_net(t, alpha)
    assert np.all(np.linalg.norm(net, axis=1) <= 1 + 1e-12)
    d = np.linalg.norm(pts - net[nearest_point(pts, net)], axis=1)
    assert d.max() <= alpha + 1e-12
    assert d.max() > 0.5 * alpha  # the net is not needlessly fine


def test_net_sizes_match_method_notes():
    assert [len(alpha_net(3, a)) for a in (0.5, 0.25, 0.1)] == [51, 169, 1917]
    assert len(alpha_net(4, 0.1)) == 25561


@pytest.mark.parametrize("k", [1, 4, 9, 15, 16, 25, 49, 100, 225, 256, 1000, 2500, 10_000, 100_000])
def test_anonymous_net_has_at_most_k_prime_points(k):
    # Theorem 4.1's net has at most k' = floor(sqrt(k)) points. The old rule took t from
    # ln k' / ln ln k' on its decreasing branch (t = 11 and 289 points at k' = 3) and alpha
    # from a volume estimate (331 points for k' = 316).
    kp = math.isqrt(k)
    t, alpha = anonymous_net(k)
    assert 1 <= t <= 3
    size = len(alpha_net(t, alpha))
    assert size <= kp
    if kp >= 3:
        assert alpha < 1.0  # finer than the one-point net {0}
        assert len(alpha_net(t, round(alpha - 0.002, 3))) > kp or alpha <= 0.002  # the smallest such alpha


def test_anonymous_net_at_three_cells_is_three_points():
    t, alpha = anonymous_net(9)
    assert (t, len(alpha_net(t, alpha))) == (1, 3)


def test_net_too_large_is_refused_before_rows_are_read():
    schema = load_schema(ROOT / "schemas" / "demo.yaml")
    for name, extra in (("microaggregation-dp", {}), ("microaggregation", {"anonymous_only": "true"})):
        method = get_method(name, {"t": "6", "alpha": "0.02", **extra})
        with pytest.raises(ParamError, match="smallest feasible alpha for t=6 is"):
            method.plan(schema, Budget(epsilon=1.0, delta=1e-6))
    # a given t with the preset's alpha (paper: 1/sqrt(t)) is checked too
    with pytest.raises(ParamError, match="largest feasible t for alpha=0.25 is"):
        get_method("microaggregation-dp", {"t": "16", "preset": "paper"}).plan(schema, Budget(epsilon=1.0, delta=1e-6))


# --- partition, means, projections -------------------------------------------


@pytest.mark.parametrize("n, k", [(1000, 50), (1003, 50), (997, 7)])
def test_divide_and_merge_blocks_hold_at_least_n_over_k_rows(n, k):
    rng = np.random.default_rng(n)
    cells = rng.integers(0, 9, n)
    blocks = divide_and_merge(cells, rng.random(n), k)
    sizes = np.bincount(blocks, minlength=k)
    assert sizes.size == k and sizes.min() >= n // k and sizes.sum() == n
    assert np.count_nonzero(sizes != n // k) <= 1  # only one block is larger
    X = rng.random((n, 3))
    means, _ = block_means(group_sums(X, blocks, k), blocks, k)
    for j in (0, k - 1):
        assert np.allclose(means[j], X[blocks == j].mean(axis=0))


def test_simplex_projection_is_the_nearest_point():
    rng = np.random.default_rng(3)
    Y = rng.normal(0.3, 1.0, (200, 5))
    P = project_simplex_rows(Y)
    assert np.allclose(P.sum(axis=1), 1) and P.min() >= 0
    others = rng.dirichlet(np.ones(5), (200, 400))
    assert np.all(np.linalg.norm(Y - P, axis=1)[:, None] <= np.linalg.norm(Y[:, None] - others, axis=2) + 1e-12)
    inside = rng.dirichlet(np.ones(5), 10)
    assert np.allclose(project_simplex_rows(inside), inside)


def test_weight_projection_is_an_l1_nearest_point():
    v = np.array([0.5, 0.4, 0.3, -0.1, 0.02])
    w = project_weights(v)
    assert np.isclose(w.sum(), 1) and w.min() >= 0
    # the smallest possible l1 distance: negative mass plus the excess of the positive mass
    assert np.isclose(np.abs(w - v).sum(), 0.1 + (v[v > 0].sum() - 1))


@pytest.fixture(scope="module")
def demo():
    schema = load_schema(ROOT / "schemas" / "demo.yaml")
    return encode(read_table(ROOT / "data" / "demo.csv", schema), schema)


@pytest.mark.parametrize("numeric", ["scaled", "bins"])
def test_embedding_lies_in_k_and_rounds_to_valid_records(demo, numeric):
    emb = Embedding(schema=demo.schema, numeric=numeric)
    X = emb.embed(demo)
    assert np.all(np.linalg.norm(X, axis=1) <= 1 + 1e-12)
    assert np.allclose(np.abs(X).sum(axis=1), emb.l1_radius)
    assert np.allclose(emb.project_k(X), X)  # records are in K
    assert np.allclose(emb.embed_sparse(demo).toarray(), X)
    groups = np.arange(demo.n) % 7
    assert np.allclose(emb.group_sums(demo, groups, 7), group_sums(X, groups, 7))
    rng = np.random.default_rng(0)
    rec = emb.round_records(emb.project_k(X[:500] + rng.normal(0, 0.3, (500, emb.dim))), np.arange(500), rng)
    assert np.all(rec.codes < np.asarray(demo.schema.cardinalities))
    back = emb.round_records(X, np.arange(200), rng)  # a vertex of K rounds to itself ...
    same = back.codes == demo.codes[:200]
    for j, b in enumerate(emb.blocks):  # ... except scaled numbers, which keep their bin
        assert same[:, j].all(), b.column.name


def _anonymous(demo, **params):
    method = get_method("microaggregation", {"anonymous_only": "true", **params})
    budget = Budget(epsilon=1.0, delta=1e-6)
    m = method.measure(demo, Ledger(budget, method.plan(demo.schema, budget)), np.random.default_rng(0))
    return method, m


def test_anonymous_method_needs_the_opt_in(demo):
    with pytest.raises(ParamError, match="NOT differentially private.*anonymous_only=true"):
        get_method("microaggregation").plan(demo.schema, Budget(epsilon=1.0, delta=1e-6))


@pytest.mark.parametrize("group_size, numeric", [(20, "hybrid"), (37, "hybrid"), (20, "scaled")])
def test_anonymous_blocks_average_at_least_group_size_rows_and_keep_the_mean(demo, group_size, numeric):
    _, m = _anonymous(demo, group_size=group_size, numeric=numeric)
    emb = embeddings(demo.schema, numeric)[1]
    sizes, means = blocks_from_frame(emb, m.tables[BLOCKS])
    assert sizes.min() >= group_size and sizes.sum() == demo.n and sizes.size == demo.n // group_size
    X = emb.embed(demo)
    # law of total expectation: the size-weighted block means are the data mean, exactly
    assert np.allclose(sizes @ means / demo.n, X.mean(axis=0), atol=1e-12)
    assert m.statement.kind == "anonymous" and not m.statement.differentially_private
    assert "NOT differentially private" in m.statement.headline()
    # the measured 1-way marginals of categorical columns are the data's, exactly
    col = demo.schema.names.index("education")
    hist = np.bincount(demo.codes[:, col], minlength=demo.schema.cardinalities[col])
    assert np.allclose(m.marginals[("education",)], hist)


def test_anonymous_synthesis_gives_valid_records_of_the_requested_size(demo):
    method, m = _anonymous(demo)
    syn = method.synthesize(m, demo.schema, 1234, np.random.default_rng(1))
    assert syn.n == 1234 and np.all(syn.codes < np.asarray(demo.schema.cardinalities))
