"""The estimator's fits, bit for bit: speed work on the fit must not move a single bit.

Each case runs a seeded fit (float64 and float32 descents, a warm start, a fit driven past its
stop rules to a target, AIM's rounds and queries) and compares the sha256 of every fitted
array (potentials, log beliefs, beliefs, the answers of ``project_many``) and the step counts
with :data:`FIT_DIGESTS`, recorded on main at 46e3805 before the fit's speed work of session
42. A change that legitimately alters fits re-records them: run ``python
tests/test_fit_bytes.py`` from the repository root (``PYTHONPATH=.``) and paste the printed
dict over :data:`FIT_DIGESTS`, saying why in the commit message.
"""

from __future__ import annotations

import hashlib
import itertools
import sys

import numpy as np
import pytest

from dpsynth.inference import Domain, EstimatorOptions, FitTarget, GraphicalModel, Observation, estimate, fit_to_target
from dpsynth.privacy import Budget, Ledger


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _model_digest(model: GraphicalModel) -> str:
    return _digest(*model.theta, *model.log_beliefs, *model.beliefs, np.array([model.total]))


def _problem(seed: int = 42) -> tuple[Domain, list[Observation]]:
    """Eight columns, every 1-way marginal and a dozen noisy pairs (cliques of 3 and 4 columns,
    so that terms share cliques, some sum from others and separators hold several columns)."""
    rng = np.random.default_rng(seed)
    dom = Domain(names=tuple("abcdefgh"), sizes=(5, 4, 6, 3, 7, 4, 5, 6))
    codes = np.empty((20_000, 8), dtype=np.int64)
    codes[:, 0] = rng.integers(0, 5, codes.shape[0])
    for j in range(1, 8):
        noise = rng.integers(0, dom.sizes[j], codes.shape[0])
        codes[:, j] = np.where(rng.random(codes.shape[0]) < 0.6, codes[:, j - 1] % dom.sizes[j], noise)
    pairs = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("d", "e"), ("c", "e"), ("e", "f"),
             ("f", "g"), ("e", "g"), ("g", "h"), ("b", "d"), ("a", "h")]
    obs = []
    for attrs in [(n,) for n in dom.names] + pairs:
        cols = [dom.index(a) for a in attrs]
        counts = np.zeros(dom.shape(attrs))
        np.add.at(counts, tuple(codes[:, c] for c in cols), 1.0)
        sd = 40.0 if len(attrs) == 1 else 25.0
        obs.append(Observation(attrs=attrs, counts=counts + rng.normal(0.0, sd, counts.shape), stddev=sd))
    return dom, obs


def _fits() -> dict[str, str]:
    dom, obs = _problem()
    out: dict[str, str] = {}
    for precision in ("double", "single"):
        opts = EstimatorOptions(iters=300, noise_tol=0.03, precision=precision)
        model = estimate(dom, obs, options=opts)
        out[f"estimate-{precision}"] = _model_digest(model)
        warm = estimate(dom, obs[:10], options=opts)
        out[f"warm-{precision}"] = _model_digest(estimate(dom, obs, options=opts, warm=warm))
        limits = {frozenset(o.attrs): 0.002 for o in obs if len(o.attrs) == 2}
        target = FitTarget(limits=limits, most_steps=700, window=60, min_gain=0.01)
        model, report = fit_to_target(dom, obs, target, options=opts)
        out[f"target-{precision}"] = _model_digest(model) + f" {report.steps} {report.extra_steps} {report.ratio!r}"
        queries = [q for q in itertools.combinations(dom.names, 2)] + [(n,) for n in dom.names]
        out[f"queries-{precision}"] = _digest(*model.project_many(queries))
    return out


