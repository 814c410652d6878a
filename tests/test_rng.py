"""Stage generators bound to (seed, release, stage), and the per-release seed commitment."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.privacy.rng import seed_commitment, seed_tag, stage_rng

SEED = b"0123456789abcdef-test-seed"


def _draw(seed, release, stage):
    return stage_rng(seed, release, stage).integers(0, 2**62, size=4).tolist()


def test_same_seed_release_and_stage_give_the_same_stream():
    assert _draw(SEED, b"r1", "measure") == _draw(SEED, b"r1", "measure")


@pytest.mark.parametrize("other", [(SEED, b"r2", "measure"), (SEED, b"r1", "decode"),
                                   (b"another-seed-0123456789", b"r1", "measure")])
def test_any_change_gives_another_stream(other):
    assert _draw(SEED, b"r1", "measure") != _draw(*other)


def test_parts_are_length_prefixed():
    # ("ab", "c") and ("a", "bc") must not collide
    assert _draw(SEED, b"ab", "c") != _draw(SEED, b"a", "bc")


def test_seeded_generator_needs_its_release():
    with pytest.raises(ValueError, match="release material"):
        stage_rng(SEED, b"", "measure")
    assert isinstance(stage_rng(None, b"", "measure"), np.random.Generator)  # OS entropy


def test_commitment_and_tag():
    assert seed_commitment(SEED, b"r1") == seed_commitment(SEED, b"r1")
    assert seed_commitment(SEED, b"r1") != seed_commitment(SEED, b"r2")
    assert seed_commitment(None, b"r1") is None
    assert seed_tag(SEED) != seed_tag(b"another-seed-0123456789") and seed_tag(None) == "os-entropy"
