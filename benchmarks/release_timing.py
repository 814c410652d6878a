"""Wall time of a CLI release, split into stage work and orchestration overhead.

For each dataset (the bundled demo table; NIST national2019 when ../shared/data is
present) the same release runs three ways, each as a fresh `dpsynth release` process:

* local: the stages in-process, no Prefect;
* prefect-ephemeral: a Prefect flow with no API configured, so Prefect starts a
  temporary server inside the command (the cost a one-off CLI user pays);
* prefect-server: a Prefect flow against a long-running `prefect server start`
  (PREFECT_API_URL set): what a repeated or scheduled user pays.

Stage work is the sum of the manifest's stage timings; the rest of the wall time is
interpreter start-up, imports and orchestration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import SHARED_DATA, print_table, write_json  # noqa: E402

BIN = Path(sys.executable).parent
PORT = 4297


def _release(data: Path, schema: Path, out: Path, ws: Path, engine: str, env: dict) -> dict:
    cmd = [str(BIN / "dpsynth"), "release", "--data", str(data), "--schema", str(schema), "--method", "marginals",
           "--epsilon", "1", "--out", str(out), "--workspace", str(ws), "--engine", engine, "--name", "r"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"release failed ({engine}): {proc.stderr.strip().splitlines()[-1:]}")
    manifest = json.loads((out / "r" / "manifest.json").read_text())
    t = manifest["timings"]
    work = sum(v for k, v in t.items() if k != "orchestration")
    return {"wall_s": wall, "stage_work_s": work, "overhead_s": wall - work,
            **{f"{k}_s": v for k, v in t.items()}}


def _start_server(env: dict) -> subprocess.Popen:
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(PORT)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/api/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SystemExit("prefect server did not start within 120 s")


def main() -> None:
    datasets = [("demo", ROOT / "data" / "demo.csv", ROOT / "schemas" / "demo.yaml")]
    nist = SHARED_DATA / "nist" / "national2019.csv"
    if nist.exists():
        datasets.append(("national2019", nist, ROOT / "schemas" / "nist.yaml"))
    results, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        base_env = {**os.environ, "PREFECT_HOME": str(Path(tmp) / "prefect-home"),
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        base_env.pop("PREFECT_API_URL", None)
        server = _start_server(base_env)
        try:
            for engine, env in (("local", base_env), ("prefect-ephemeral", base_env),
                                ("prefect-server", {**base_env, "PREFECT_API_URL": f"http://127.0.0.1:{PORT}/api"})):
                for label, data, schema in datasets:
                    run_dir = Path(tempfile.mkdtemp(dir=tmp))
                    r = _release(data, schema, run_dir / "out", run_dir / "ws",
                                 "local" if engine == "local" else "prefect", env)
                    results.append({"dataset": label, "engine": engine, **r})
                    rows.append([label, engine, r["wall_s"], r["stage_work_s"], r["overhead_s"],
                                 r["encode_s"], r["measure_s"], r["synthesize_s"], r["validate_s"], r["publish_s"]])
        finally:
            server.terminate()
            server.wait(timeout=30)
    print_table(["dataset", "engine", "wall s", "stages s", "overhead s", "encode", "measure", "synth",
                 "validate", "publish"], rows)
    write_json("release_timing", {"method": "marginals", "epsilon": 1.0, "results": results})


if __name__ == "__main__":
    main()
