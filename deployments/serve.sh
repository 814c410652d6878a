#!/usr/bin/env bash
# Scheduled releases on this machine in one command: a Prefect server on 127.0.0.1, the
# process work pool `local`, the deployments of deployments/prefect.yaml, a worker, and the
# warm release worker (python -m dpsynth.warm: a `dpsynth release` on the Prefect engine
# hands its run to a child forked from it, skipping the pipeline's and Prefect's imports;
# DPSYNTH_WARM=off in a release's environment turns the hand-off off).
#
#   deployments/serve.sh start    # idempotent; prints the API URL (the dashboard's on stderr)
#   deployments/serve.sh status   # up or down
#   deployments/serve.sh url      # the API URL if the server answers (exit 1 otherwise)
#   deployments/serve.sh stop     # stops the warm worker, the worker and the server this script started
#
# Settings (environment): DPSYNTH_PREFECT_PORT (default 4200), DPSYNTH_HOME (the folder the
# deployments run in: data, schemas, releases; default the repository), PREFECT_HOME.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${DPSYNTH_BIN:-$root/.venv/bin}
port=${DPSYNTH_PREFECT_PORT:-4200}
url="http://127.0.0.1:${port}/api"
export PREFECT_HOME=${PREFECT_HOME:-$root/.prefect}
export DPSYNTH_HOME=${DPSYNTH_HOME:-$root}
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_UI_ENABLED=true  # the dashboard: Prefect's run links point at it
state="$PREFECT_HOME/serve-$port"
mkdir -p "$state"

answers() {
  "$bin/python" - "$url" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/health", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

started_here() {  # a pid file whose process still runs
  [ -f "$state/$1.pid" ] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null
}

launch() {  # name, command...: in its own session, so stop can end the whole group
  local name=$1; shift
  setsid "$@" >"$state/$name.log" 2>&1 < /dev/null &
  echo $! >"$state/$name.pid"
}

start() {
  for d in data schemas flows; do  # the deployments run in DPSYNTH_HOME: refuse a home they cannot run in
    [ -e "$DPSYNTH_HOME/$d" ] || { echo "serve: DPSYNTH_HOME=$DPSYNTH_HOME has no $d/ (set it to the folder holding data/, schemas/ and flows/)" >&2; exit 2; }
  done
  if ! answers; then
    launch server "$bin/prefect" server start --host 127.0.0.1 --port "$port" --analytics-off
    for _ in $(seq 1 240); do answers && break; sleep 0.5; done
    answers || { echo "serve: the Prefect server did not answer on $url; see $state/server.log" >&2; exit 1; }
  fi
  if ! started_here warm; then  # the environment a release has (the CLI finds the server by its port)
    (cd "$state" && launch warm env -u PREFECT_API_URL -u PREFECT_UI_ENABLED DPSYNTH_PREFECT_PORT="$port" \
        "$bin/python" -m dpsynth.warm --socket "$state/warm/sock")
  fi
  export PREFECT_API_URL=$url
  "$bin/prefect" --no-prompt work-pool create local --type process >/dev/null 2>&1 || true
  (cd "$root" && "$bin/prefect" --no-prompt deploy --prefect-file deployments/prefect.yaml --all \
      >"$state/deploy.log" 2>&1) || { echo "serve: deploy failed; see $state/deploy.log" >&2; exit 1; }
  if ! started_here worker; then
    launch worker "$bin/prefect" worker start --pool local
  fi
  echo "serve: dashboard http://127.0.0.1:${port}/ (server, work pool local, deployments, worker, warm release worker running)" >&2
  echo "$url"
}

stop() {
  for name in warm worker server; do
    if started_here "$name"; then
      kill -TERM -- "-$(cat "$state/$name.pid")" 2>/dev/null || true
      for _ in $(seq 1 40); do started_here "$name" || break; sleep 0.25; done
      started_here "$name" && kill -KILL -- "-$(cat "$state/$name.pid")" 2>/dev/null || true
    fi
    rm -f "$state/$name.pid"
  done
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) if answers; then echo "up $url"; else echo "down"; fi ;;
  url) answers && echo "$url" ;;
  *) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
