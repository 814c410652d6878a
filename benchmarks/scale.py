"""Scale: encode + sds measure + pgm measure on 1M, 10M, 100M rows x 20 columns.

For each size, a synthetic raw table (10 categorical columns with 2-12 categories, unseen
values and nulls; 10 numeric columns with NaN and out-of-range values) is generated in
pieces and streamed to a Parquet dataset on local disk (files of 1M rows, row groups of
``--chunk-rows``), never held whole in memory. Each mode then runs in a fresh process:

* ``serial``: partitions one after the other in that process (the default path);
* ``dask``: a Dask LocalCluster of 2 single-threaded worker processes, started first
  (its start-up time is reported apart).

Phases: encode (raw -> Parquet codes, :func:`dpsynth.rows.encode_parts.encode_to_parts`),
sds measure (default parameters), pgm measure (MST), all at epsilon 1 with a fixed seed;
the measurements of both modes are compared by digest (they must be equal). The parent
samples the resident memory of the run's process and every descendant (Dask workers)
every 0.1 s and reports each one's peak and the peak of their sum.

    python benchmarks/scale.py --rows 1000000,10000000
    python benchmarks/scale.py --rows 100000000 --modes serial    # one locked run each

Whole releases (``--modes release-pgm,release-sds``, issue 25; ``release-sds+noguard``: sds's
pre-spend guard off, to measure what it refuses; ``release-sds+noguard.nopass``: the expanded
release's last pass off too): the CLI's ``dpsynth release
--engine local`` from the raw Parquet folder through encode, measure, synthesize (streamed
to Parquet and CSV), validate (the gate worker, a child process), publish and report, at
epsilon 1 with a fixed seed, in a fresh process under ``nice``. Wall time, the manifest's
stage timings and the peak resident memory of the whole process tree (the CLI process
plus the gate worker, sampled every 0.1 s; their sum's peak is the figure that counts).
The load average is recorded per cell: the machine is shared.

    python benchmarks/scale.py --rows 1000000,10000000 --modes release-pgm,release-sds

A mode ending ``+internal`` (``release-pgm+internal``) adds ``--internal-report``: the data
owner's private page, counted from the real codes and the synthetic table chunk by chunk
(its stage time is the ``internal`` column).

``release-<method>-dask`` runs the same release with ``--dask-address local:2`` (encode,
measure and synthesize on a LocalCluster of two worker processes).

Each process of a release is named by its role (``driver``: the CLI process, holding a
LocalCluster's scheduler and nannies; ``dask-worker-N`` with a Dask address, else
``pool-worker-N``, the local synthesize pool's; ``gate``: the gate worker forked from the
CLI) and its peak is kept per stage (``peak_rss_mb.by_stage``: the stage is the last
``<stage>: started`` line of the CLI) with its CPU seconds. ``SCALE_LIVE_PEAKS=file`` writes
the peaks so far to ``file`` every ~10 s. Without it, synthesize
draws and writes a table of 16 blocks or more on a pool of this machine's cores.

A release mode may end in ``@label`` (kept in its cell's name); ``@seed-<x>`` also changes the
release's seed, so ``release-auto@seed-1`` is another noise draw of the default release.

Results merge into benchmarks/results/scale.json by (rows, mode).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import RESULTS, print_table, write_json  # noqa: E402

CAT, NUM, FILE_ROWS = 10, 10, 1_000_000
DEFAULT_CHUNK = 1 << 20  # the library default


def schema():
    from dpsynth.schema import schema_from_dict

    cols = []
    for j in range(CAT):
        k = 2 + j % 11
        cols.append({"name": f"c{j}", "type": "categorical", "values": [f"v{i}" for i in range(k)],
                     "other": j % 2 == 0, "missing": [""]})
    for j in range(NUM):
        cols.append({"name": f"x{j}", "type": "numeric", "bounds": [0, 1000], "bins": 16, "missing": ["NA"]})
    return schema_from_dict({"name": "scale", "columns": cols})


def _piece(rows: int, rng: np.random.Generator):
    import pyarrow as pa

    data = {}
    z = rng.integers(0, 4, rows)  # a shared factor: the columns are correlated
    for j in range(CAT):
        k = 2 + j % 11
        words = pa.array([f"v{i}" for i in range(k)] + ["unseen"])
        idx = np.where(rng.random(rows) < 0.7, z % k, rng.integers(0, k + 1, rows)).astype(np.int32)
        nulls = rng.random(rows) < 0.01
        data[f"c{j}"] = pa.DictionaryArray.from_arrays(pa.array(idx, mask=nulls), words)
    for j in range(NUM):
        v = (rng.normal(250 * (z % 4), 200, rows)).round(1)
        v[rng.random(rows) < 0.05] = np.nan
        data[f"x{j}"] = pa.array(v)
    return pa.table(data)


def generate(rows: int, folder: Path, chunk_rows: int) -> float:
    """Streams ``rows`` rows to ``folder`` as Parquet files of FILE_ROWS rows; returns seconds."""
    import pyarrow.parquet as pq

    if (folder / "COMPLETE").exists():
        return 0.0
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    rng = np.random.default_rng(2026)
    for i, start in enumerate(range(0, rows, FILE_ROWS)):
        piece = _piece(min(FILE_ROWS, rows - start), rng)
        pq.write_table(piece, folder / f"part-{i:05d}.parquet", row_group_size=chunk_rows, compression="zstd")
    (folder / "COMPLETE").write_text("")  # not a .parquet file: never read as data
    return time.perf_counter() - t0


def _digest(m) -> str:
    h = hashlib.sha256()
    for nm in m.measured:
        h.update(repr(nm.attrs).encode() + np.ascontiguousarray(nm.counts, dtype=np.float64).tobytes())
    if m.records is not None:
        h.update(repr(m.records.value).encode())
    return h.hexdigest()[:16]


def child(args: argparse.Namespace) -> None:
    """One run in this process: prints one JSON line."""
    from contextlib import nullcontext

    from dpsynth.rows.encode_parts import encode_to_parts
    from dpsynth.methods import get_method
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.rowsource import SerialRunner

    sch = schema()
    out: dict = {"rows": args.rows, "mode": args.mode}
    t0 = time.perf_counter()
    if args.mode == "dask":
        from dpsynth.rows.dask_runner import connect

        ctx = connect("local:2")
    else:
        ctx = nullcontext(SerialRunner())
    with ctx as runner:
        out["cluster_start_s"] = round(time.perf_counter() - t0, 3)
        codes = Path(args.codes)
        shutil.rmtree(codes, ignore_errors=True)
        t = time.perf_counter()
        src = encode_to_parts(args.data, sch, codes, chunk_rows=args.chunk_rows, runner=runner)
        out["encode_s"] = round(time.perf_counter() - t, 3)
        print("PHASE " + json.dumps({"encode_s": out["encode_s"]}), flush=True)
        out["partitions"] = len(src.parts)
        assert src.rows == args.rows, (src.rows, args.rows)
        for name, params in (("sds", {}), ("pgm", {"select": "mst"})):
            method = get_method(name, params)
            budget = Budget(epsilon=1.0, delta=1e-6)
            ledger = Ledger(budget, method.plan(sch, budget))
            t = time.perf_counter()
            m = method.measure(src, ledger, np.random.default_rng(7))
            out[f"{name}_measure_s"] = round(time.perf_counter() - t, 3)
            out[f"{name}_digest"] = _digest(m)
            print("PHASE " + json.dumps({f"{name}_measure_s": out[f"{name}_measure_s"]}), flush=True)
        shutil.rmtree(codes, ignore_errors=True)
    print("RESULT " + json.dumps(out), flush=True)


def _role(p, root_pid: int, spawned: str = "dask-worker") -> str:
    """What a process of the run's tree is, from its command line: the driver (the CLI
    process, which also holds a LocalCluster's scheduler and nannies), a spawned worker
    (``spawned``: a Dask worker, spawned by a nanny, or a worker of the local synthesize
    pool), the gate worker, or another helper."""
    if p.pid == root_pid:
        return "driver"
    try:
        cmd = " ".join(p.cmdline())
        # a child that is not yet exec'd has its parent's command line too: wait 2 s for it
        forked = p.ppid() == root_pid and p.cmdline() == p.parent().cmdline() and time.time() - p.create_time() > 2
    except Exception:  # noqa: BLE001 (psutil.Error; gone)
        return "other"
    if forked:  # the gate worker is forked from the CLI process (dpsynth.gate.worker)
        return "gate"
    if "resource_tracker" in cmd:
        return "mp-tracker"
    if "spawn_main" in cmd or "multiprocessing.spawn" in cmd or "forkserver" in cmd:
        return spawned
    if "dpsynth.gate" in cmd or "gate_worker" in cmd or " -c " in f" {cmd} ":
        return "gate"
    return "other"


class _Sampler:
    """Samples the run's process tree every 0.1 s: each process's resident memory, its peak
    per stage (the stage is the last ``<stage>: started`` line the CLI printed), named by
    role (driver, dask-worker-1.., gate, ...)."""

    def __init__(self, spawned: str = "dask-worker") -> None:
        self.spawned = spawned  # what a spawned process is in this run: "dask-worker" or "pool-worker"
        self.stage = "start"
        self.peaks: dict = {}
        self.by_stage: dict = {}
        self.names: dict = {}
        self.cpu: dict = {}
        self.samples = 0
        self.live = os.environ.get("SCALE_LIVE_PEAKS")  # a file to write the peaks to as they go

    def name(self, p, root_pid: int) -> str:
        """A stable name for ``p``: its role, numbered in order of appearance."""
        if p.pid not in self.names:
            role = _role(p, root_pid, self.spawned)
            if role == "other":  # e.g. forked, not yet exec'd: named when it is known
                return "other"
            n = sum(1 for v in self.names.values() if v.rsplit("-", 1)[0] == role) + 1
            self.names[p.pid] = role if role in ("driver", "gate") and n == 1 else f"{role}-{n}"
        return self.names[p.pid]

    def run(self, proc, stop: threading.Event) -> None:
        """Until ``stop``: one sample every 0.1 s."""
        import psutil

        root = psutil.Process(proc.pid)
        while not stop.is_set():
            total = 0
            try:
                procs = [root] + root.children(recursive=True)
            except psutil.Error:
                break
            stage = self.by_stage.setdefault(self.stage, {})
            for p in procs:
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                label = self.name(p, root.pid)
                self.peaks[label] = max(self.peaks.get(label, 0), rss)
                try:
                    t = p.cpu_times()
                    self.cpu[label] = t.user + t.system
                except psutil.Error:
                    pass
                stage[label] = max(stage.get(label, 0), rss)
            self.peaks["sum"] = max(self.peaks.get("sum", 0), total)
            stage["sum"] = max(stage.get("sum", 0), total)
            self.samples += 1
            if self.live and self.samples % 100 == 0:  # a long run's peaks so far, every ~10 s
                Path(self.live).write_text(json.dumps({"stage": self.stage, "by_stage": self.by_stage,
                                                       "cpu": self.cpu, "at": time.strftime("%H:%M:%S")}))
            stop.wait(0.1)

    def follow(self, stream, lines: list) -> None:
        """Reads the CLI's stderr line by line, noting each stage's start."""
        for line in stream:
            lines.append(line)
            head, sep, rest = line.strip().partition(": ")
            if sep and rest.startswith("started") and " " not in head:
                self.stage = head


def _children_cpu() -> float:
    """User + system seconds of every waited-for descendant (the run, and its gate worker,
    which the run waits for)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _release_cmd(rows: int, mode: str, data: Path, work: Path) -> tuple[list[str], Path]:
    """The CLI release of ``mode`` (release-<method>) and its scratch folder."""
    scratch = work / f"release-{rows}-{mode}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    (scratch / "schema.yaml").write_text(schema().to_yaml())
    base, _, label = mode.partition("@")
    # a label "seed-..." draws another noise: held-out draws of a rule set on the default seed
    (scratch / "seed").write_bytes(b"scale-benchmark-seed-not-secret" + (label.encode() if label.startswith("seed") else b""))
    method, _, extra = base.split("-")[1].partition("+")
    cmd = ["nice", sys.executable, "-m", "dpsynth.cli", "release", "--engine", "local", "--data", str(data),
           "--schema", str(scratch / "schema.yaml"), "--method", method, "--epsilon", "1",
           "--out", str(scratch / "out"), "--workspace", str(scratch / "ws"), "--seed-file", str(scratch / "seed"),
           "--name", "scale", *(["--internal-report"] if extra == "internal" else [])]
    if base.endswith("-dask"):  # release-<method>-dask: encode, measure and synthesize on a LocalCluster
        cmd += ["--dask-address", "local:2"]
    if extra == "noguard":  # release-sds+noguard: sds's pre-spend guard off (a measurement, never the product)
        cmd[2:4] = ["-c", _NO_GUARD]
    if extra == "noguard.nopass":  # ... and the expanded release's last pass off (main before session 40)
        cmd[2:4] = ["-c", _NO_GUARD.replace("from dpsynth.cli", _NO_PASS + "from dpsynth.cli")]
    return cmd, scratch


