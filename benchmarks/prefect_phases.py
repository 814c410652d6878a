"""Where a Prefect-engine release's seconds go, phase by phase, on a running Prefect server.

Starts ``prefect server start`` on a free port (as ``make serve`` would run it), then runs the
demo release (data/demo.csv, the default method, epsilon 1) ``--repeat`` times through the CLI,
each in a fresh process whose stdout and stderr lines are stamped with the seconds since the
process started (wall, from /proc) and the process's CPU seconds (every thread: Prefect's
event, log and loop threads included; the gate worker is another process and is not counted).
The lines mark the phases:

* ``start-up``: the interpreter and the CLI's module, up to its first line;
* ``pipeline, checks``: the pipeline's imports, the solver, the public checks, the health check;
* ``Prefect import``: the flow module (Prefect's own import);
* with a temporary server (``--temporary``), ``encode (ahead)`` (the public checks of ``prepare``
  and the encode, done while it starts) and ``server ready`` (the wait for its first answer);
* ``flow start``: the client, the flow run's creation and its Running state, the run context;
* ``prepare``, each stage, and the gaps between stages (a task's engine and state changes);
* ``flow end``: after the last stage, the artifact and the final state, up to the published line;
* ``exit``: after the CLI's last line until the process is gone (Prefect's workers draining).

It also counts the HTTP requests the process sent (wrapping httpx's transports in the child
only) and, from the server afterwards, the events and log lines recorded for the run. Prints
a table and writes benchmarks/results/prefect_phases.json.

    python benchmarks/prefect_phases.py [--repeat N] [--temporary]

``--temporary``: no running server; each release starts the temporary server in a new
PREFECT_HOME (a first release: the template is in the cache, made by an untimed first run);
the server's own CPU is not in the CLI's column (``cpu_s_children`` is the CLI's with its children: the
server and the gate's worker).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULT = ROOT / "benchmarks" / "results" / "prefect_phases.json"

# (phase name, regular expression of the line that ends it), in order.
MARKS = [
    ("start-up", r"^loading the pipeline"),
    ("pipeline, checks", r"^(using the Prefect server|starting a temporary Prefect server)"),
    ("Prefect import", r"^dpsynth: method auto"),
    ("encode (ahead)", r"^encode: done in .*while the Prefect server starts"),  # a temporary server only
    ("server ready", r"^Prefect server ready"),  # the same
    ("flow start", r"^prepare: started"),
    ("prepare", r"^prepare: done"),
]


def _since_start() -> float:
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - float(fields[19]) / os.sysconf("SC_CLK_TCK")


class _Stamped:
    """A text stream that records each complete line with its wall and CPU seconds."""

    def __init__(self, stream, lines: list) -> None:
        self._stream, self._lines, self._part = stream, lines, ""

    def write(self, text: str) -> int:
        self._part += text
        while "\n" in self._part:
            line, self._part = self._part.split("\n", 1)
            for piece in line.split("\r"):
                if piece.strip():
                    self._lines.append((round(_since_start(), 3), round(time.process_time(), 3), piece[:120]))
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _child(cli_args: list[str], out: str) -> None:
    """Runs the CLI in this process with stamped output and counted HTTP requests."""
    import atexit
    import runpy

    lines: list = []
    requests: list = []
    sys.stdout, sys.stderr = _Stamped(sys.stdout, lines), _Stamped(sys.stderr, lines)

    def dump() -> None:
        Path(out).write_text(json.dumps({"lines": lines, "requests": requests,
                                         "atexit": [round(_since_start(), 3), round(time.process_time(), 3)]}))

    atexit.register(dump)  # registered first, so it runs after Prefect's own exit hooks
    import httpx  # imported by Prefect anyway; here ~0.05 s earlier than the CLI would

    def wrap(cls, name):
        original = getattr(cls, name)

        async def handle_async(self, request):
            t0 = time.monotonic()
            try:
                return await original(self, request)
            finally:
                requests.append([request.method, request.url.path, round(t0 - T0, 3), round(time.monotonic() - t0, 4)])

        def handle(self, request):
            t0 = time.monotonic()
            try:
                return original(self, request)
            finally:
                requests.append([request.method, request.url.path, round(t0 - T0, 3), round(time.monotonic() - t0, 4)])

        setattr(cls, name, handle_async if name.startswith("handle_async") else handle)

    T0 = time.monotonic() - _since_start()
    wrap(httpx.AsyncHTTPTransport, "handle_async_request")
    wrap(httpx.HTTPTransport, "handle_request")
    sys.argv = ["dpsynth", *cli_args]
    try:
        runpy.run_module("dpsynth", run_name="__main__")
    except SystemExit as exc:
        lines.append((round(_since_start(), 3), round(time.process_time(), 3), f"exit {exc.code}"))


def _phases(lines: list, exited_wall: float) -> dict[str, list[float]]:
    """(wall s, CPU s) per phase from the stamped lines."""
    out: dict[str, list[float]] = {}
    prev = (0.0, 0.0)

    def add(name: str, at: tuple) -> None:
        nonlocal prev
        out[name] = [round(at[0] - prev[0], 3), round(at[1] - prev[1], 3)]
        prev = at

    rest = list(lines)
    for name, pattern in MARKS:
        hit = next((ln for ln in rest if re.search(pattern, ln[2])), None)
        if hit is None:
            continue
        add(name, hit)
        rest = rest[rest.index(hit) + 1:]
    for ln in rest:
        started = re.match(r"^(\w+): started", ln[2])
        done = re.match(r"^(\w+): done in", ln[2])
        if started:
            add(f"before {started.group(1)}", ln)
        elif done:
            add(done.group(1), ln)
        elif ln[2].startswith("published"):
            add("flow end", ln)
    last = lines[-1]
    add("after the published line", last)
    out["exit"] = [round(exited_wall - last[0], 3), None]
    return out


def _run(tmp: Path, port: int, i: int, home: Path | None = None) -> dict:
    from prefect_overhead import DEMO, SCHEMA, _children_cpu, _env

    seed = tmp / "seed"
    seed.write_bytes(os.urandom(32))
    args = ["release", "--data", str(DEMO), "--schema", str(SCHEMA), "--epsilon", "1", "--seed-file", str(seed),
            "--out", str(tmp / "out"), "--workspace", str(tmp / f"ws{i}"), "--name", f"phases{i}"]
    out = tmp / f"child{i}.json"
    load = os.getloadavg()[0]
    t0, cpu0 = time.monotonic(), _children_cpu()
    proc = subprocess.run([sys.executable, __file__, "--child", str(out), "--", *args],
                          env=_env(home or tmp / "home", port), capture_output=True, text=True, cwd=ROOT)
    wall, cpu = time.monotonic() - t0, _children_cpu() - cpu0
    rec = json.loads(out.read_text())
    printed = re.search(r"stage work ([0-9.]+) s, start-up, imports and orchestration ([0-9.]+) s", proc.stdout)
    return {"exit": proc.returncode, "load_1min_before": round(load, 2), "wall_s": round(wall, 2),
            "cpu_s_at_exit_hooks": rec["atexit"][1], "cpu_s_children": round(cpu, 2),
            "stage_work_s": float(printed.group(1)) if printed else None,
            "overhead_s": float(printed.group(2)) if printed else None,
            "phases_wall_cpu_s": _phases(rec["lines"], rec["atexit"][0]),
            "http_requests": len(rec["requests"]), "requests": rec["requests"],
            "server_records": _server_records(port, f"phases{i}") if port else {}}


def _server_records(port: int, name: str) -> dict:
    """The events and log lines the server holds for the release's flow run."""
    import httpx

    api = f"http://127.0.0.1:{port}/api"
    with httpx.Client(base_url=api, timeout=30) as c:
        runs = c.post("/flow_runs/filter", json={"sort": "START_TIME_DESC", "limit": 10}).json()
        run = next((r for r in runs if r.get("parameters", {}).get("name") == name), None)
        if run is None:
            return {}
        logs = c.post("/logs/filter", json={"logs": {"flow_run_id": {"any_": [run["id"]]}}, "limit": 200}).json()
        deadline = time.monotonic() + 30  # the server's event services write them after the run
        while True:
            ev = c.post("/events/filter", json={"filter": {"any_resource": {"id": [f"prefect.flow-run.{run['id']}"]},
                                                           "occurred": {"since": run["created"]}}, "limit": 50}).json()
            if any(e["event"] == "prefect.flow-run.Completed" for e in ev.get("events", [])) \
                    or time.monotonic() > deadline:
                break
            time.sleep(1)
        task_runs = c.post("/task_runs/filter", json={"flow_runs": {"id": {"any_": [run["id"]]}}}).json()
    kinds: dict[str, int] = {}
    for e in ev.get("events", []):
        kinds[e["event"]] = kinds.get(e["event"], 0) + 1
    return {"log_lines": len(logs), "task_runs": len(task_runs), "events": ev.get("total"), "event_kinds": kinds}


