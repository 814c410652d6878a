"""What the Prefect engine costs over the stage work, and how fast a public error is refused.

Runs the demo release (data/demo.csv, the default method, epsilon 1) through the CLI as a
user would, each in a fresh process and a fresh private workspace:

* ``local``: ``--engine local`` (the reference: the same stages, no Prefect);
* ``prefect first, no template``: the Prefect engine with a new PREFECT_HOME and an empty
  user cache (a first release without ``make install``'s template: the template is made from
  the shipped schema when it matches the installed Prefect, else the temporary server creates
  and migrates its database, which is then kept as the template);
* ``prefect first, template``: another new PREFECT_HOME, the template now in the cache (its
  database is a copy: a first release after ``make install``);
* ``prefect second``: that PREFECT_HOME again (its database exists);
* ``prefect running``: with a Prefect server already running (``prefect server start``
  on a free port, found as ``make serve``'s would be, through DPSYNTH_PREFECT_PORT), the
  release in the CLI's process (``DPSYNTH_WARM=off``);
* ``prefect warm worker`` (with ``--cells running``): the same server and ``make serve``'s warm
  release worker beside it, the release run in a child forked from it;

and three public errors (an unknown method, a bad parameter, a missing column) on both
engines. Every cell records the wall time, the CPU seconds of the CLI and its children
(the steadier figure on a shared machine), the stage work and the overhead the CLI prints,
and the load average before it, and for each Prefect release its wall time over the mean of
the local engine's (what a user waits for the Prefect engine; the gate's worker imports Great
Expectations beside both, so the overhead column can shrink while the wall does not). Prints a
table and writes benchmarks/results/prefect_overhead.json.

    python benchmarks/prefect_overhead.py [--repeat N] [--cells local,first,second,running,errors]

One target at a time (the local engine runs whenever a Prefect release cell does, for the
comparison; a second release needs the first's PREFECT_HOME): ``--cells running`` (a running
server), ``--cells first`` (a first release with the temporary server, both first-release cells,
``--repeat`` pairs of them, each pair from an empty cache), ``--cells errors`` (the public errors).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "prefect_overhead.json"
DEMO, SCHEMA = ROOT / "data" / "demo.csv", ROOT / "schemas" / "demo.yaml"


TREE = ROOT  # the checkout whose CLI runs (--tree: compare with another, e.g. before a change)


def _env(prefect_home: Path, port: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DPSYNTH_"))}
    env.update(PYTHONPATH=str(TREE), PREFECT_HOME=str(prefect_home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               DPSYNTH_PREFECT_PORT=str(port or 0), XDG_CACHE_HOME=str(prefect_home.parent / "cache"))
    if port and not (TREE / "dpsynth" / "orchestration" / "server.py").exists():
        env["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"  # a checkout that does not look for it
    return env


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(args: list[str], env: dict[str, str]) -> dict:
    """One CLI run: wall, CPU (this process's waited-for children), exit code, its figures."""
    load = os.getloadavg()[0]
    cpu0, t0 = _children_cpu(), time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "dpsynth", *args], env=env, capture_output=True, text=True,
                          cwd=TREE)
    cell = {"wall_s": round(time.monotonic() - t0, 2), "cpu_s": round(_children_cpu() - cpu0, 2),
            "exit": proc.returncode, "load_1min_before": round(load, 2)}
    printed = re.search(r"stage work ([0-9.]+) s, start-up, imports and orchestration ([0-9.]+) s", proc.stdout)
    if printed:
        cell.update(stage_work_s=float(printed.group(1)), overhead_s=float(printed.group(2)))
    ready = re.search(r"Prefect (?:server ready|engine ready in) ([0-9.]+) s", proc.stderr)
    if ready:
        cell["server_ready_after_launch_s"] = float(ready.group(1))
    cell["server"] = ("temporary" if "temporary Prefect server" in proc.stderr else
                      "running" if "Prefect server running at" in proc.stderr else None)
    if proc.returncode != 0:
        cell["error"] = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    return cell