#: The CLI with sds's expanded-release floor at 0: what the guard would let through if it did not refuse.
_NO_GUARD = ("import sys; import dpsynth.methods.sds.guard as g; g.MIN_PAIR_THRESHOLD_EXPANDED = 0.0; "
             "from dpsynth.cli import main; sys.exit(main(sys.argv[1:]))")
#: ... and with sds's last pass off (expand.LAST_PASS): the expanded release as it was before the
#: pass ran on pools the update leaves alone (docs/sds-generalisation.md, seventeenth round, second part).
_NO_PASS = "import dpsynth.methods.sds.expand as e; e.LAST_PASS = False; "


def _release_result(res: dict, scratch: Path, stdout: str, stderr: str) -> None:
    """The manifest's stage timings and rows into ``res``; the error's last line if it failed."""
    manifest = scratch / "out" / "scale" / "manifest.json"
    if manifest.exists():
        m = json.loads(manifest.read_text())
        res["stages_s"] = {k: round(float(v), 2) for k, v in m.get("timings", {}).items()}
        res["synthetic_rows"] = m.get("rows")
        res["published"] = True
        res["validation"] = m.get("validation", {}).get("success")
    else:
        res["published"] = False
        lines = [x for x in (stderr or "").splitlines() if x.strip()]
        res["refusal"] = lines[-1][:400] if lines else ""
    _gate_and_fit(res, scratch)


