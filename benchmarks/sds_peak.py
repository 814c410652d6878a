"""Where the release's driver holds its peak: RSS sampled with the code running at that moment.

Runs one CLI release (``dpsynth.cli.main``, ``--engine local``) in this process on the raw
table that ``benchmarks/scale.py --keep-data`` left in ``--work`` (its ``raw-<rows>``
folder), with a thread that reads this process's resident memory every ``--every`` seconds
together with the main thread's stack (its ``dpsynth`` frames only). It reports, per stage
(the ``*_stage`` function on the stack) and per innermost ``dpsynth`` function, the largest
RSS seen while it ran and the stack at that moment: what runs when the peak is reached, and
what grows between a 1M and a 10M release. The gate worker (a forked child) is not sampled.

    python benchmarks/sds_peak.py --rows 1000000 --work /tmp/sds-peak-scale --label before

Writes ``benchmarks/results/sds_peak.json`` (cells merged by rows and label).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import RESULTS, print_table, write_json  # noqa: E402


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _stack(frame) -> list[str]:
    """The ``dpsynth`` frames of a stack, outermost first, as ``module:function:line``."""
    out = []
    while frame is not None:
        path = frame.f_code.co_filename
        if "/dpsynth/" in path:
            mod = path.split("/dpsynth/", 1)[1].removesuffix(".py").replace("/", ".")
            out.append(f"{mod}:{frame.f_code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return out[::-1]


class Sampler(threading.Thread):
    """Samples RSS and the main thread's stack; keeps per stage and per function the peak."""

    def __init__(self, every: float) -> None:
        super().__init__(daemon=True)
        self.every, self.main = every, threading.main_thread().ident
        self.stop = threading.Event()
        self.by_stage: dict[str, tuple[float, list[str]]] = {}
        self.by_function: dict[str, tuple[float, list[str]]] = {}
        self.timeline: list[tuple[float, float, str]] = []
        self.t0 = time.perf_counter()

    def run(self) -> None:
        last, kept = None, 0.0
        while not self.stop.wait(self.every):
            rss = _rss_mb()
            frame = sys._current_frames().get(self.main)
            stack = _stack(frame) if frame is not None else []
            stages = [s.split(":")[1] for s in stack if s.split(":")[1].endswith("_stage")]
            stage = stages[-1] if stages else "other"
            fn = ":".join(stack[-1].split(":")[:2]) if stack else "other"
            for table, key in ((self.by_stage, stage), (self.by_function, fn)):
                if rss > table.get(key, (0.0, []))[0]:
                    table[key] = (rss, stack)
            if fn != last and abs(rss - kept) >= 10:  # a function change with 10 MB moved since the last entry
                self.timeline.append((round(time.perf_counter() - self.t0, 2), round(rss), fn))
                last, kept = fn, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--work", default="/tmp/sds-peak-scale")
    ap.add_argument("--method", default="sds")
    ap.add_argument("--label", default="")
    ap.add_argument("--every", type=float, default=0.05)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scale import schema  # the benchmark's table

    from dpsynth.cli import main as cli

    work = Path(args.work)
    data = work / f"raw-{args.rows}"
    scratch = work / f"peak-{args.rows}-{args.method}-{args.label or 'x'}"
    import shutil

    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    (scratch / "schema.yaml").write_text(schema().to_yaml())
    (scratch / "seed").write_bytes(b"scale-benchmark-seed-not-secret")
    argv = ["release", "--engine", "local", "--data", str(data), "--schema", str(scratch / "schema.yaml"),
            "--method", args.method, "--epsilon", "1", "--out", str(scratch / "out"), "--workspace",
            str(scratch / "ws"), "--seed-file", str(scratch / "seed"), "--name", "scale", "--quiet"]
    sampler = Sampler(args.every)
    sampler.start()
    t0, c0 = time.perf_counter(), time.process_time()
    rc = cli(argv)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    sampler.stop.set()
    sampler.join()
    print(f"rc {rc}, {wall:.1f} s wall, {cpu:.1f} CPU s (this process), load {os.getloadavg()[0]:.2f}")
    print_table(["stage", "peak MB", "innermost frames at the peak"],
                [(k, round(v[0]), " < ".join(reversed(v[1][-4:]))) for k, v in sampler.by_stage.items()])
    top = sorted(sampler.by_function.items(), key=lambda kv: -kv[1][0])[: args.top]
    print_table(["function", "peak MB"], [(k, round(v[0])) for k, v in top])
    cell = {"rows": args.rows, "label": args.label, "method": args.method, "rc": rc, "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "load": os.getloadavg()[0],
            "by_stage": {k: {"peak_mb": round(v[0]), "stack": v[1]} for k, v in sampler.by_stage.items()},
            "by_function": {k: round(v[0]) for k, v in top}, "timeline": sampler.timeline}
    path = RESULTS / "sds_peak.json"
    cells = json.loads(path.read_text())["results"] if path.exists() else []
    cells = [c for c in cells if (c["rows"], c["label"], c["method"]) != (args.rows, args.label, args.method)]
    write_json("sds_peak", {"results": [*cells, cell]})
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
