"""sds's latent-class pool for expanded releases (issue 25, thirteenth round): the EM fit,
the short pair fit, and the choice between the sampler's pool and the latent one."""

from __future__ import annotations

from itertools import combinations

import numpy as np

from dpsynth.methods.sds import latent
from dpsynth.methods.sds.refit import TableCheck, effective_size

CARDS = (4, 5, 6, 4, 5, 6)


def _latent_table(n: int, rng: np.random.Generator) -> np.ndarray:
    """Columns independent given one of 4 classes (each class favours one value by 70%)."""
    z = rng.integers(0, 4, n)
    return np.stack([np.where(rng.random(n) < 0.7, z % k, rng.integers(0, k, n)) for k in CARDS], axis=1)


def _chain_table(n: int, rng: np.random.Generator, card: int = 10, p: int = 6) -> np.ndarray:
    """Each column the previous one plus -1, 0 or +1 (mod ``card``): local dependence that a
    mixture of 8 classes with independent columns cannot hold."""
    out = np.empty((n, p), dtype=np.int64)
    out[:, 0] = rng.integers(0, card, n)
    for j in range(1, p):
        out[:, j] = (out[:, j - 1] + rng.integers(-1, 2, n)) % card
    return out


def _pair_checks(truth: np.ndarray, cards, rows: int) -> list[TableCheck]:
    """The truth's exact 2-way tables scaled to ``rows`` records, as measured tables."""
    out = []
    for a, b in combinations(range(truth.shape[1]), 2):
        counts = np.bincount(truth[:, a] * cards[b] + truth[:, b], minlength=cards[a] * cards[b]).astype(float)
        counts *= rows / truth.shape[0]
        out.append(TableCheck(cols=(a, b), shape=(cards[a], cards[b]), cells=np.zeros(0, dtype=np.int64),
                              noisy=counts, suppressed=np.zeros(counts.size, dtype=bool), threshold=0.0, stddev=1.0))
    return out


def _ones(truth: np.ndarray, cards, rows: int) -> dict[int, np.ndarray]:
    return {j: np.bincount(truth[:, j], minlength=c) * (rows / truth.shape[0]) for j, c in enumerate(cards)}


def _pair_tvd(a: np.ndarray, b: np.ndarray, cards) -> float:
    """The largest 2-way TVD between two tables of records."""
    worst = 0.0
    for x, y in combinations(range(a.shape[1]), 2):
        p = np.bincount(a[:, x] * cards[y] + a[:, y], minlength=cards[x] * cards[y]) / a.shape[0]
        q = np.bincount(b[:, x] * cards[y] + b[:, y], minlength=cards[x] * cards[y]) / b.shape[0]
        worst = max(worst, 0.5 * float(np.abs(p - q).sum()))
    return worst


def test_em_recovers_a_planted_latent_class_table():
    """Fitted to records of a 4-class table, the mixture's draws hold its pairs (2-way TVD
    below 0.02 on 60,000 records); one class (independent columns) misses them by far more."""
    rng = np.random.default_rng(0)
    truth = _latent_table(60_000, rng)
    model = latent.fit_latent(truth, np.ones(truth.shape[0]), CARDS, np.random.default_rng(1))
    assert model.shares.size == latent.CLASSES and np.isclose(model.shares.sum(), 1.0)
    assert all(np.allclose(t.sum(axis=1), 1.0) for t in model.probs)
    drawn = model.sample(60_000, np.random.default_rng(2))
    assert drawn.shape == truth.shape and all(drawn[:, j].max() < c for j, c in enumerate(CARDS))
    assert _pair_tvd(drawn, truth, CARDS) < 0.02
    alone = latent.fit_latent(truth, np.ones(truth.shape[0]), CARDS, np.random.default_rng(1), classes=1)
    assert _pair_tvd(alone.sample(60_000, np.random.default_rng(2)), truth, CARDS) > 0.1


def test_em_follows_the_weights():
    """The mixture is fitted to the weighted records: weighting half the records to 0 gives
    the other half's distribution."""
    rng = np.random.default_rng(3)
    a = _latent_table(20_000, rng)
    b = np.zeros_like(a)  # every column at code 0
    both = np.concatenate([a, b])
    w = np.concatenate([np.ones(a.shape[0]), np.zeros(b.shape[0])])
    model = latent.fit_latent(both, w, CARDS, np.random.default_rng(4))
    drawn = model.sample(20_000, np.random.default_rng(5))
    assert _pair_tvd(drawn, a, CARDS) < 0.03
    assert _pair_tvd(drawn, b, CARDS) > 0.5


def test_pair_weights_fit_the_pairs():
    """20 rounds of the short fit bring an independent pool's pairs close to a latent truth's."""
    rng = np.random.default_rng(6)
    truth = _latent_table(50_000, rng)
    pool = np.stack([rng.permutation(truth[:, j]) for j in range(truth.shape[1])], axis=1)
    checks = _pair_checks(truth, CARDS, pool.shape[0])
    w = latent.pair_weights(pool, checks, _ones(truth, CARDS, pool.shape[0]))
    idx = np.random.default_rng(7).choice(pool.shape[0], size=200_000, p=w / w.sum())
    assert _pair_tvd(pool, truth, CARDS) > 0.1
    assert _pair_tvd(pool[idx], truth, CARDS) < 0.03