def _gate_and_fit(res: dict, scratch: Path) -> None:
    """The gate's worst marginal TVD / its threshold per k (from validation.json, also kept in the
    private workspace when the gate refused) and the released fit's record (steps taken)."""
    found = sorted(scratch.glob("**/validation.json"))
    if found:
        errors = json.loads(found[0].read_text()).get("marginal_errors", [])
        for k in sorted({e["k"] for e in errors}):
            worst = max((e for e in errors if e["k"] == k), key=lambda e: e["tvd"] / e["threshold"])
            res[f"worst_k{k}"] = {"ratio": round(worst["tvd"] / worst["threshold"], 4), "tvd": worst["tvd"],
                                  "threshold": worst["threshold"], "marginal": worst["marginal"]}
            of_k = [e["tvd"] / e["threshold"] for e in errors if e["k"] == k]  # every table's, not only the worst
            res[f"mean_ratio_k{k}"] = round(sum(of_k) / len(of_k), 4)
    fits = sorted(scratch.glob("**/fit.json"))
    manifest = scratch / "out" / "scale" / "manifest.json"
    if manifest.exists():
        fit = json.loads(manifest.read_text()).get("synthesis", {}).get("fit")
    else:
        fit = json.loads(fits[0].read_text()) if fits else None
    if fit is not None:
        res["fit"] = fit


