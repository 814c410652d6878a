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
RELEASE_DIGESTS: dict[str, dict[str, str]] = {
    'marginals': {
        'measurement.json': 'd09a8e243da2cfa2c48a8f5dba3811043ea0203bca8f632c936aaa9039919007',
        'measurement.parquet': 'e1470e5a57b5e3104fdfe9249d16968b494d90e0ef2ee2f4fead3255dad5a0e1',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': 'ef23a017f25760b5e59830e3403aa0c8c50002b9e81df1966c73e714f96ef758',
        'synthetic.parquet': '540c9bdcf3fb566b31622e90fb35501789073cba37243d4d89afc0b76e603c8f',
    },
    'microaggregation': {
        'measurement-blocks.parquet': '33319cc058846ad99e9eaa2f43b88c14ed87aba82efb0cc37d327452ad171b2e',
        'measurement.json': 'b42dad2a1e8be5119e7752d3b092ae2b5361a29231803a321a04315f64bce708',
        'measurement.parquet': '6710d93984826565d7a919403168da117e1b21c785c339fba59bdae527694924',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '31bd3ef844417647ad5c83c5e34bd5d9de04978f3feee80085ba553cd9d3727a',
        'synthetic.parquet': '61a348934516b7826b744ba9cb1f97f2d28f8ae1cb30817ba59a2a0819c0ad0a',
    },
    'microaggregation-dp': {
        'measurement-blocks.parquet': '81f8aae09b09dcd117945aac334a1d4d02f061db350a088b70adaf8504264c0e',
        'measurement.json': '70bb42a2de37471fca4ba1e5e14ebb1f575485890d5fb4621898c1eca36f51a3',
        'measurement.parquet': 'db064732467ee417c149e64c725fb7a749f55e71736cddda827a1e004969218b',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '7efeb3543585b7e97680edb22999970f4bb980d4067c4d5b8aefcc54b91e0a68',
        'synthetic.parquet': 'fdc06628a5e9dc3b8227b38f800eb5fc2c62d7efa3e3bc244de22f88af093f2f',
    },
    'one-step': {
        'measurement.json': '796bc42f6eb923278baa35c4c237170c24c926b596848c541d1be1f10d670138',
        'measurement.parquet': '629a953f207036ee89442546af6df8c106f6105f13439c7c07381b53d59e3ba3',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '713aa4781112efa29cdbc8853f56e791a6895744945513f4e889104692ac8405',
        'synthetic.parquet': '2e7ce5d200ba8eca6b38ccad74de0441fdbaacf2d1da640b012a8f6744733158',
    },
    'pgm': {
        'measurement.json': '0bfeac367d533f0723da2f8fddb6e1ed8b4660f1b28c3eb559232c5d0a847850',
        'measurement.parquet': '81b9b846da5dde54efde22b278855c8e89a005aa9e53ca46439b11908bfcc443',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '15f5f3a4eaa87c142a7664cde7d360db060128ce568e69b0929b9c3405804cb3',
        'synthetic.parquet': '82892b0ebede4389ad20be200c7f9c46f217fd3c0a75085eb936831199fa70c1',
    },
    'private-sampling': {
        'measurement-sample.parquet': 'e0f3e5a229818b40d8141aeb6ca9d184b23e9916d289dccdf31cde8428bb4c2c',
        'measurement.json': '11bcb001c104caed9eaba1669042228249e7f9bb735fbe05e5ce600f4fbcf998',
        'measurement.parquet': 'c30406d8cd75c5b53a24bb110f6198fd1f891cf01ccef7b7d74c27bf21615ff7',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': 'a03c879ca0d1c97cd618a853e13d833bddbc7e56c3f5c1f3b7a1d3315c535bcd',
        'synthetic.parquet': '04a3d7967f95ce6a686f505fa395223d5fff3fb270671625921003bfaf8d6d86',
    },
    'sds': {
        'measurement-aggregates.parquet': '7cfa17cebcbfc99208d8040414692d0b4da9816a905d3f56e11970418588cdfc',
        'measurement.json': 'c010b0d4351b3e7f2784781ccf8641d3f0d910a37ec592fb303a0a1fe7225039',
        'measurement.parquet': 'c61f01c4d6f1e7ca51ac84f834adba4f83f92ac60ba56403a23eb5eda63eb286',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': 'e72388f4beaf9b8d318738a4c1b8be8a6245f50ad53a8e7e31c438686e4229f4',
        'synthetic.parquet': 'd34c7c4a108c71623f817eb0fd310465836dd5ee837f0aaa7ab7d5eb527965bf',
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
