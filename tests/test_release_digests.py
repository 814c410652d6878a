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

# method -> published file -> sha256, recorded on main at 90a105e (before issue 24's move).
RELEASE_DIGESTS: dict[str, dict[str, str]] = {
    'marginals': {
        'measurement.json': '40198ac2cf7c7da36e6ca7181f41294c2c96cd52f4a577e4b67fd311dadb613c',
        'measurement.parquet': '3e7e6d8228a5ce2b8f7b13a153f88540fab35ba3430163ebf73bea81d279de49',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '4a6ba8db659d7a019c30d592647b70255b00e7d4694fdb259d2180ccd5d4a603',
        'synthetic.parquet': '56869e2b7c79a5e62f711fed52e81d9eba89455fb8624d316132b9e0d6b40c47',
    },
    'microaggregation': {
        'measurement-blocks.parquet': 'a9be432a7ffbb294578e6c4cc03d51cd8bc4ae9f1fd17fe5e5e2d58a6c77131d',
        'measurement.json': 'fe372cd36d2fe657ff0bce269f8609578f2486af978282b05e9fdc4cff3a7479',
        'measurement.parquet': 'b3ce0227f9713e661f6eb919d632f9bf7fd855b393b217f8e96f6f9a5c2fd7c9',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '4c0392e4d73a71bf4daa658c8296387fd5c9ff34c5bfac21950ddaf7d5a0094c',
        'synthetic.parquet': '008dd193adf4bcadc66e95c9e5556c22a03c313958f033f110286a2d924c14ac',
    },
    'microaggregation-dp': {
        'measurement-blocks.parquet': '6f577117b76b0f9a5853cafdbdf9799183028b89bcb7e9d6beee989a1af66e8f',
        'measurement.json': 'd7efaa3625be4fb4c351c08a1890be34b26c328462af4d1a85fe7a4ca4ec9ecc',
        'measurement.parquet': 'dea3b185e2cae0e48d902512d46e0aacd8eb80df8241780672b522140cb3d0b0',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': 'a5c5f1fbb50f6681f02eeeb5ede2d6c8efc245bd2b3ddc1ace237f22b8270275',
        'synthetic.parquet': 'f6367da07f67b9d5fac597e92d3de3cab1271c5018aa12b0dc98f7da9a0c6b00',
    },
    'one-step': {
        'measurement.json': '1a3af8d71d471f2bbc235e5a7e96601d359965a937d1bc55756669cf91d7164e',
        'measurement.parquet': '1b25d3b2f6b41486eba7c87648bdfe83f249a3e42eee397933e31f34288c8449',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '61236599b7b189e698d0d0474bc709436ad54376399c6a023955113de6d031e4',
        'synthetic.parquet': '533bd84e6afbdaa3cd297c11ed3d5ba40a51a1d31abfb6981c6ba58c9a5845f0',
    },
    'pgm': {
        'measurement.json': '5c733e2a4f2ef25004afabbb61ba53d1d0bc1f470cfe063f0cf2f0993070f1b0',
        'measurement.parquet': '4d1c6e92c8db884386b23775acf9a9ddea7c439e70c772ad825dcea8a7495dde',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': 'e9f52d873f6c88865c05fcac8df9a3622f6295a5a4708fd752b546c714d5c9e0',
        'synthetic.parquet': '8f31646122ed756ad3063e3c3957b599ac21bf5b25c1717c59e22925679f4aaf',
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
        'measurement-aggregates.parquet': 'dbab8a36280371a05fb0bdc2537b39bc83337c7b065dc68e300a25a6788ffeda',
        'measurement.json': 'f71bc00e5ad2827170c7fe304a06eee70e5b4864331d4b4829041e7650ed1d80',
        'measurement.parquet': '7959ce12421efd257f4a017b53e7c57ee42ddcdf528aefd66ac12ce992691745',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '1c2cd9f5e8a691c677e280055bd4cf5714dd4f29e67f3c8a24edf7abffbadd61',
        'synthetic.parquet': 'c793315f8fb1cc7ff3a6fd17659ec1ae2c67b008e896a5b14285ee6687477c3f',
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