def _release(tmp: Path, name: str, engine: str, *extra: str) -> list[str]:
    seed = tmp / "seed"
    if not seed.exists():
        seed.write_bytes(os.urandom(32))
    return ["release", "--data", str(DEMO), "--schema", str(SCHEMA), "--epsilon", "1", "--seed-file", str(seed),
            "--out", str(tmp / "out"), "--workspace", str(tmp / f"ws-{name}"), "--name", name,
            "--engine", engine, *extra]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _running_server(home: Path) -> tuple[subprocess.Popen, int]:
    """``prefect server start`` on a free port, as ``make serve`` runs it; waits until it answers."""
    from dpsynth.orchestration.server import answers

    port = _free_port()
    env = _env(home, None)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                             "--port", str(port), "--analytics-off"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 180
    while not answers(f"http://127.0.0.1:{port}/api") and time.monotonic() < deadline:
        time.sleep(0.5)
    return proc, port


def _missing_column(tmp: Path) -> Path:
    lines = DEMO.read_text().splitlines()
    cut = tmp / "missing-column.csv"
    cut.write_text("\n".join(",".join(line.split(",")[:-1]) for line in lines) + "\n")
    return cut


def _errors(tmp: Path, env: dict[str, str]) -> dict:
    cases = {"unknown method": ("--method", "pgmm"), "bad parameter": ("--method", "pgm", "--param", "select=tree"),
             "missing column": ("--data", str(_missing_column(tmp)))}
    out = {}
    for label, extra in cases.items():
        for engine in ("local", "prefect"):
            args = _release(tmp, f"err-{engine}", engine)
            if extra[0] == "--data":
                args[args.index("--data") + 1] = extra[1]
            else:
                args += list(extra)
            out[f"{label}, {engine}"] = _run(args, env)
    return out


def main() -> None:
    """Runs every cell and writes the result file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs of each release cell (default 1)")
    ap.add_argument("--tree", default=str(ROOT), help="the checkout to run (default this one)")
    ap.add_argument("--out", default=str(RESULT), help=f"result file (default {RESULT.relative_to(ROOT)})")
    ap.add_argument("--cells", default=",".join(CELLS), help=f"which cells, comma-separated (default all: {','.join(CELLS)})")
    args = ap.parse_args()
    global TREE
    TREE = Path(args.tree).resolve()
    chosen = _chosen(args.cells)
    with tempfile.TemporaryDirectory(prefix="dpsynth-prefect-overhead-") as t:
        cells = _cells(Path(t), chosen, args.repeat)
    _over_local(cells)
    result = {"tree": str(TREE), "commit": _commit(), "cells": cells, "cpus": os.cpu_count(), "python": sys.version.split()[0],
              "note": "2-core machine shared with other jobs: wall times are noisy, cpu_s is the steadier figure; "
                      "overhead_s = the CLI's wall minus the stage work it reports; over_local_wall_s = the "
                      "release's wall minus the mean wall of the local engine's runs"}
    keys = ["wall_s", "cpu_s", "stage_work_s", "overhead_s", "over_local_wall_s", "server_ready_after_launch_s", "exit",
            "load_1min_before"]
    print(f"{'cell':<36}" + "".join(f"{k.rsplit('_s', 1)[0][:12]:>14}" for k in keys))
    for name, cell in cells.items():
        print(f"{name:<36}" + "".join(f"{str(cell.get(k, '-')):>14}" for k in keys))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


CELLS = ("local", "first", "second", "running", "errors")


def _chosen(text: str) -> set[str]:
    chosen = {c.strip() for c in text.split(",") if c.strip()}
    unknown = chosen - set(CELLS)
    if unknown:
        raise SystemExit(f"--cells: unknown {sorted(unknown)}; choose from {','.join(CELLS)}")
    if "second" in chosen:
        chosen.add("first")  # a second release is on the first one's PREFECT_HOME
    if chosen & {"first", "second", "running"}:
        chosen.add("local")  # the reference of over_local_wall_s
    return chosen


def _cells(tmp: Path, chosen: set[str], repeat: int) -> dict[str, dict]:
    """Runs the chosen cells in the order of a user's first day (local, first, second, running)."""
    cells: dict[str, dict] = {}
    home = tmp / "prefect-home"
    env = _env(home, None)
    for i in range(repeat if "local" in chosen else 0):
        cells[f"local #{i + 1}"] = _run(_release(tmp, f"local{i}", "local"), env)
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(tmp / "cache", ignore_errors=True)
    for i in range(repeat if "first" in chosen else 0):  # each with an empty cache, then a new home beside it
        tag = f" #{i + 1}" if i else ""  # the first pair keeps the names of the runs before --repeat applied here
        shutil.rmtree(tmp / "cache", ignore_errors=True)
        cells[f"prefect first (new PREFECT_HOME, no template){tag}"] = _run(
            _release(tmp, f"first{i}", "prefect"), _env(tmp / f"cold-home{i}", None))
        cells[f"prefect first (new PREFECT_HOME, template){tag}"] = _run(
            _release(tmp, f"first-t{i}", "prefect"), env if i == 0 else _env(tmp / f"prefect-home{i}", None))
    for i in range(repeat if "second" in chosen else 0):
        cells[f"prefect second #{i + 1}"] = _run(_release(tmp, f"second{i}", "prefect"), env)
    if "running" in chosen:
        server, port = _running_server(tmp / "serve-home")
        try:
            for i in range(repeat):
                cells[f"prefect running server #{i + 1}"] = _run(_release(tmp, f"running{i}", "prefect"),
                                                                 {**_env(home, port), "DPSYNTH_WARM": "off"})
            if (TREE / "dpsynth" / "warm.py").exists():
                cells.update(_warm_cells(tmp, home, port, repeat))
        finally:
            os.killpg(server.pid, 15)
            server.wait(timeout=30)
    if "errors" in chosen:
        cells.update(_errors(tmp, env))
    return cells


