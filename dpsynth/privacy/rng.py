"""Random generators for releases, bound to the release they serve.

Without a secret seed every generator draws from the OS entropy pool. With one, each
stage's generator is derived by HMAC-SHA256 under the seed from the *release
material* (a digest of everything the release depends on: input content, schema,
method, parameters, post-processing options, budget, name) and the stage name
(DESIGN.md, decision 9). The same inputs and seed give the same bytes (reproducible
builds); any other input gives independent noise, so one seed file can serve every
nightly release without the difference of two releases cancelling their noise.

The seed is private: knowing it removes the noise. The manifest carries only a
per-release commitment, an HMAC under the seed of the release material: without the
seed it reveals nothing about the input and two releases' commitments cannot be linked;
an auditor given the seed and the release's inputs can recompute it.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import numpy as np

__all__ = ["MIN_SEED_BYTES", "read_secret_file", "read_seed_file", "stage_rng", "seed_commitment", "seed_tag"]

MIN_SEED_BYTES = 16

_RNG_LABEL = b"dpsynth/stage-rng/v2\x00"
_COMMIT_LABEL = b"dpsynth/seed-commitment/v2\x00"
_TAG_LABEL = b"dpsynth/seed-tag/v1\x00"


def read_secret_file(path: str | Path, option: str, what: str, hint: str = "") -> bytes:
    """Reads a secret (seed or key) of at least MIN_SEED_BYTES bytes; errors name ``option``."""
    p = Path(path)
    try:
        secret = p.read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"{option} {p}: cannot be read ({exc.strerror})") from None
    if len(secret) < MIN_SEED_BYTES:
        raise ValueError(f"{option} {p}: {what} needs at least {MIN_SEED_BYTES} bytes{hint}")
    return secret


def read_seed_file(path: str | Path) -> bytes:
    """Reads a secret seed; refuses one too short to be secret."""
    return read_secret_file(path, "--seed-file", "a secret seed",
                            " (e.g. `head -c 32 /dev/urandom | base64 > seed`)")


def _mac(seed: bytes, label: bytes, *parts: bytes) -> bytes:
    mac = hmac.new(seed, label, hashlib.sha256)
    for part in parts:  # length-prefixed: no two part lists give the same message
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    return mac.digest()


def stage_rng(seed: bytes | None, release: bytes, stage: str) -> np.random.Generator:
    """Generator for one stage of one release: OS entropy, or HMAC(seed; release, stage).

    ``release`` is the release material's digest; it must change whenever the input,
    schema, method, parameters, budget or name change.
    """
    if seed is None:
        return np.random.default_rng()
    if not release:
        raise ValueError("a seeded generator needs the release material it is bound to")
    digest = _mac(seed, _RNG_LABEL, release, stage.encode())
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(digest, "big")))


def seed_commitment(seed: bytes | None, release: bytes) -> str | None:
    """Per-release commitment to the seed: HMAC(seed; release material), safe to publish.

    It is a function of the secret seed and the release together, never of the input
    alone; two releases made with one seed carry unrelated commitments.
    """
    if seed is None:
        return None
    return "hmac-sha256:" + _mac(seed, _COMMIT_LABEL, release).hex()


def seed_tag(seed: bytes | None) -> str:
    """Private identity of a seed for cache keys in the workspace (never published)."""
    if seed is None:
        return "os-entropy"
    return _mac(seed, _TAG_LABEL).hex()[:32]
