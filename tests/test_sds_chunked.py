"""sds synthesis in chunks (issue 25): exact splits of the measured tables, the same bytes
whatever ``chunk_rows``, one chunk the release it was before, and a footprint check that
reflects the chunk."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from dpsynth import pipeline
from dpsynth.methods import METHODS
from dpsynth.methods.sds import SdsMethod, SdsParams, chunked
from dpsynth.pipeline import synthetic
from dpsynth.pipeline.synthetic import write_synthetic
from dpsynth.precheck import PrecheckError, check_rows
from dpsynth.schema import load_schema, schema_from_dict
from tests.sds_cases import sds_measured, tied_pairs_ratios  # noqa: F401 - sds_measured: a fixture

FILES = ("synthetic-codes.parquet", "synthetic.parquet", "synthetic.csv")


def _digests(folder) -> dict[str, str]:
    return {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in FILES}


def test_the_chunk_block_is_the_writer_block():
    assert chunked._BLOCK_ROWS == synthetic.BLOCK_ROWS


def test_chunks_depend_on_rows_and_width_only():
    per = chunked.chunk_rows_for(20)
    assert per % synthetic.BLOCK_ROWS == 0 and per >= synthetic.BLOCK_ROWS
    assert chunked.chunk_rows_for(5) > chunked.chunk_rows_for(20)  # fewer pairs, more rows per chunk
    assert chunked.chunk_count(per, 20) == 1 and chunked.chunk_count(per + 1, 20) == 2
    assert chunked.chunk_count(0, 20) == 1
    sizes = chunked.chunk_sizes(10_000_001, chunked.chunk_count(10_000_001, 20))
    assert sum(sizes) == 10_000_001 and max(sizes) <= per and max(sizes) - min(sizes) <= 1


def test_an_exact_split_sums_to_the_table():
    rng = np.random.default_rng(0)
    table = np.concatenate([rng.integers(0, 5000, 300).astype(np.float64), [0.0, 7.25, 1e6 + 0.5, -12.0]])
    split = chunked.ExactSplit(table)
    sizes = [333, 100, 1, 566]
    left, shares = sum(sizes), []
    for n in sizes:
        shares.append(split.take(n / left, rng))
        left -= n
    total = np.sum(shares, axis=0)
    ints = np.floor(np.abs(table))
    assert np.array_equal(np.sum([np.trunc(s) for s in shares], axis=0), np.sign(table) * ints)
    np.testing.assert_allclose(total, table, rtol=0, atol=1e-9)
    assert all((s[table >= 0] >= 0).all() for s in shares)
    # shares follow the rows: the 1-row chunk gets almost nothing, the big ones about their share
    big = table[:300].sum()
    assert shares[2][:300].sum() < 0.01 * big
    assert abs(shares[3][:300].sum() / big - 566 / 1000) < 0.01


def test_an_exact_split_rejects_a_wrong_share():
    """A split that ignored ``q`` (every share the whole table) would not sum to it."""
    split = chunked.ExactSplit(np.array([100.0, 3.0]))
    a = split.take(0.5, np.random.default_rng(1))
    b = split.take(1.0, np.random.default_rng(2))
    assert np.array_equal(a + b, [100.0, 3.0]) and 20 < a[0] < 80


def _small_chunks(monkeypatch, rows: int = 300) -> None:
    monkeypatch.setattr(chunked, "chunk_rows_for", lambda columns: rows)


def test_chunk_tables_sum_exactly_to_the_measured_tables(sds_measured, monkeypatch):
    plan, m = sds_measured
    _small_chunks(monkeypatch)
    s = plan.method().sampler(m, plan.schema, 1234, np.random.default_rng(5))
    assert isinstance(s, chunked.ChunkedSampler) and s.sizes == [246, 247, 247, 247, 247]
    pairs = {nm.attrs: nm for nm in m.measured if len(nm.attrs) >= 2}  # every k >= 2 table
    assert pairs
    got_pairs: dict = {a: 0.0 for a in pairs}
    got_ones: dict = {j: 0.0 for j in s.one_way}
    totals = 0.0
    for i in range(len(s.sizes)):
        mk, ones, total = s.shares(i, s.chunk_rng(i))
        for nm in mk.measured:
            got_pairs[nm.attrs] = got_pairs[nm.attrs] + nm.counts
            share = s.sizes[i] / 1234
            assert nm.stddev == pytest.approx(pairs[nm.attrs].stddev * share)
        for j, t in ones.items():
            got_ones[j] = got_ones[j] + t
        totals += total
    for a, nm in pairs.items():
        assert np.array_equal(got_pairs[a], nm.counts)  # integer counts: exactly
    for j, t in s.one_way.items():
        np.testing.assert_allclose(got_ones[j], t, rtol=0, atol=1e-9)
    assert totals == pytest.approx(s.total)


def test_same_bytes_whatever_chunk_rows(sds_measured, tmp_path, monkeypatch):
    """Chunks of 300 records, blocks of 100, writer chunks of 1, 97, 333 and all rows."""
    plan, m = sds_measured
    _small_chunks(monkeypatch)
    seen = []
    for chunk_rows in (1, 97, 333, 10_000):
        out = tmp_path / f"chunk-{chunk_rows}"
        out.mkdir()
        sampler = plan.method().sampler(m, plan.schema, 1234, plan.rng("synthesize"))
        assert isinstance(sampler, chunked.ChunkedSampler)
        written = write_synthetic(out, plan.schema, sampler, plan.rng("synthesize"), plan.rng("decode"),
                                  chunk_rows=chunk_rows, block_rows=100)
        assert written.rows == 1234
        seen.append(_digests(out))
    assert all(d == seen[0] for d in seen[1:])
    other = tmp_path / "other-seed"
    other.mkdir()
    sampler = plan.method().sampler(m, plan.schema, 1234, np.random.default_rng(99))
    write_synthetic(other, plan.schema, sampler, plan.rng("synthesize"), plan.rng("decode"), chunk_rows=97,
                    block_rows=100)
    assert _digests(other)["synthetic-codes.parquet"] != seen[0]["synthetic-codes.parquet"]


def test_chunks_differ_and_keep_the_one_way_tables(sds_measured, monkeypatch):
    plan, m = sds_measured
    _small_chunks(monkeypatch)
    s = plan.method().sampler(m, plan.schema, 1234, np.random.default_rng(5))
    codes = np.concatenate([s.sample(n, np.random.default_rng(0)) for n in (100, 500, 634)])
    assert codes.shape == (1234, len(plan.schema.columns))
    assert not np.array_equal(codes[:246], codes[246:492])  # each chunk its own draw
    with pytest.raises(ValueError, match="more than the release"):
        s.sample(1, np.random.default_rng(0))
    whole = plan.method().synthesize(m, plan.schema, 1234, np.random.default_rng(5)).codes
    for j, col in enumerate(plan.schema.columns):
        a = np.bincount(codes[:, j], minlength=col.cardinality) / 1234
        b = np.bincount(whole[:, j], minlength=col.cardinality) / 1234
        assert 0.5 * np.abs(a - b).sum() < 0.1, col.name


def test_one_chunk_is_the_whole_table_release(sds_measured):
    """At most one chunk of records: the sampler hands out synthesize's table (same bytes as
    before chunking; tests/test_release_digests.py pins the published files)."""
    plan, m = sds_measured
    s = plan.method().sampler(m, plan.schema, 1234, np.random.default_rng(5))
    assert isinstance(s, chunked.WholeTableSampler)
    whole = plan.method().synthesize(m, plan.schema, 1234, np.random.default_rng(5)).codes
    assert np.array_equal(s.sample(1234, np.random.default_rng(0)), whole)


def _wide(p: int = 20):
    return schema_from_dict({"name": "wide", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": [f"v{v}" for v in range(8)]} for j in range(p)]})


def test_the_footprint_check_reflects_the_chunk(monkeypatch):
    """10M x 20 with sds's defaults holds one chunk: accepted under the default 4 GiB (it
    was refused while sds held the whole table); a limit below one chunk refuses it, and
    the whole-table parameters (strict sampler) are refused as before."""
    monkeypatch.delenv("DPSYNTH_MAX_TABLE_BYTES", raising=False)
    schema = _wide()
    sds = SdsMethod()
    per_cell = METHODS["sds"].synthesis_bytes_per_cell
    chunk = sds.synthesis_chunk_rows(schema)
    assert chunk == chunked.chunk_rows_for(20)
    check_rows(10_000_000, schema, streams=True, bytes_per_cell=per_cell, chunk_rows=chunk)
    with pytest.raises(PrecheckError, match="holds the whole synthetic table"):
        check_rows(10_000_000, schema, bytes_per_cell=per_cell)  # what sds did before chunking
    assert SdsMethod(SdsParams(synthesis="strict")).synthesis_chunk_rows(schema) is None
    monkeypatch.setenv("DPSYNTH_MAX_TABLE_BYTES", str(chunk * 20 * per_cell - 1))
    with pytest.raises(PrecheckError, match=f"one synthesis chunk of {chunk} records"):
        check_rows(10_000_000, schema, streams=True, bytes_per_cell=per_cell, chunk_rows=chunk)
    check_rows(chunk // 2, schema, streams=True, bytes_per_cell=per_cell, chunk_rows=chunk)


def test_release_prepare_accepts_a_large_sds_release_and_refuses_strict(tmp_path, demo_paths, monkeypatch):
    """Before any charge: --rows 10M with sds's default chunked synthesis is accepted; the
    strict sampler holds the whole table and is refused."""
    data, schema_path = demo_paths
    monkeypatch.delenv("DPSYNTH_MAX_TABLE_BYTES", raising=False)
    base = dict(data=data, schema=schema_path, epsilon=1.0, rows=10_000_000, out=tmp_path / "out",
                workspace=tmp_path / "ws", method="sds")
    pipeline.prepare(pipeline.ReleaseConfig(**base))
    with pytest.raises(PrecheckError, match="holds the whole synthetic table"):
        pipeline.prepare(pipeline.ReleaseConfig(**base, params={"synthesis": "strict"}))
    assert load_schema(schema_path).columns


@pytest.mark.parametrize("chunks", [True, False])
def test_a_runner_gets_the_same_bytes_read_in_order(sds_measured, tmp_path, monkeypatch, chunks):
    """sds's samplers are read in order (``sequential``): with a process pool the stage
    writes them in this process, so the bytes equal the serial ones (a pool would have
    given each worker a copy starting at the first record)."""
    from dpsynth.pipeline.stages import synthesis_runner
    from dpsynth.rows.pool_runner import pool

    plan, m = sds_measured
    if chunks:
        _small_chunks(monkeypatch)
    seen = []
    for use_pool in (False, True):
        out = tmp_path / f"pool-{use_pool}"
        out.mkdir()
        sampler = plan.method().sampler(m, plan.schema, 1234, plan.rng("synthesize"))
        assert sampler.sequential
        with synthesis_runner(None, sampler) as chosen:
            assert chosen is None
        if use_pool:
            with pool(2) as runner:
                write_synthetic(out, plan.schema, sampler, plan.rng("synthesize"), plan.rng("decode"),
                                chunk_rows=97, block_rows=100, runner=runner, parts=3)
        else:
            write_synthetic(out, plan.schema, sampler, plan.rng("synthesize"), plan.rng("decode"),
                            chunk_rows=97, block_rows=100)
        seen.append(_digests(out))
    assert seen[0] == seen[1]


@pytest.mark.slow
def test_a_pair_the_sampler_misses_passes_the_gate_in_twenty_chunks(monkeypatch):
    """Defect (issue 25: 1,000,000 x 20 at epsilon 1, in 16 chunks, the gate refused 2-way
    marginals after the budget was spent): each chunk refitted its share of a pair only
    until its own misfit was what noise explains, but a sampler's bias recurs in every
    chunk, so the chunks' leftovers add up: 200,000 records in 21 chunks of a sampler that
    draws every column alone left the tied pair c0|c1 at 1.02 times its gate threshold.
    Each chunk now leaves its share of the allowance (``chunk_share``)."""
    from dpsynth.methods.sds import expand

    _small_chunks(monkeypatch, 10_000)
    monkeypatch.setattr(expand, "EXPAND_CHUNKS", 100)  # the chunked path (21 chunks), not the expanded one
    _, ratios = tied_pairs_ratios(monkeypatch, chunked.ChunkedSampler, chunks=21)
    assert max(ratios.values()) < 1.0, sorted(ratios.items(), key=lambda kv: -kv[1])[:3]
    assert ratios["c0|c1"] < 0.8 and ratios["c4|c5"] < 0.8


def test_a_planted_triple_passes_the_gate_in_chunks(monkeypatch):
    """Defect (sixteenth round, third part: int5, 200,000 x 14 in 4 chunks, refused at
    epsilon 2 and 4 with worst triples 1.18-1.79): a chunk's share carried the 2-way
    tables only, so the chunked release never fitted a measured 3-way table. Here c2 is
    c0 XOR c1 on 90% of 38,000 records (every pair independent, the triple far from it),
    drawn in 4 chunks by a sampler that draws every column alone: only the chunks' update
    against their share of the 3-way table can bring the triple within the gate."""
    from dpsynth.gate.checks import _marginal_checks
    from dpsynth.methods import get_method
    from dpsynth.methods.sds import expand
    from dpsynth.methods.sds import method as sds_method
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.encoding import EncodedTable

    rng = np.random.default_rng(7)
    n = 38_000
    schema = schema_from_dict({"name": "triple", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": ["a", "b"]} for j in range(5)]})
    codes = rng.integers(0, 2, size=(n, 5))
    codes[:, 2] = np.where(rng.random(n) < 0.9, codes[:, 0] ^ codes[:, 1], codes[:, 2])

    def independent(model, rows, params, g):
        return np.stack([g.choice(model.cards[j], size=rows, p=model.marginal(j) / model.marginal(j).sum())
                         for j in range(model.p)], axis=1).astype(np.int64)

    monkeypatch.setattr(sds_method, "_sample_complete", independent)
    _small_chunks(monkeypatch, 10_000)
    monkeypatch.setattr(expand, "EXPAND_CHUNKS", 100)  # the chunked path, not the expanded one
    method = get_method("sds", {})
    budget = Budget(epsilon=2.0, delta=1e-6)
    m = method.measure(EncodedTable(schema, codes.astype(np.uint8)), Ledger(budget, method.plan(schema, budget)),
                       np.random.default_rng(0))
    assert any(nm.attrs == ("c0", "c1", "c2") for nm in m.measured)
    sampler = method.sampler(m, schema, None, np.random.default_rng(1))
    assert isinstance(sampler, chunked.ChunkedSampler) and len(sampler.sizes) == 4
    out = sampler.sample(int(m.records.value), np.random.default_rng(2))
    gate = _marginal_checks(EncodedTable(schema, out.astype(np.uint8)), m, float(m.records.value), {})
    ratios = {e["marginal"]: e["tvd"] / e["threshold"] for e in gate.errors}
    assert ratios["c0|c1|c2"] < 1.0, sorted(ratios.items(), key=lambda kv: -kv[1])[:3]


def test_the_caller_says_whether_a_draw_is_a_chunk(sds_measured, monkeypatch):
    """A chunk's refit (its reweighting on :data:`CHUNK_REWEIGHT_LENGTHS` alone, the finishing
    update, then the 2-way update once more) is chosen by the caller of ``_draw_complete``,
    not by ``chunk_share`` in the measurement's meta: a chunk's share drawn with
    ``chunk=False`` takes the whole-table path, a whole measurement with ``chunk=True`` the
    chunk's; the chunked sampler's draw says chunk, ``synthesize`` does not. (Before, the
    meta key decided: ``_draw_complete`` took no ``chunk``.)"""
    from dpsynth.methods.sds import method as sds_method

    plan, m = sds_measured
    _small_chunks(monkeypatch)
    monkeypatch.setattr(sds_method, "REFIT_MODE", "finish")
    monkeypatch.setattr(sds_method, "CHUNK_REWEIGHT_LENGTHS", (2,))
    monkeypatch.setattr(sds_method, "CHUNK_PAIRS_AGAIN", True)
    calls: list[tuple[str, object]] = []
    # the refit's two steps, recorded with the tables they were told to fit (None: every k);
    # returning None leaves the drawn records as they are
    monkeypatch.setattr(sds_method, "honour_tables", lambda *a, **k: calls.append(("reweight", k.get("lengths"))))
    monkeypatch.setattr(sds_method, "update_tables", lambda *a, **k: calls.append(("update", k.get("lengths"))))
    method = plan.method()
    s = method.sampler(m, plan.schema, 1234, np.random.default_rng(5))
    assert isinstance(s, chunked.ChunkedSampler)
    model, targets, total = method._complete_model(m, plan.schema)
    mk, ones, tk = s.shares(0, s.chunk_rng(0))
    assert "chunk_share" in mk.meta and "chunk_share" not in m.meta

    def path(meas, one_way, tot, **kw) -> list[tuple[str, object]]:
        calls.clear()
        method._draw_complete(model, 50, meas, plan.schema, one_way, tot, np.random.default_rng(0), **kw)
        return list(calls)

    whole = [("reweight", None), ("update", None)]
    chunk = [("reweight", (2,)), ("update", None), ("update", (2,))]
    assert path(mk, ones, tk) == whole  # the default is the whole table, whatever the meta
    assert path(mk, ones, tk, chunk=False) == whole  # a share, drawn as a whole table
    assert path(m, targets, total, chunk=True) == chunk  # the whole measurement, drawn as a chunk
    assert path(m, targets, total) == whole and path(mk, ones, tk, chunk=True) == chunk

    calls.clear()  # the callers: each of the 5 chunks is drawn as a chunk ...
    fresh = method.sampler(m, plan.schema, 1234, np.random.default_rng(5))
    fresh.sample(1234, np.random.default_rng(0))
    assert calls == chunk * 5
    calls.clear()  # ... and synthesize draws the whole table
    method.synthesize(m, plan.schema, 1234, np.random.default_rng(0))
    assert calls == whole
