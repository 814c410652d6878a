"""Random generators for releases.

Without a secret seed every generator draws from the OS entropy pool. With one,
each stage gets its own generator derived from (seed, stage name), so that a
release is reproducible byte for byte and stages do not share streams. The seed
is private: knowing it removes the noise. Only a commitment (a hash) of it may
be published.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

__all__ = ["MIN_SEED_BYTES", "read_seed_file", "stage_rng", "seed_commitment"]

MIN_SEED_BYTES = 16


def read_seed_file(path: str | Path) -> bytes:
    """Reads a secret seed; refuses one too short to be secret."""
    p = Path(path)
    try:
        seed = p.read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"--seed-file {p}: cannot be read ({exc.strerror})") from None
    if len(seed) < MIN_SEED_BYTES:
        raise ValueError(
            f"--seed-file {p}: a secret seed needs at least {MIN_SEED_BYTES} bytes "
            "(e.g. `head -c 32 /dev/urandom | base64 > seed`)"
        )
    return seed


def stage_rng(seed: bytes | None, stage: str) -> np.random.Generator:
    """Generator for one stage: OS entropy, or derived from the secret seed."""
    if seed is None:
        return np.random.default_rng()
    digest = hashlib.sha256(b"dpsynth/stage-rng/v1\x00" + seed + b"\x00" + stage.encode()).digest()
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(digest, "big")))


def seed_commitment(seed: bytes | None) -> str | None:
    """Hash of the seed, safe to publish because the seed has >= 128 bits of entropy."""
    if seed is None:
        return None
    return "sha256:" + hashlib.sha256(b"dpsynth/seed-commitment/v1\x00" + seed).hexdigest()
