#!/usr/bin/env bash
# One command for everything:
#   ./run.sh          set up (first time) and run Redis, the generator, the Spark job and the dashboard
#                     (Procfile); the dashboard is at http://127.0.0.1:${PORT:-8501}
#   ./run.sh test     set up (first time) and run the test suite
#   ./run.sh setup    only set up
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "error: Python 3.11 is required ($PYTHON is $("$PYTHON" -V 2>&1))" >&2; exit 1
fi
if ! java -version 2>&1 | grep -q 'version "17'; then
  echo "error: Java 17 is required for Spark (apt-get install openjdk-17-jre-headless)" >&2; exit 1
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  echo "$want" > "$stamp"
fi
# shellcheck disable=SC1091
source .venv/bin/activate
# PYSPARK_PYTHON is left to streaming.query.build_session (set it to override): the venv's interpreter,
# started through streaming/spark-worker-python on a local master so workers skip Spark's pyspark.zip.
export PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Local Spark binds to 127.0.0.1; on a cluster the driver needs an address the workers can reach.
case "${SPARK_MASTER:-local}" in local|local\[*) export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1} ;; esac

case "${1:-run}" in
  # honcho gives every process its own PORT, so the dashboard's is passed under another name.
  run) export DASHBOARD_PORT="${PORT:-8501}"
       echo "dashboard: http://127.0.0.1:$DASHBOARD_PORT"
       exec honcho start ;;
  test) shift; ruff check . && exec python -m pytest "$@" ;;
  setup) echo "ready: .venv" ;;
  *) echo "usage: ./run.sh [run|test|setup]" >&2; exit 2 ;;
esac
