"""Validate and publish of a whole release, part by part: CPU seconds, peak memory, profiles.

Two steps. ``keep`` runs the CLI release of ``benchmarks/scale.py`` (its 20-column table,
``--engine local``, epsilon 1, its fixed seed) into a folder that is kept: the private
workspace (measurement, synthetic codes, validation.json) and the published folder::

    python benchmarks/gate_scale.py keep --rows 1000000 --method sds --work /tmp/gate-scale-keep

``parts`` then runs, in a fresh process per part (imports and warm-up not counted), what
validate and publish do with that release's files:

* ``validate``: the gate's work in its worker (:func:`dpsynth.pipeline.gate_stage.gate_files`:
  the scan of the synthetic Parquet files and the GE run), after GE's warm-up as in a release;
  its summary is compared byte for byte with the kept ``validation.json``;
* ``validate-pool``: the same on the local engine's path for a large table: the scan on a
  pool of this machine's cores (``$DPSYNTH_SYNTH_WORKERS``, started inside the part: a
  release reuses synthesize's), merged here, then the GE run on the merged scan; its CPU
  seconds include the pool workers' (``cpu_s_children``), its peak theirs (summed);
* ``report``: publish's report (the synthetic marginal counts read from the codes, then
  :func:`dpsynth.report.build_report` on the kept manifest and the summary of the validate
  part, which must run first), compared with the kept ``report.html``;
* ``hash``: publish's flush and hash of every published file, compared with the manifest's hashes.

Each part reports its CPU seconds (``time.process_time``), wall seconds, the process's
resident memory before and its peak during the part (sampled every 10 ms) and, with
``--cprofile``, the top functions by own and by cumulative time::

    python benchmarks/gate_scale.py parts --release /tmp/gate-scale-keep/sds-1000000 --cprofile
    python benchmarks/gate_scale.py parts --release ... --tree /work/main --label before   # another tree

``repeat`` writes a copy of a kept release whose synthetic table is its table N times over
(``<release>x<N>``): the gate and the report at N times the rows, with the small release's
measurement (its outputs then differ from the kept ones: compare trees with ``--tree``)::

    python benchmarks/gate_scale.py repeat --release /tmp/gate-scale-keep/sds-1000000 --times 10

Results: benchmarks/results/gate_scale.json (merged by release, part and label).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the code tree whose dpsynth the parts run (``parts --tree``: another checkout, to compare)
TREE = Path(os.environ.get("GATE_SCALE_TREE", str(ROOT)))
sys.path.insert(0, str(TREE))

PARTS = ("validate", "report", "hash")  # and "validate-pool", asked for by name


def _keep(rows: int, method: str, work: Path) -> Path:
    """The release of ``scale.py`` kept whole in ``work/<method>-<rows>``."""
    import shutil

    from benchmarks.scale import DEFAULT_CHUNK, _release_cmd, generate

    data = work / f"raw-{rows}"
    generate(rows, data, DEFAULT_CHUNK)
    cmd, scratch = _release_cmd(rows, f"release-{method}", data, work)
    target = work / f"{method}-{rows}"
    shutil.rmtree(target, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    print(f"release in {time.perf_counter() - t0:.1f} s", flush=True)
    scratch.rename(target)
    return target


def _repeat(release: Path, times: int) -> Path:
    """A copy of a kept release whose synthetic table is its table ``times`` over (same row
    groups, same measurement): the gate and the report at ``times`` the rows, without a
    release of that size. Its validation.json and report.html stay the small release's."""
    import shutil

    import pyarrow.parquet as pq

    f = _folders(release)
    target = release.parent / f"{release.name}x{times}"
    rel = target / "ws" / "releases" / f["release"].name
    (rel / "synthetic").mkdir(parents=True, exist_ok=True)
    (target / "out" / "scale").mkdir(parents=True, exist_ok=True)
    shutil.copy(release / "schema.yaml", target / "schema.yaml")
    if not (rel / "measurement").exists():
        (rel / "measurement").symlink_to(f["measurement"].resolve())
    shutil.copy(f["release"] / "validation.json", rel / "validation.json")
    for name in ("manifest.json", "report.html"):
        shutil.copy(f["out"] / name, target / "out" / "scale" / name)
    for src, dst in ((f["synthetic"] / "synthetic-codes.parquet", rel / "synthetic" / "synthetic-codes.parquet"),
                     (f["out"] / "synthetic.parquet", target / "out" / "scale" / "synthetic.parquet")):
        pf = pq.ParquetFile(str(src))
        with pq.ParquetWriter(str(dst), pf.schema_arrow, compression="zstd") as w:
            for _ in range(times):
                for g in range(pf.metadata.num_row_groups):
                    w.write_table(pf.read_row_group(g))
    return target