def _cell(c: list | None) -> str:
    if c is None:
        return "-"
    return f"{c[0]:.3f} / " + ("-" if c[1] is None else f"{c[1]:.3f}")


def main() -> None:
    """Runs the releases on a running server and writes the result file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(RESULT))
    ap.add_argument("--port", type=int, help="a Prefect server already running on this port (default: start one)")
    ap.add_argument("--temporary", action="store_true", help="no running server: a first release's temporary one")
    ap.add_argument("--tree", help="the checkout whose CLI runs (default this one; e.g. main, to compare)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("cli", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args.cli, args.child)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import prefect_overhead
    from prefect_overhead import _running_server

    if args.tree:
        prefect_overhead.TREE = Path(args.tree).resolve()

    runs = []
    with tempfile.TemporaryDirectory(prefix="dpsynth-prefect-phases-") as t:
        tmp = Path(t)
        server, port = (None, args.port) if args.port or args.temporary else _running_server(tmp / "serve-home")
        try:
            if args.temporary:
                _run(tmp, 0, -1, tmp / "home-fill")  # untimed: fills the cache's template
            for i in range(args.repeat):
                runs.append(_run(tmp, port or 0, i, tmp / f"home{i}" if args.temporary else None))
        finally:
            if server is not None:
                os.killpg(server.pid, 15)
                server.wait(timeout=30)
    names = list(dict.fromkeys(k for r in runs for k in r["phases_wall_cpu_s"]))
    print(f"{'phase (wall s / CPU s)':<28}" + "".join(f"{'run ' + str(i + 1):>16}" for i in range(len(runs))))
    for n in names:
        cells = [r["phases_wall_cpu_s"].get(n) for r in runs]
        print(f"{n:<28}" + "".join(f"{_cell(c):>16}" for c in cells))
    for key in ("overhead_s", "stage_work_s", "wall_s", "cpu_s_children", "http_requests", "load_1min_before"):
        print(f"{key:<28}" + "".join(f"{str(r[key]):>16}" for r in runs))
    print("server records: " + "; ".join(json.dumps(r["server_records"]) for r in runs))
    commit = subprocess.run(["git", "-C", str(prefect_overhead.TREE), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    Path(args.out).write_text(json.dumps({"commit": commit, "cpus": os.cpu_count(), "runs": runs,
                                          "server": "temporary" if args.temporary else "running",
                                          "note": "CPU s are the CLI process's (every thread), not the gate "
                                                  "worker's nor the server's; cpu_s_children: all of them"},
                                         indent=2) + "\n")


if __name__ == "__main__":
    main()
