"""A seeded release of every registered method publishes the bytes it published before.

Guards refactors that must not change behaviour (issue 24 moved every module): each method
runs once on the demo table with a fixed seed file, and the sha256 of each published data
file (the synthetic table, the measurement files, the schema) must equal the digests in
:data:`RELEASE_DIGESTS`.

A change that legitimately alters releases (a new noise sampler, a new default) re-records
them: run ``python tests/test_release_digests.py`` from the repository root (with
``PYTHONPATH=.``), paste the printed dict over :data:`RELEASE_DIGESTS`, and say why in the
commit message.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from dpsynth import pipeline
from dpsynth.methods import METHODS

ROOT = Path(__file__).resolve().parents[1]
SEED = b"0123456789abcdef-test-seed-not-secret"

# Parameters and rows that let each method release on the demo table in a few seconds.
_PARAMS = {
    "private-sampling": {"Delta": "4", "heuristic": "true", "d": "1", "m": "256"},
    "microaggregation": {"anonymous_only": "true"},
}
_ROWS = {"private-sampling": 40}
# Published files that carry a time or a run-specific key (the manifest, the report,
# the gate's record) are left out; everything a reader analyses is compared.
_COMPARED_SUFFIXES = (".parquet", ".csv", ".yaml")
_COMPARED_NAMES = ("measurement.json",)

# method -> published file -> sha256, recorded on main at 90a105e (before issue 24's move);
# re-recorded for the exact noise samplers (issue 23 section 6: new noise bytes).
# pgm re-recorded on branch compression (issue 27): new parameters (compress, compress_threshold,
# sampling) enter the release material, and compression of rare values is on by default.
# synthetic.* re-recorded for issue 25 (the synthetic table drawn and decoded in fixed blocks).
# pgm re-recorded on branch aim-lowbudget: the new parameter compress_share enters the release key,
# from which every stage's noise is derived (HMAC of the seed), so every pgm byte changes; the
# default MST release (this one) merges by MST's rule as before.
# pgm re-recorded on branch aim-compress (issue 27): the new parameter compress_value_share enters
# the release key (every pgm byte changes); this default MST release merges by MST's rule as before.
# pgm re-recorded on branch aim-p5 (issue 27): the new parameter compress_bound enters the release
# key (every pgm byte changes); this default MST release still reads the counts (MST's rule).
# marginals' synthetic.* re-recorded on branch marginals-floor (issue 26): each noisy histogram is
# projected onto the non-negative tables with the estimated total and rows are allocated, not drawn i.i.d.
RELEASE_DIGESTS: dict[str, dict[str, str]] = {
    'marginals': {
        'measurement.json': 'd09a8e243da2cfa2c48a8f5dba3811043ea0203bca8f632c936aaa9039919007',
        'measurement.parquet': 'e1470e5a57b5e3104fdfe9249d16968b494d90e0ef2ee2f4fead3255dad5a0e1',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '00163b262d09488e7aac4e82d21a84ac24b116a822be16f7183234ad5b91ff33',
        'synthetic.parquet': '247dfe68d0065e593f1815acb72e853aa3efc6add6312a62144741692a825847',
    },
    'microaggregation': {
        'measurement-blocks.parquet': '33319cc058846ad99e9eaa2f43b88c14ed87aba82efb0cc37d327452ad171b2e',
        'measurement.json': 'b42dad2a1e8be5119e7752d3b092ae2b5361a29231803a321a04315f64bce708',
        'measurement.parquet': '6710d93984826565d7a919403168da117e1b21c785c339fba59bdae527694924',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': 'cea49f91734a47bc1a3715f946bca488f22b645abb944970cab60832d33d673e',
        'synthetic.parquet': '9e907ea0312ada6f8b178f150ffa0fe51d375f7401300691d8b561eb3670485d',
    },
    'microaggregation-dp': {
        'measurement-blocks.parquet': '81f8aae09b09dcd117945aac334a1d4d02f061db350a088b70adaf8504264c0e',
        'measurement.json': '70bb42a2de37471fca4ba1e5e14ebb1f575485890d5fb4621898c1eca36f51a3',
        'measurement.parquet': 'db064732467ee417c149e64c725fb7a749f55e71736cddda827a1e004969218b',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': 'f724a16b4f7f619b1247aa56f298b39cf0ca52b828307c38e36718e54dd0d23f',
        'synthetic.parquet': '916a1d9ae4f650b1eb87a937bc9bccb2e5928754621a217b43892a52ec6fdcac',
    },
    'one-step': {
        'measurement.json': '796bc42f6eb923278baa35c4c237170c24c926b596848c541d1be1f10d670138',
        'measurement.parquet': '629a953f207036ee89442546af6df8c106f6105f13439c7c07381b53d59e3ba3',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '415d885c69280d8bf39f0ce2b6820a2f7134ccb9c503cd670726ae59e8788b81',
        'synthetic.parquet': '4c426f9b73839afd8a5eec7d93ece772dd2270ce24d269357530ab5bab4769e9',
    },
    'pgm': {
        'measurement.json': '649b6edb76aba37b2476198c47038f64ee481f78f76c5635d30ad4e1efd607d4',
        'measurement.parquet': '23ff72701a5256e42117c950dc30e2cfb182e253cc8b3f56f802d6490c95bb43',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '3f7b1172990b171ab4693a4c06d38a0cd69d27ef276a463dab7901114e1903bf',
        'synthetic.parquet': '0f54ebd5452a114fbed87fa5feb1d6961aee96cbd7be5abd57d8de13a045b1d8',
    },
    'private-sampling': {
        'measurement-sample.parquet': 'e0f3e5a229818b40d8141aeb6ca9d184b23e9916d289dccdf31cde8428bb4c2c',
        'measurement.json': '11bcb001c104caed9eaba1669042228249e7f9bb735fbe05e5ce600f4fbcf998',
        'measurement.parquet': 'c30406d8cd75c5b53a24bb110f6198fd1f891cf01ccef7b7d74c27bf21615ff7',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '8c2311a37871643db1c7550a14387e3ab6cbd2d7065cd87ddfe92c493481040c',
        'synthetic.parquet': 'e1c807a954d295a1fe138f81b95324320e6a7078c16c9f0c120259e0adb71eee',
    },
    'sds': {
        'measurement-aggregates.parquet': '43974cf0bd44f0c4ebe5c1a7a713a0454dd766b39abc4a9d49b548e5d9ddfc54',
        'measurement.json': '3cbc058a48d6c37d150419f5cea266bc6ad78a1493e68c79c81bb14db22eac9d',
        'measurement.parquet': 'ab8c86b945ddc2ed2516a742ff23c1ce71610d8280c022a035f1d87c82c5a309',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': 'a1c341d9d1fa7ae39f705e8cbbf717bd8d269f1350bc9a02cad30e6908321ea4',
        'synthetic.parquet': '49e73003d2e0b79b1a63f7e1a32515f357727e6d6e5768e8329b55a833995541',
    },
}


def published_digests(method: str, tmp: Path) -> dict[str, str]:
    """Runs one seeded release of ``method`` under ``tmp``; sha256 of each compared file."""
    tmp.mkdir(parents=True, exist_ok=True)
    seed = tmp / "seed"
    seed.write_bytes(SEED)
    config = pipeline.ReleaseConfig(
        data=ROOT / "data" / "demo.csv", schema=ROOT / "schemas" / "demo.yaml", method=method,
        epsilon=1.0, out=tmp / "out", workspace=tmp / "ws", seed_file=seed, name="golden",
        params=dict(_PARAMS.get(method, {})), rows=_ROWS.get(method))
    folder = pipeline.run_release(config)
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and (p.suffix in _COMPARED_SUFFIXES or p.name in _COMPARED_NAMES)
    }


def test_every_registered_method_has_recorded_digests():
    assert sorted(RELEASE_DIGESTS) == sorted(METHODS)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_seeded_release_is_byte_identical(tmp_path, method):
    got = published_digests(method, tmp_path)
    assert any(name.startswith("synthetic.") for name in got)
    assert got == RELEASE_DIGESTS[method]


if __name__ == "__main__":  # re-record: prints the dict to paste above
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        recorded = {m: published_digests(m, Path(d) / m) for m in sorted(METHODS)}
    sys.stdout.write("RELEASE_DIGESTS: dict[str, dict[str, str]] = {\n")
    for m, files in recorded.items():
        sys.stdout.write(f"    {m!r}: {{\n")
        for name, h in files.items():
            sys.stdout.write(f"        {name!r}: {h!r},\n")
        sys.stdout.write("    },\n")
    sys.stdout.write("}\n")