def _warm_cells(tmp: Path, home: Path, port: int, repeat: int) -> dict[str, dict]:
    """The same release with `make serve`'s warm worker (``python -m dpsynth.warm``) beside the server:
    the CLI hands the run to a child forked from it. ``cpu_s`` adds the child's CPU (from the
    worker's log) to the CLI's; the worker's own start-up is not counted (paid once per serve)."""
    env = _env(home, port)
    sock = home / f"serve-{port}" / "warm" / "sock"
    log = tmp / "warm.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "dpsynth.warm", "--socket", str(sock)], env=env, cwd=tmp,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    cells = {}
    try:
        deadline = time.monotonic() + 120
        while not sock.exists() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        for i in range(repeat):
            seen = len(re.findall(r"cpu ([0-9.]+) s", log.read_text()))
            cell = _run(_release(tmp, f"warm{i}", "prefect"), env)
            child = re.findall(r"cpu ([0-9.]+) s peak (\d+) MB", log.read_text())[seen:]
            cell["handed_to_warm_worker"] = bool(child)
            if child:
                cell.update(cli_cpu_s=cell["cpu_s"], child_cpu_s=float(child[0][0]), child_peak_mb=int(child[0][1]),
                            cpu_s=round(cell["cpu_s"] + float(child[0][0]), 2))
            cells[f"prefect warm worker #{i + 1}"] = cell
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(timeout=30)
    return cells


def _over_local(cells: dict[str, dict]) -> None:
    """Adds each Prefect release's wall over the mean wall of the local engine's releases."""
    local = [c["wall_s"] for name, c in cells.items() if name.startswith("local") and c.get("exit") == 0]
    if not local:
        return
    mean = sum(local) / len(local)
    for name, cell in cells.items():
        if name.startswith("prefect") and cell.get("exit") == 0:
            cell["over_local_wall_s"] = round(cell["wall_s"] - mean, 2)


def _commit() -> str:
    return subprocess.run(["git", "-C", str(TREE), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


if __name__ == "__main__":
    main()