def _folders(release: Path) -> dict[str, Path]:
    """The kept release's folders, and a synthetic folder pointing at the published files."""
    (rel,) = (p for p in (release / "ws" / "releases").iterdir() if (p / "validation.json").is_file())
    out = release / "out" / "scale"
    synth = release / "synthetic-view"
    synth.mkdir(exist_ok=True)
    for name, src in (("synthetic-codes.parquet", rel / "synthetic" / "synthetic-codes.parquet"),
                      ("synthetic.parquet", out / "synthetic.parquet")):
        link = synth / name
        if not link.exists():
            link.symlink_to(src)
    return {"release": rel, "measurement": rel / "measurement", "synthetic": synth, "out": out}


class _Peak:
    """The resident memory of the process and its children (a pool's workers) summed,
    sampled every 10 ms in a thread."""

    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.peak = self._rss()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _rss(self) -> int:
        import psutil

        total = self.proc.memory_info().rss
        for child in self.proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:  # gone meanwhile
                pass
        return total

    def _run(self) -> None:
        while not self.stop.wait(0.01):
            self.peak = max(self.peak, self._rss())

    def done(self) -> int:
        self.stop.set()
        self.thread.join()
        return max(self.peak, self._rss())


def _part(part: str, release: Path, cprofile: bool, top: int) -> dict:
    """One part in this process: its figures, and whether its output matched the kept one."""
    import cProfile
    import io
    import pstats

    from dpsynth.measurement import Measurement
    from dpsynth.pipeline.gate_stage import gate_files
    from dpsynth.rows.rowsource import DEFAULT_CHUNK_ROWS
    from dpsynth.schema import load_schema

    f = _folders(release)
    schema = load_schema(release / "schema.yaml")
    manifest = json.loads((f["out"] / "manifest.json").read_text())
    if part == "validate":
        from dpsynth.gate.session import warm_up
        from dpsynth.pipeline import gate_stage as gs
        from dpsynth.pipeline.stages import write_atomic

        counted = getattr(gs, "_gate_files_counted", None)
        warm_up()

        def work():
            if counted is None:  # a tree before the gate kept its counts for the report
                summary = gate_files(schema, f["synthetic"], f["measurement"], None, None, None, "scale",
                                     chunk_rows=DEFAULT_CHUNK_ROWS)
            else:  # what validate_stage does: the gate, then its counts kept beside validation.json
                summary, counts = counted(schema, f["synthetic"], f["measurement"], None, None, None, "scale",
                                          chunk_rows=DEFAULT_CHUNK_ROWS)
                write_atomic(f["release"] / gs.COUNTS_FILE, gs._counts_bytes(counts, gs._codes_digests(f["synthetic"])))
            # the summary as the release hands it to the report (its keys in the gate's order)
            (release / "gate-summary.pickle").write_bytes(pickle.dumps(summary))
            return json.dumps(summary, indent=2, sort_keys=True) + "\n" == (f["release"] / "validation.json").read_text()
    elif part == "validate-pool":
        from dpsynth.gate.session import warm_up
        from dpsynth.pipeline import gate_stage as gs
        from dpsynth.pipeline.cluster import scan_runner
        from dpsynth.pipeline.stages import write_atomic

        warm_up()

        def work():  # what validate_stage does without a Dask address, for a large table
            rows = gs.synthetic_rows(f["synthetic"])
            with scan_runner(rows) as runner:
                assert runner is not None, "no pool: a small table or one worker"
                part_rows = min(DEFAULT_CHUNK_ROWS, -(-rows // int(runner.workers)))
                found = gs.scan_synthetic(schema, f["synthetic"], f["measurement"], part_rows, runner)
            summary, counts = gs._gate_scan_counted(found, f["measurement"], None, None, None, "scale")
            write_atomic(f["release"] / gs.COUNTS_FILE, gs._counts_bytes(counts, gs._codes_digests(f["synthetic"])))
            return json.dumps(summary, indent=2, sort_keys=True) + "\n" == (f["release"] / "validation.json").read_text()
    elif part == "report":
        from dpsynth.gate.scan import CodeCounts
        from dpsynth.report import build_report

        import dpsynth.report.plots  # noqa: F401 - matplotlib-free, but imported before the clock

        shown = {k: v for k, v in manifest.items() if k != "files"}
        shown["timings"] = {k: v for k, v in manifest["timings"].items() if k != "publish"}
        validation = pickle.loads((release / "gate-summary.pickle").read_bytes())  # from the validate part
        sizes = {rel: (f["out"] / rel).stat().st_size for rel in manifest["files"] if (f["out"] / rel).is_file()}
        sizes["data-docs"] = 0  # never asked for by the benchmark release
        sizes.pop("data-docs")
        sizes.pop("report.html", None)

        from dpsynth.pipeline import gate_stage as gs

        def work():
            m = Measurement.load(f["measurement"])
            if hasattr(gs, "synthetic_counts"):  # the gate's counts when it kept them (as publish_stage)
                counts = gs.synthetic_counts(schema, f["synthetic"], m, DEFAULT_CHUNK_ROWS, f["release"])
            else:
                counts = CodeCounts.of_file([f["synthetic"] / "synthetic-codes.parquet"], schema, m,
                                            DEFAULT_CHUNK_ROWS)
            html = build_report(shown, schema, counts, m, validation, files=sizes)
            return html == (f["out"] / "report.html").read_text(encoding="utf-8")
    else:
        from dpsynth.publish.bundle import _flushed_hashes

        names = sorted(manifest["files"])

        def work():
            return _flushed_hashes(f["out"], names) == manifest["files"]

    prof = cProfile.Profile() if cprofile else None
    peak = _Peak()
    rss0 = peak.peak
    c0, w0, k0 = time.process_time(), time.perf_counter(), sum(os.times()[2:4])
    if prof:
        prof.enable()
    same = work()
    if prof:
        prof.disable()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    children = sum(os.times()[2:4]) - k0  # the pool's workers, reaped when it shut down
    cell = {"part": part, "cpu_s": round(cpu + children, 2), "cpu_s_children": round(children, 2),
            "wall_s": round(wall, 2), "rss_before_mb": rss0 >> 20,
            "peak_mb": peak.done() >> 20, "same_output": bool(same), "loadavg": round(os.getloadavg()[0], 2)}
    if prof:
        for key, label in (("tottime", "top_own"), ("cumulative", "top_cumulative")):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)
            cell[label] = [ln for ln in buf.getvalue().splitlines() if ln.strip()][-top:]
    return cell


def _parts(args) -> None:
    from benchmarks._common import write_json

    release = Path(args.release).resolve()
    cells = []
    for part in args.parts.split(","):
        cmd = [sys.executable, "-u", __file__, "child", "--release", str(release), "--part", part,
               "--top", str(args.top), *(["--cprofile"] if args.cprofile else [])]
        tree = str(Path(args.tree).resolve()) if args.tree else str(ROOT)
        out = subprocess.run(["nice", "-n", "10", *cmd], check=True, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": tree, "GATE_SCALE_TREE": tree}).stdout
        cell = json.loads(out.strip().splitlines()[-1])
        cell.update(release=release.name, label=args.label)
        cells.append(cell)
        print(f"{release.name} {part}: cpu {cell['cpu_s']} s, wall {cell['wall_s']} s, rss before "
              f"{cell['rss_before_mb']} MB, peak {cell['peak_mb']} MB, same output {cell['same_output']}, "
              f"load {cell['loadavg']}", flush=True)
        for label in ("top_own", "top_cumulative"):
            if label in cell:
                print(f"  {label}:\n    " + "\n    ".join(cell[label]), flush=True)
    path = ROOT / "benchmarks" / "results" / "gate_scale.json"
    old = json.loads(path.read_text())["results"] if path.exists() else []
    keys = {(c["release"], c["part"], c["label"]) for c in cells}
    write_json("gate_scale", {"results": [c for c in old if (c["release"], c["part"], c["label"]) not in keys]
                              + cells})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keep")
    k.add_argument("--rows", type=int, default=1_000_000)
    k.add_argument("--method", default="sds")
    k.add_argument("--work", default="/tmp/gate-scale-keep")
    r = sub.add_parser("repeat")
    r.add_argument("--release", required=True)
    r.add_argument("--times", type=int, default=10)
    p = sub.add_parser("parts")
    p.add_argument("--release", required=True)
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--label", default="now")
    p.add_argument("--tree", help="another checkout whose dpsynth the parts run (default: this one)")
    p.add_argument("--cprofile", action="store_true")
    p.add_argument("--top", type=int, default=25)
    c = sub.add_parser("child")
    c.add_argument("--release", required=True)
    c.add_argument("--part", required=True)
    c.add_argument("--cprofile", action="store_true")
    c.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.cmd == "keep":
        work = Path(args.work)
        work.mkdir(parents=True, exist_ok=True)
        print(_keep(args.rows, args.method, work))
    elif args.cmd == "repeat":
        print(_repeat(Path(args.release).resolve(), args.times))
    elif args.cmd == "parts":
        _parts(args)
    else:
        print(json.dumps(_part(args.part, Path(args.release), args.cprofile, args.top)))


if __name__ == "__main__":
    main()