def run_one(rows: int, mode: str, data: Path, work: Path, chunk_rows: int, limit: float) -> dict:
    codes = work / f"codes-{rows}-{mode}"
    scratch = None
    if mode.startswith("release-"):
        cmd, scratch = _release_cmd(rows, mode, data, work)
    else:
        cmd = [sys.executable, __file__, "--child", "--rows", str(rows), "--mode", mode, "--data", str(data),
               "--codes", str(codes), "--chunk-rows", str(chunk_rows)]
    sampler_ = _Sampler("dask-worker" if "dask" in mode else "pool-worker")
    stop = threading.Event()
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    cpu_before = _children_cpu()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE if scratch else None, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    sampler = threading.Thread(target=sampler_.run, args=(proc, stop), daemon=True)
    sampler.start()
    err_lines: list = []
    reader = None
    if scratch is not None:
        reader = threading.Thread(target=sampler_.follow, args=(proc.stderr, err_lines), daemon=True)
        reader.start()
    out_lines: list = []
    out_reader = threading.Thread(target=lambda: out_lines.extend(proc.stdout), daemon=True)
    out_reader.start()
    try:
        proc.wait(timeout=limit)
        error = None if proc.returncode == 0 else f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)  # the run and its Dask workers: a session of their own
        proc.wait()
        error = f"stopped at the time limit of {limit:.0f} s"
    for t in (out_reader, reader):
        if t is not None:
            t.join(timeout=10)
    stdout, stderr = "".join(out_lines), "".join(err_lines)
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    peaks = sampler_.peaks
    shutil.rmtree(codes, ignore_errors=True)
    res: dict = {"rows": rows, "mode": mode}
    for line in stdout.splitlines():
        if line.startswith(("PHASE ", "RESULT ")):
            res.update(json.loads(line.split(" ", 1)[1]))
    mb = 1 << 20
    # "other": a child seen before it exec'd (it shows its parent's memory), not a process of its own
    workers = {k: v for k, v in peaks.items() if k not in ("driver", "sum", "other")}
    res["process_wall_s"] = round(wall, 3)
    res["cpu_s"] = round(_children_cpu() - cpu_before, 1)  # user + system of the run's process tree
    res["cpu_s_by_process"] = {k: round(v, 1) for k, v in sorted(sampler_.cpu.items())}  # at the last sample
    res["loadavg_before"] = [round(x, 2) for x in load_before]
    res["peak_rss_mb"] = {"driver": round(peaks.get("driver", 0) / mb),
                          "workers": sorted(round(v / mb) for v in workers.values()),
                          "all_processes_sum": round(peaks.get("sum", 0) / mb),
                          "by_process": {k: round(v / mb) for k, v in sorted(peaks.items())},
                          "by_stage": {st: {k: round(v / mb) for k, v in sorted(d.items())}
                                       for st, d in sampler_.by_stage.items()}}
    if scratch is not None:
        _release_result(res, scratch, stdout, stderr)
        shutil.rmtree(scratch, ignore_errors=True)
        if error is not None:
            res["error"] = error
        return res
    if error is not None:
        res["error"] = error
        return res
    work_s = res["encode_s"] + res["sds_measure_s"] + res["pgm_measure_s"]
    res.update({"encode_plus_measure_s": round(work_s, 3), "rows_per_s": round(rows / work_s)})
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1000000,10000000")
    ap.add_argument("--modes", default="serial,dask")
    ap.add_argument("--work", default="/tmp/dpsynth-scale")
    ap.add_argument("--chunk-rows", type=int, default=DEFAULT_CHUNK)
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--time-limit", type=float, default=1200.0, help="seconds per mode run (then stopped)")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--mode")
    ap.add_argument("--data")
    ap.add_argument("--codes")
    args = ap.parse_args()
    if args.child:
        args.rows = int(args.rows)
        child(args)
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "scale.json"
    old = json.loads(path.read_text()).get("results", []) if path.exists() else []
    results = {(r["rows"], r["mode"]): r for r in old}
    for rows in (int(x) for x in args.rows.split(",")):
        data = work / f"raw-{rows}"
        gen_s = generate(rows, data, args.chunk_rows)
        disk = sum(f.stat().st_size for f in data.glob("*.parquet")) / 1e9
        for mode in args.modes.split(","):
            res = run_one(rows, mode, data, work, args.chunk_rows, args.time_limit)
            res.update({"generate_s": round(gen_s, 1), "raw_parquet_gb": round(disk, 2),
                        "chunk_rows": args.chunk_rows, "loadavg": list(os.getloadavg()),
                        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            results[(rows, mode)] = res
            print(json.dumps(res), flush=True)
        if not args.keep_data:
            shutil.rmtree(data, ignore_errors=True)
    ordered = sorted(results.values(), key=lambda r: (r["rows"], r["mode"]))
    _release_table([r for r in ordered if r["mode"].startswith("release-")])
    ordered_measure = [r for r in ordered if not r["mode"].startswith("release-")]
    headers = ["rows", "mode", "encode s", "sds s", "pgm s", "total s", "rows/s", "driver MB", "worker MB",
               "sum MB", "same"]
    table = []
    for r in ordered_measure:
        if "error" in r:
            pk = r["peak_rss_mb"]
            table.append([r["rows"], r["mode"], r.get("encode_s", ""), r.get("sds_measure_s", ""),
                          r.get("pgm_measure_s", ""), r["error"], "", pk["driver"], max(pk["workers"], default=0),
                          pk["all_processes_sum"], ""])
            continue
        other = results.get((r["rows"], "serial"))
        same = "" if other is None or "error" in other else str(
            other["sds_digest"] == r["sds_digest"] and other["pgm_digest"] == r["pgm_digest"])
        pk = r["peak_rss_mb"]
        table.append([r["rows"], r["mode"], r["encode_s"], r["sds_measure_s"], r["pgm_measure_s"],
                      r["encode_plus_measure_s"], r["rows_per_s"], pk["driver"], max(pk["workers"], default=0),
                      pk["all_processes_sum"], same])
    print_table(headers, table)
    write_json("scale", {"columns": CAT + NUM, "targets": {"10M_encode_plus_measure_s": 60, "peak_mb": 2048,
                                                           "10M_release_default_s": 120, "10M_release_sds_s": 300,
                                                           "release_peak_mb": 2048},
                         "results": ordered})


def _release_table(rows: list[dict]) -> None:
    """Whole releases: wall, stages, peak RSS of the process tree, published or not, load."""
    headers = ["rows", "mode", "wall s", "CPU s", "encode", "measure", "synth", "validate", "internal", "publish",
               "peak MB (tree)", "CLI MB", "gate MB", "k2 TVD/thr", "fit steps", "published", "load"]
    table = []
    for r in rows:
        st, pk = r.get("stages_s", {}), r["peak_rss_mb"]
        table.append([r["rows"], r["mode"], r["process_wall_s"], r.get("cpu_s", ""), st.get("encode", ""), st.get("measure", ""),
                      st.get("synthesize", ""), st.get("validate", ""), st.get("internal_report", ""),
                      st.get("publish", ""),
                      pk["all_processes_sum"], pk["driver"], max(pk["workers"], default=0),
                      r.get("worst_k2", {}).get("ratio", ""), r.get("fit", {}).get("steps", ""),
                      "yes" if r.get("published") else "NO: " + (r.get("error") or r.get("refusal", ""))[:60],
                      r.get("loadavg_before", [""])[0]])
    if table:
        print_table(headers, table)


if __name__ == "__main__":
    main()
