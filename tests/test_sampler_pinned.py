"""The forward sampler's records pinned for fixed seeds: a faster ``GraphicalModel.sample`` (or
``allocate``, or pgm's ``ModelSampler``) must draw exactly the records the original did.

The model is built from chosen clique beliefs (not fitted), so the pins depend on sampling
alone: several cliques with separators of one and two columns, a second component and a
column on its own (joined by empty separators), separator cells of probability zero (their
rows are drawn uniformly), and, for ``ModelSampler``, merged values spread back. The digests
were taken with the sampler of commit 46e3805 (before session 42 made it faster)."""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest

from dpsynth.inference import Domain, GraphicalModel, allocate, build_junction_tree
from dpsynth.methods.pgm import ModelSampler


def _model() -> GraphicalModel:
    """Beliefs summed from one joint with zeros: cliques (a,b,c), (b,c,d), (d,e), (f,g), (h)."""
    dom = Domain(names=("a", "b", "c", "d", "e", "f", "g", "h"), sizes=(3, 4, 2, 5, 3, 6, 7, 2))
    tree = build_junction_tree(dom, [("a", "b", "c"), ("b", "c", "d"), ("d", "e"), ("f", "g"), ("h",)])
    rng = np.random.default_rng(42)
    left = rng.dirichlet(np.full(3 * 4 * 2 * 5 * 3, 0.3)).reshape(3, 4, 2, 5, 3)
    left[:, 1, 0, :, :] = 0.0  # separator cells (b=1, c=0) and (b=1,c=0,...) of probability zero
    left[:, :, :, 2, :] = 0.0  # d = 2 never happens: (d,e)'s separator cell d=2 is empty
    left /= left.sum()
    right = rng.dirichlet(np.full(6 * 7, 0.5)).reshape(6, 7)
    right[4, :] = 0.0
    right /= right.sum()
    lone = np.array([0.3, 0.7])
    marg = {("a", "b", "c"): left.sum(axis=(3, 4)), ("b", "c", "d"): left.sum(axis=(0, 4)),
            ("d", "e"): left.sum(axis=(0, 1, 2)), ("f", "g"): right, ("h",): lone}
    beliefs = tuple(marg[c] for c in tree.cliques)
    with np.errstate(divide="ignore"):
        logs = tuple(np.log(b) for b in beliefs)
    model = GraphicalModel(tree=tree, theta=logs, total=1000.0, log_beliefs=logs)
    model.__dict__["beliefs"] = beliefs
    return model


def _digest(codes: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(codes).tobytes()).hexdigest()[:24]


def test_the_pinned_model_has_what_the_pins_need():
    """The model reaches the paths pinned below: separators of none (another component), one
    and two columns, and separator cells of probability zero."""
    model = _model()
    tree = model.tree
    seps = [tree.separator(i, tree.parent[i]) for i in tree.order if tree.parent[i] >= 0]
    assert {len(s) for s in seps} >= {0, 1, 2}
    zero = 0
    for i in tree.order:
        p = tree.parent[i]
        if p >= 0:
            cl = tree.cliques[i]
            sep = tree.separator(i, p)
            zero += int((model.beliefs[i].sum(axis=tuple(k for k, a in enumerate(cl) if a not in sep)) == 0).sum())
    assert zero > 0


@pytest.mark.parametrize("rows,seed,iid,dtype,pin", [
    (5000, 1, False, np.int64, "a9ed46e6ed3d702086e3ad3a"),
    (5000, 1, False, np.int8, "a9ed46e6ed3d702086e3ad3a"),
    (1, 2, False, np.int64, "5c5ffcf79190e3376dbf1c74"),
    (0, 3, False, np.int64, "e3b0c44298fc1c149afbf4c8"),
    (65536, 4, False, np.int16, "67438cbe691d55ed5a26c087"),
    (3000, 5, True, np.int64, "aa00f1f55d12408fcb73f686"),
])
def test_sample_draws_the_pinned_records(rows, seed, iid, dtype, pin):
    model = _model()
    codes = model.sample(rows, np.random.default_rng(seed), iid=iid, dtype=dtype)
    assert codes.shape == (rows, 8) and codes.dtype == np.dtype(dtype)
    assert _digest(codes.astype(np.int64)) == pin


def test_sampling_twice_from_one_model_and_from_its_pickle_draws_the_same_records():
    """Whatever a sampler keeps between draws (or loses in a pickle) changes no record."""
    model = _model()
    first = model.sample(4000, np.random.default_rng(7))
    again = model.sample(4000, np.random.default_rng(7))
    moved = pickle.loads(pickle.dumps(model)).sample(4000, np.random.default_rng(7))
    assert np.array_equal(first, again) and np.array_equal(first, moved)
    assert _digest(first) == "5714e68952677caa606632ff"


def _sampler() -> ModelSampler:
    """pgm's sampler on the model with merged values: model code 1 of ``g`` stands for its
    codes 1, 2 and 5 (one-way counts 10, 0, 30), code 0 of ``a`` for its codes 0 and 2."""
    model = _model()
    g_map = np.array([0, 1, 1, 2, 3, 1, 4, 5, 6], dtype=np.int64)  # 9 own codes -> 7 model codes
    a_map = np.array([0, 1, 0, 2], dtype=np.int64)  # 4 own codes -> 3 model codes
    names = ("a", "b", "c", "d", "e", "f", "g", "h")
    counts = {"g": np.array([5.0, 10.0, 0.0, 7.0, 3.0, 30.0, 2.0, 1.0, 4.0]),
              "a": np.array([20.0, 8.0, 5.0, 3.0])}
    return ModelSampler(model=model, rows=10_000, dtype=np.dtype(np.uint8), names=names,
                        maps={"a": a_map, "g": g_map}, counts=counts)


@pytest.mark.parametrize("rows,seed,pin", [(10_000, 11, "648a9aa10cc44063a29bd4eb"), (777, 12, "526a1db6298bd474bee48d14")])
def test_model_sampler_spreads_merged_values_as_pinned(rows, seed, pin):
    codes = _sampler().sample(rows, np.random.default_rng(seed))
    assert codes.shape == (rows, 8) and codes.dtype == np.uint8
    assert set(np.unique(codes[:, 6])) <= set(range(9)) and set(np.unique(codes[:, 0])) <= set(range(4))
    assert _digest(codes.astype(np.int64)) == pin


def test_allocate_is_pinned():
    rng = np.random.default_rng(3)
    prob = rng.dirichlet(np.full(9, 0.4), size=40)
    prob[5] = 0.0
    prob[6] = 1.0 / 9
    n = rng.integers(0, 300, 40)
    n[7] = 0
    counts = allocate(n, prob, np.random.default_rng(4))
    assert (counts.sum(axis=1) == n).all()
    assert _digest(counts) == "677de824d87c9d25236cb657"