def _aim() -> dict[str, str]:
    """AIM's rounds (fits, warm starts, queries) and the released fit on a small table, with
    float32 descents (no steps scaled by the model's size: those would run float64)."""
    import dpsynth.methods.pgm as pgm_module
    from dpsynth.methods import get_method
    from dpsynth.schema import schema_from_dict
    from dpsynth.rows.encoding import EncodedTable

    rng = np.random.default_rng(7)
    cards = [4, 5, 3, 6, 4, 5, 3]
    schema = schema_from_dict({"name": "t", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": [str(i) for i in range(c)]} for j, c in enumerate(cards)]})
    codes = np.empty((30_000, len(cards)), dtype=np.int64)
    codes[:, 0] = rng.integers(0, cards[0], codes.shape[0])
    for j in range(1, len(cards)):
        noise = rng.integers(0, cards[j], codes.shape[0])
        codes[:, j] = np.where(rng.random(codes.shape[0]) < 0.7, codes[:, j - 1] % cards[j], noise)
    table = EncodedTable(schema=schema, codes=codes.astype(np.uint8))
    saved = pgm_module.FIT_CELL_STEPS
    pgm_module.FIT_CELL_STEPS = None
    try:
        method = get_method("pgm", {"select": "aim", "degree": "2", "units": "20", "refit_iters": "30", "iters": "200"})
        b = Budget(epsilon=2.0, delta=1e-9)
        m = method.measure(table, Ledger(b, method.plan(schema, b)), rng)
        model, report = method.released_fit(m, schema, 30_000)
    finally:
        pgm_module.FIT_CELL_STEPS = saved
    assert report is not None
    return {"aim-measurement": _digest(*(nm.counts for nm in m.measured)) + " " + repr(m.meta["selected"]),
            "aim-released": _model_digest(model) + f" {report.steps} {report.extra_steps} {report.ratio!r}"}


FIT_DIGESTS: dict[str, str] = {
    'estimate-double': '04744fae7d731454c3182228c3733793928637a9cdf1a07b6853b5d739e4ef74',
    'warm-double': '27dc67f74bb22b12c837c100128a152e1676cfd9050410bd4a04b638990416ea',
    'target-double': '46bbe0fcaab43ac62c9af75778bb4ad08b858cefe68a3c2440f437d04b868d00 202 116 6.128407820943223',
    'queries-double': 'a72402e07545e338f496f8c3987184d91fb7a62f10f2b67ecebd385baa6e4206',
    'estimate-single': 'b8950a1b3588318867abc2c90e4a407a2a3ee800b0210ad972942c2201711dc9',
    'warm-single': 'fbe452136565555bca9598077b523facd8730b601b3ac8bb7795e5e6dd62cc60',
    'target-single': '701bb63b2ffb62496c8e59da73337380098ea28adcb291601fad5f3a34cfe32e 199 113 6.130783397061711',
    'queries-single': 'ae02fc3a78f47ba785aed3208d5aff5b610cfc0c14ba363afd081bdff3239f39',
    'aim-measurement': "073ecbff5e3aa2738ff23a4f03e5e5cbe88bb27e4d54002de2d25cbc4dc0ad72 [['c0', 'c1'], ['c4', 'c5'], ['c3', 'c4'], ['c2', 'c3'], ['c5', 'c6'], ['c1', 'c2'], ['c1', 'c2'], ['c1', 'c4'], ['c3', 'c6'], ['c0', 'c5'], ['c3', 'c4']]",
    'aim-released': '296792f366a47541a9fcdd88cc65e14edcd5ce2ca344997f7628dcece16cad14 136 0 0.5916235102480416',
}


def _all() -> dict[str, str]:
    return _fits() | _aim()


@pytest.fixture(scope="module")
def digests() -> dict[str, str]:
    return _all()


@pytest.mark.parametrize("case", ["estimate-double", "estimate-single", "warm-double", "warm-single",
                                  "target-double", "target-single", "queries-double", "queries-single",
                                  "aim-measurement", "aim-released"])
def test_a_seeded_fit_keeps_its_bits(digests, case):
    assert digests[case] == FIT_DIGESTS[case]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_beliefs_written_to_given_arrays_are_the_same_bits(dtype):
    """calibrate_probs into the estimator's reused arrays (``out``) gives the bits it gives into
    new ones, also where a separator's shifted sum underflows (the per-cell path, b = 0 here) and
    when ``out`` holds the last call's beliefs; the returned beliefs are those arrays."""
    from dpsynth.inference import build_junction_tree, calibrate_probs
    from dpsynth.inference.model import belief_buffers

    rng = np.random.default_rng(35)
    dom = Domain(names=("a", "b", "c", "d"), sizes=(3, 2, 4, 5))
    tree = build_junction_tree(dom, [("a", "b"), ("b", "c"), ("c", "d"), ("b", "d")])
    theta = [rng.normal(size=dom.shape(c)).astype(dtype) for c in tree.cliques]
    i = next(k for k, c in enumerate(tree.cliques) if c == ("a", "b"))
    theta[i][:, 0] -= 800.0 if dtype == np.float64 else 120.0
    out = belief_buffers(tree, np.dtype(dtype))
    for _ in range(2):
        want, z = calibrate_probs(tree, theta)
        got, z2 = calibrate_probs(tree, theta, out)
        assert z == z2 and all(g is o for g, o in zip(got, out))
        assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(got, want))
        theta = [t + 0.5 for t in theta]


def test_a_pooled_array_is_reused_only_once_nothing_refers_to_it():
    """The descent's pool of potentials never hands out an array a state (or a view of it)
    still holds: reusing one would overwrite a state's potentials."""
    from dpsynth.inference.junction_tree import build_junction_tree
    from dpsynth.inference.estimate import _Pool

    dom = Domain(names=("a", "b"), sizes=(3, 4))
    pool = _Pool(build_junction_tree(dom, [("a", "b")]), np.dtype(np.float32))
    first = pool.take(0)
    assert first.shape == (3, 4) and first.dtype == np.float32
    second = pool.take(0)
    assert second is not first  # ``first`` is still held here
    view = first[1:]
    del first
    third = pool.take(0)
    assert not np.shares_memory(third, view) and third is not second
    held = [second]
    del second, third, view
    again = pool.take(0)
    assert not np.shares_memory(again, held[0])  # the one a list holds is never handed out
    assert len(pool.arrays[0]) == 3  # the others came back free


def test_queries_run_on_one_blas_thread_and_restore_the_count(monkeypatch):
    """project_many and project run their products with OpenBLAS on one thread (its spinning
    threads doubled AIM's query CPU) and give the count back, also after an error."""
    from dpsynth.inference import blas
    from dpsynth.inference.blas import blas_threads, one_blas_thread

    before = blas_threads()
    if before is None:
        pytest.skip("no OpenBLAS loaded: one_blas_thread does nothing")
    with one_blas_thread():
        assert blas_threads() == 1
        with one_blas_thread():
            assert blas_threads() == 1
        assert blas_threads() == 1
    assert blas_threads() == before
    with pytest.raises(ZeroDivisionError):
        with one_blas_thread():
            1 / 0
    assert blas_threads() == before
    seen = []
    real = blas.one_blas_thread

    def spy():
        seen.append(1)
        return real()

    module = sys.modules["dpsynth.inference.model"]
    monkeypatch.setattr(module, "one_blas_thread", spy)
    dom, obs = _problem()
    model = estimate(dom, obs, options=EstimatorOptions(iters=20))
    model.project_many([("a", "h"), ("b", "f")])
    model.project(("a", "g"))
    assert len(seen) == 2


def test_a_product_above_openblas_thread_threshold_is_the_same_bits_on_one_thread():
    """The products of queries across cliques (here one of AIM's shapes on the 10M table,
    (17 x 4,896) by (4,896 x 17), which OpenBLAS splits over its threads) are the same bits on
    one thread."""
    from dpsynth.inference.blas import blas_threads, one_blas_thread
    from dpsynth.inference.model import _pair_product

    if not (blas_threads() or 1) > 1:
        pytest.skip("OpenBLAS runs one thread here: nothing to compare")
    rng = np.random.default_rng(3)
    ta, tb = rng.random((17, 4896)), rng.random((4896, 17))
    many = _pair_product(("a", "s"), ta, ("s", "b"), tb, ("a", "b"))
    plain = np.matmul(ta, tb)
    with one_blas_thread():
        one = _pair_product(("a", "s"), ta, ("s", "b"), tb, ("a", "b"))
        assert np.array_equal(np.matmul(ta, tb), plain)
    assert np.array_equal(one, many)


def test_the_target_fit_went_past_its_stop_rules():
    """The pinned fits exercise the path they are meant to: the target fits take extra steps."""
    d = _all()
    for precision in ("double", "single"):
        steps, extra = map(int, d[f"target-{precision}"].split()[1:3])
        assert extra > 0 and steps > extra


if __name__ == "__main__":
    got = _all()
    print("FIT_DIGESTS: dict[str, str] = {")
    for k, v in got.items():
        print(f"    {k!r}: {v!r},")
    print("}")
    sys.exit(0)


def _blas_set(n: int) -> None:
    from dpsynth.inference import blas

    fns = blas._openblas()
    assert fns is not None
    fns[1](n)


def test_the_estimator_dot_is_the_same_bits_on_one_thread_and_on_two():
    """A dot product longer than OpenBLAS's threaded threshold sums to other bits on two threads
    than on one (so a fit's loss, and a seeded release, depended on the machine's cores);
    fixed_dot gives the same bits on both, and np.dot's own below the threshold."""
    from dpsynth.inference.blas import THREADED_DOT, blas_threads, fixed_dot

    before = blas_threads()
    if before is None:
        pytest.skip("no OpenBLAS loaded")
    rng = np.random.default_rng(7)
    vectors = [(rng.normal(size=n) * 1e3, rng.random(n)) for n in (THREADED_DOT + 1, 30_000, 50_001) for _ in range(5)]
    try:
        _blas_set(2)
        if blas_threads() < 2:
            pytest.skip("OpenBLAS runs one thread here: nothing to compare")
        two = [fixed_dot(a, b) for a, b in vectors]
        two_plain = [float(np.dot(a, b)) for a, b in vectors]
        _blas_set(1)
        one = [fixed_dot(a, b) for a, b in vectors]
        one_plain = [float(np.dot(a, b)) for a, b in vectors]
    finally:
        _blas_set(before)
    assert one == two
    assert one_plain != two_plain  # what the slices are for: np.dot alone moves with the threads
    short = rng.normal(size=THREADED_DOT), rng.random(THREADED_DOT)
    assert fixed_dot(*short) == float(np.dot(*short))


def test_a_fit_above_ten_thousand_cells_does_not_depend_on_the_cores():
    """A fit whose measured cells pass 10,000 (one pair of 120 x 100 values): its loss, which
    decides every step's acceptance and the stops, is the same bits with OpenBLAS on one thread
    as on two, and so is the fit."""
    from dpsynth.inference.blas import blas_threads
    from dpsynth.inference.estimate import fit_loss

    before = blas_threads()
    if before is None:
        pytest.skip("no OpenBLAS loaded")
    rng = np.random.default_rng(11)
    dom = Domain(names=("a", "b", "c"), sizes=(120, 100, 3))
    a = rng.integers(0, 120, 50_000)
    b = (a + rng.integers(0, 7, a.size)) % 100
    c = (a % 3 + rng.integers(0, 2, a.size)) % 3
    obs = []
    for attrs, cols in (((("a", "b")), (a, b)), (("b", "c"), (b, c)), (("a",), (a,))):
        counts = np.zeros(dom.shape(attrs))
        np.add.at(counts, cols, 1.0)
        obs.append(Observation(attrs=attrs, counts=counts + rng.normal(0.0, 5.0, counts.shape), stddev=5.0))
    fits, losses = {}, {}
    try:
        for n in (2, 1):
            _blas_set(n)
            if blas_threads() != n:
                pytest.skip("OpenBLAS runs one thread here: nothing to compare")
            fits[n] = estimate(dom, obs, options=EstimatorOptions(iters=40, precision="double"))
            losses[n] = [fit_loss(fits[2], obs) for _ in range(3)]
    finally:
        _blas_set(before)
    assert losses[1] == losses[2]
    assert _model_digest(fits[1]) == _model_digest(fits[2])
