#!/usr/bin/env bash
# One command for everything:
#   ./run.sh          set up (first time) and run Redis, the generator, the Spark job and the dashboard
#                     (Procfile); the dashboard is at http://127.0.0.1:${PORT:-8501}
#   DEMO=off ./run.sh the same on your own events: no generator (Procfile.production, docs/ingest.md)
#   ./run.sh test     set up (first time) and run the test suite
#   ./run.sh setup    only set up
set -euo pipefail
cd "$(dirname "$0")"

# Python 3.11 or newer; Java 17 or newer (Spark 4 runs on 17 and 21).
PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    command -v "$candidate" >/dev/null 2>&1 && { PYTHON=$candidate; break; }
  done
fi
if [ -z "$PYTHON" ] || ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' 2>/dev/null; then
  echo "error: Python 3.11 or newer is required (found: ${PYTHON:-none}${PYTHON:+ $("$PYTHON" -V 2>&1)})" >&2
  exit 1
fi
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1) || true
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  echo "error: Java 17 or newer is required for Spark (found: ${java_major:-none}); on Debian:" \
       "apt-get install openjdk-17-jre-headless" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  echo "setting up .venv with $("$PYTHON" -V 2>&1) (first run only)"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "installing requirements.txt into .venv (PySpark is large: about a minute the first time)"
  .venv/bin/python -m pip install -q --upgrade pip
  # One line a package as pip collects it, not 50 silent seconds; its errors in full.
  { .venv/bin/python -m pip install -r requirements.txt 2>&1; echo "pip exit $?"; } | while IFS= read -r line; do
    case $line in
      "pip exit 0") ;;
      "pip exit "*) echo "error: pip install -r requirements.txt failed" >&2; exit 1 ;;
      Collecting*|Successfully\ installed*|ERROR*|error*) echo "  $line" ;;
    esac
  done
  # The project itself, editable: its commands (wm-job, wm-replay, ...) and imports without PYTHONPATH.
  echo "  installing the project itself (pip install -e .)"
  out=$(.venv/bin/python -m pip install -q --no-deps -e . 2>&1) \
    || { echo "$out" >&2; echo "error: pip install -e . failed" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
# shellcheck disable=SC1091
source .venv/bin/activate
# PYSPARK_PYTHON is left to streaming.spark.query.build_session (set it to override): the venv's interpreter,
# started through streaming/spark/spark-worker-python on a local master so workers skip Spark's pyspark.zip.
export PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
# Local Spark binds to 127.0.0.1; on a cluster the driver needs an address the workers can reach.
case "${SPARK_MASTER:-local}" in local|local\[*) export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1} ;; esac

case "${1:-run}" in
  # wm-stack (streaming/apps/stack.py) runs the Procfile: one stack per data, stopped together, no orphans.
  run) demo=$(printf %s "${DEMO:-on}" | tr '[:upper:]' '[:lower:]')  # as Config reads it
       case "$demo" in
         on) procfile=Procfile ;;
         off) procfile=Procfile.production
              echo "production mode (DEMO=off): no generator; write your events to" \
                   "${PIPELINE_NAMESPACE:-wm}:events (docs/ingest.md)" ;;
         *) echo "error: DEMO='$DEMO' must be on or off" >&2; exit 2 ;;
       esac
       export DASHBOARD_PORT="${PORT:-8501}"
       export METRICS_PORT="${METRICS_PORT:-9108}" DASHBOARD_URL="http://127.0.0.1:$DASHBOARD_PORT"
       echo "dashboard: http://127.0.0.1:$DASHBOARD_PORT  metrics: http://127.0.0.1:$METRICS_PORT/metrics"
       exec wm-stack -f "$procfile" ;;
  test) shift
        # Debian packages the tests drive: chromium (the browser test), prometheus and promtool (the alerts'
        # rules), prometheus-alertmanager (the push to Alertmanager); installed where we may, else said how.
        need=()
        if [ ! -x /usr/bin/chromium ] && [[ " $* " != *"not browser"* && " $* " != *"not spark"* ]]; then
          need+=(chromium)
        fi
        command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || need+=(prometheus)
        command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
        [ -x /usr/bin/redis-server ] || need+=(redis-server)  # Redis 7: the embedded default (decision 0014)
        # Node.js and npm: the Node producer's test (clients/node; its test runs npm ci itself)
        command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
        if [ ${#need[@]} -gt 0 ]; then
          if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "installing ${need[*]} for the tests (apt-get)"
            (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null) \
              || { echo "error: apt-get install ${need[*]} failed" >&2; exit 1; }
          else
            echo "error: the tests need Debian's ${need[*]}: sudo apt-get install ${need[*]}" >&2
            exit 1
          fi
        fi
        ruff check .
        # The floors (.importlinter): its report only when a contract is broken.
        imports=$(lint-imports --no-cache 2>&1) || { echo "$imports" >&2; exit 1; }
        mypy  # the pure core (pyproject.toml)
        # A worker a core and one more (TEST_WORKERS=0: in turn), a file's tests on one worker: they share its
        # fixtures. The long files wait on the wall clock about a sixth of the time; the extra worker fills it.
        # The fast tier (-m "not spark ...") waits on servers more than it computes: two workers a core.
        workers=$(($(nproc) + 1))
        case " $* " in *"not spark"*) workers=$((2 * $(nproc))) ;; esac
        # Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set: each worker would otherwise compile and
        # rewrite every test module again (about 10 s a worker, docs/testing.md).
        unset PYTHONDONTWRITEBYTECODE
        exec python -m pytest -n "${TEST_WORKERS:-$workers}" --dist loadfile --no-loadscope-reorder "$@" ;;
  setup) echo "ready: .venv" ;;
  *) echo "usage: ./run.sh [run|test|setup]" >&2; exit 2 ;;
esac
