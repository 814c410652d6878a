"""Where the validate and publish stages spend their time, part by part.

Runs a local release's stages in-process on the 8,000 x 20 generated table (sds,
epsilon 1) up to synthesize, then times the parts of validate and publish one by one,
each in the order a release pays them (so an import is paid by the first part using
it): Great Expectations' import, the gate's plan, an ephemeral context, both suites,
a file context plus Data Docs, matplotlib's import, the report (plots included), and
publishing (copy, fsync, hash). With ``--cprofile`` the GE suite run is also profiled
and its top functions printed.

Run in a fresh interpreter (imports are part of what it measures)::

    flock /work/wt/bench.lock python benchmarks/gate_profile.py [--cprofile]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import print_table, write_json  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cprofile", action="store_true")
    p.add_argument("--label", default="now")
    args = p.parse_args()
    parts: list[tuple[str, float]] = []

    def timed(label, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        parts.append((label, time.perf_counter() - t0))
        return out

    import pandas as pd

    from benchmarks.release_timing import gen_table
    from dpsynth import pipeline as pl
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.gate import checks as gchecks
    from dpsynth.gate import ge as gge
    from dpsynth.measurement import Measurement

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data, schema = gen_table(tmp / "gen")
        config = pl.ReleaseConfig(data=data, schema=schema, method="sds", epsilon=1.0, out=tmp / "out",
                                  workspace=tmp / "ws", name="r")
        plan = timed("prepare", pl.prepare, config)
        codes_path = timed("encode", pl.encode_stage, data, plan.schema, config.workspace, plan.data_sha256)
        mdir = timed("measure", pl.measure_stage, plan, codes_path, pl.charge_dataset(plan).draw)
        sdir = timed("synthesize", pl.synthesize_stage, plan, mdir)

        m = Measurement.load(mdir)
        codes = EncodedTable.from_parquet(sdir / "synthetic-codes.parquet", plan.schema)
        table = pd.read_parquet(sdir / "synthetic.parquet")
        timed("import great_expectations", __import__, "great_expectations")
        gplan = timed("gate plan (prepare checks)", gchecks.prepare, table, codes, m, None, None)
        old_api = hasattr(gge, "_context")  # main before issue 14 item 3
        if old_api:
            ctx = timed("ephemeral context", gge._context)

            def run_suites():
                return gge._run_suites(ctx, gplan)
        else:
            from dpsynth.gate import session

            timed("ephemeral context + warm-up run", session.warm_up)

            def run_suites():
                return gge._run_suites(gplan)
        if args.cprofile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
        results = timed("both suites (first run)", run_suites)
        if args.cprofile:
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        timed("summary", gge._summarise, gplan, results)
        if old_api:
            timed("both suites (second run, new context)", lambda: gge._run_suites(gge._context(), gplan))
        else:
            timed("both suites (second run, same context)", run_suites)
        # Data Docs: file context, same suites, render.
        docs_dir = tmp / "docs"

        def docs() -> None:
            from dpsynth.gate.docs import _render_docs

            with tempfile.TemporaryDirectory(prefix="dpsynth-gx-") as gx_tmp:
                if old_api:
                    fctx = gge._context(Path(gx_tmp))
                    gge._run_suites(fctx, gplan)
                else:
                    fctx = session.context(gx_tmp)
                    gge._run_stored(fctx, gplan, "profile")
                _render_docs(fctx, gplan, docs_dir)

        timed("Data Docs (file context, suites, render)", docs)
        docs_bytes = sum(f.stat().st_size for f in docs_dir.rglob("*") if f.is_file())
        summary = timed("validate_stage (whole, warm)", pl.validate_stage, plan, sdir, mdir)
        from dpsynth.methods.guidance import assess

        timed("small-sample guard (assess)", assess, m, plan.schema)
        import dpsynth.report as report_module

        if "matplotlib" in Path(report_module.__file__).read_text():
            timed("import matplotlib (Figure, Agg)", lambda: __import__("matplotlib.backends.backend_agg"))
        build_report = report_module.build_report

        manifest = {"name": "r", "privacy": {}, "timings": {}}
        html = timed("report.html (build_report)", build_report, manifest, plan.schema, codes, m, summary)
        timed("publish_stage (whole, warm)", pl.publish_stage, plan, mdir, sdir, summary, {}, None)
        release_bytes = sum(f.stat().st_size for f in (tmp / "out" / "r").rglob("*") if f.is_file())
    print_table(["part", "seconds"], [[k, v] for k, v in parts])
    print(f"Data Docs {docs_bytes / 1e6:.2f} MB; report.html {len(html) / 1e6:.2f} MB; release {release_bytes / 1e6:.2f} MB")
    write_json(f"gate_profile-{args.label}", {"parts": dict(parts), "data_docs_bytes": docs_bytes,
                                               "report_bytes": len(html), "release_bytes": release_bytes,
                                               "expectations": len(gplan.checks), "loadavg": list(os.getloadavg())})


if __name__ == "__main__":
    main()
