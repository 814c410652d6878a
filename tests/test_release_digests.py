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
# synthetic.* re-recorded for issue 25 (the synthetic table drawn and decoded in blocks).
RELEASE_DIGESTS: dict[str, dict[str, str]] = {
    'marginals': {
        'measurement.json': '40198ac2cf7c7da36e6ca7181f41294c2c96cd52f4a577e4b67fd311dadb613c',
        'measurement.parquet': '3e7e6d8228a5ce2b8f7b13a153f88540fab35ba3430163ebf73bea81d279de49',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '4d4ae9b1e651ec514e25cc496afa43cfced27ad6a74fa76af300777697409868',
        'synthetic.parquet': '6d5d30c10388e5785907828aac7928f28aab67c296e6dca76cbafa2759f6a2ed',
    },
    'microaggregation': {
        'measurement-blocks.parquet': 'a9be432a7ffbb294578e6c4cc03d51cd8bc4ae9f1fd17fe5e5e2d58a6c77131d',
        'measurement.json': 'fe372cd36d2fe657ff0bce269f8609578f2486af978282b05e9fdc4cff3a7479',
        'measurement.parquet': 'b3ce0227f9713e661f6eb919d632f9bf7fd855b393b217f8e96f6f9a5c2fd7c9',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '8bb15e27f21e617591467383a2dee62d4ccdf965f5162b1ca6a0ed3b71ddfc3d',
        'synthetic.parquet': '0972d480b1872fe7145d7eb40e82495eda6250ec7ab3680ca25330a9fc0c577e',
    },
    'microaggregation-dp': {
        'measurement-blocks.parquet': '6f577117b76b0f9a5853cafdbdf9799183028b89bcb7e9d6beee989a1af66e8f',
        'measurement.json': 'd7efaa3625be4fb4c351c08a1890be34b26c328462af4d1a85fe7a4ca4ec9ecc',
        'measurement.parquet': 'dea3b185e2cae0e48d902512d46e0aacd8eb80df8241780672b522140cb3d0b0',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '14920610ac943a87c1d2d3514e0fd5cb53660d663c9900ad56c32f9716a9dc89',
        'synthetic.parquet': '55318e14d4e50ef969e5d045b69c9dadf68db6dbfeba7fee42edc66ca5284e28',
    },
    'one-step': {
        'measurement.json': '1a3af8d71d471f2bbc235e5a7e96601d359965a937d1bc55756669cf91d7164e',
        'measurement.parquet': '1b25d3b2f6b41486eba7c87648bdfe83f249a3e42eee397933e31f34288c8449',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '5eaf0a4d005935cdf3c151c7cfec87467914a05cd685a5c4d789f302bff4e732',
        'synthetic.parquet': '2bcfaa30870180b08995c29a4f27ba5bf1007f0b37ddc2e861c0f402f79c0af2',
    },
    'pgm': {
        'measurement.json': '5c733e2a4f2ef25004afabbb61ba53d1d0bc1f470cfe063f0cf2f0993070f1b0',
        'measurement.parquet': '4d1c6e92c8db884386b23775acf9a9ddea7c439e70c772ad825dcea8a7495dde',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': 'bc1063d63d8c80299e7b96e38305a95f7f5afad37523837ea6c78eb8eb666e38',
        'synthetic.parquet': 'b76fafe016c6334057063a8b2f6f7e09f7f6582a4f8895c34efe4b0293ab8574',
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
        'measurement-aggregates.parquet': 'dbab8a36280371a05fb0bdc2537b39bc83337c7b065dc68e300a25a6788ffeda',
        'measurement.json': 'f71bc00e5ad2827170c7fe304a06eee70e5b4864331d4b4829041e7650ed1d80',
        'measurement.parquet': '7959ce12421efd257f4a017b53e7c57ee42ddcdf528aefd66ac12ce992691745',
        'schema.yaml': '1ffd0cf9fece87b69d9e8b182ff8e74211b7a8ff10d75ae2b03016fd1fe6c489',
        'synthetic.csv': '0cae8f708cc8daee77333f4f54ade781853627ed8457c1228d0659a49929d58a',
        'synthetic.parquet': '54538a20587ea22d9e6545e833b48690b29c951103bb30d3cdb42c1c4d22198e',
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