def test_the_latent_pool_replaces_a_pool_whose_pair_weights_are_extreme():
    """On a latent truth, a pool drawn column by column needs extreme weights to fit the
    pairs; the latent pool is chosen and fits them with flatter weights (ess up)."""
    rng = np.random.default_rng(8)
    truth = _latent_table(50_000, rng)
    pool = np.asfortranarray(np.stack([rng.permutation(truth[:, j]) for j in range(truth.shape[1])], axis=1))
    checks = _pair_checks(truth, CARDS, pool.shape[0])
    ones = _ones(truth, CARDS, pool.shape[0])
    out, info = latent.latent_pool(pool, checks, ones, CARDS, np.random.default_rng(9))
    assert out is not pool and out.shape == pool.shape and out.dtype == pool.dtype
    assert info["ess_latent"] > 2 * info["ess_sampler"]
    assert abs(effective_size(latent.pair_weights(out, checks, ones)) - info["ess_latent"]) < 1


def test_a_pool_already_close_to_the_pairs_is_kept():
    """On a chain table the mixture cannot hold, a pool sampled from the truth itself is kept
    (the same object: the release's bytes do not change)."""
    rng = np.random.default_rng(10)
    cards = (10,) * 6
    truth = _chain_table(50_000, rng)
    pool = np.asfortranarray(_chain_table(50_000, np.random.default_rng(11)))
    checks = _pair_checks(truth, cards, pool.shape[0])
    out, info = latent.latent_pool(pool, checks, _ones(truth, cards, pool.shape[0]), cards,
                                   np.random.default_rng(12))
    assert out is pool
    assert info["ess_sampler"] > info["ess_latent"]


def test_suppressed_cells_keep_the_pools_records():
    """A suppressed cell (noisy count at or below the threshold) says only that the cell
    holds no more than the threshold: the short fit keeps the pool's records there instead of
    weighting them to 0 (half the cells suppressed: the effective size stays the pool's)."""
    rng = np.random.default_rng(13)
    pool = np.repeat(np.arange(16), 625)
    pool = np.stack([pool // 4, pool % 4], axis=1)[rng.permutation(10_000)]
    noisy = np.where(np.arange(16) < 8, 625.0, 0.0)
    check = TableCheck(cols=(0, 1), shape=(4, 4), cells=np.zeros(0, dtype=np.int64), noisy=noisy,
                       suppressed=noisy == 0, threshold=700.0, stddev=1.0)
    w = latent.pair_weights(pool, [check], {})
    assert np.isfinite(w).all() and effective_size(w) > 0.99 * pool.shape[0]


def _em_as_first_written(pool, weights, cards, rng, classes, iterations):
    """fit_latent as it was first written (a log per record and class, a bincount per class from
    a strided column): the reference its faster form must match bit for bit."""
    n, p = pool.shape
    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    w = w / max(float(w.sum()), 1e-300)
    resp = rng.dirichlet(np.ones(classes), size=n)
    shares, probs = np.full(classes, 1.0 / classes), ()
    for _ in range(iterations):
        rw = resp * w[:, None]
        shares = np.maximum(rw.sum(axis=0), 1e-300)
        probs = tuple((np.stack([np.bincount(pool[:, j], weights=rw[:, k], minlength=int(cards[j]))
                                 for k in range(classes)]) + 1e-9 * rw.sum(axis=0)[:, None]) / shares[:, None]
                      for j in range(p))
        log = np.log(shares)[None, :] + sum(np.log(probs[j][:, pool[:, j]]).T for j in range(p))
        resp = np.exp(log - log.max(axis=1, keepdims=True))
        resp /= resp.sum(axis=1, keepdims=True)
    return shares / shares.sum(), tuple(t / t.sum(axis=1, keepdims=True) for t in probs)


def test_em_gives_the_same_bits_as_its_first_form():
    """The EM's speed-ups (each table's logs taken once, per-class counts from contiguous
    weights) keep every bit of the model: a seeded release's bytes depend on it. A record-major
    log-likelihood summed in another memory order changed the last bits (1e-13) in an attempt."""
    rng = np.random.default_rng(4)
    cards = (2, 5, 12, 3, 7, 4)
    pool = np.asfortranarray(np.stack([rng.integers(0, c, 20_000) for c in cards], axis=1).astype(np.uint8))
    w = rng.gamma(1.0, size=pool.shape[0])
    got = latent.fit_latent(pool, w, cards, np.random.default_rng(7), classes=8, iterations=6)
    shares, probs = _em_as_first_written(pool, w, cards, np.random.default_rng(7), 8, 6)
    assert got.shares.tobytes() == shares.tobytes()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got.probs, probs))
