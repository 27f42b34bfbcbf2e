"""The interpreter Spark starts for Python workers on a local master (streaming/spark/spark-worker-python)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streaming.spark.query import WORKER_PYTHON, worker_python

HOME = "/opt/spark-home"
ZIP = f"{HOME}/python/lib/pyspark.zip"
PY4J = f"{HOME}/python/lib/py4j-0.10.9.9-src.zip"
SHOW = "import os, sys; print(os.environ.get('PYTHONPATH', '<unset>')); print(sys.executable)"


def run_wrapper(env: dict[str, str]) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    out = subprocess.run([str(WORKER_PYTHON), "-c", SHOW], env={**base, "PIPELINE_WORKER_PYTHON": sys.executable,
                                                                **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


@pytest.mark.parametrize(("spark_home", "pythonpath", "expected"), [
    # Spark's own layout: its zips first, then the jar and what the driver had; only the zips go
    (HOME, f"{ZIP}:{PY4J}:{HOME}/jars/spark-core_2.13-4.3.0.jar:/src", f"{HOME}/jars/spark-core_2.13-4.3.0.jar:/src"),
    # nothing but the zips: PYTHONPATH is unset, not an empty entry (which would mean the working directory)
    (HOME, f"{ZIP}:{PY4J}", "<unset>"),
    # another Spark's zips are not this package: kept
    (HOME, "/elsewhere/python/lib/pyspark.zip:/src", "/elsewhere/python/lib/pyspark.zip:/src"),
    # entries with spaces or glob characters pass through untouched
    (HOME, f"/a b/*:{ZIP}", "/a b/*"),
    # no SPARK_HOME: nothing to recognise, nothing changed
    ("", f"{ZIP}:/src", f"{ZIP}:/src"),
])
def test_wrapper_drops_only_sparks_own_zips(spark_home: str, pythonpath: str, expected: str) -> None:
    env = {"PYTHONPATH": pythonpath} | ({"SPARK_HOME": spark_home} if spark_home else {})
    seen_path, executable = run_wrapper(env)
    assert seen_path == expected
    assert executable == sys.executable


def test_wrapper_without_its_interpreter_fails_clearly() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PIPELINE_WORKER_PYTHON"}
    out = subprocess.run([str(WORKER_PYTHON), "-c", "pass"], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "PIPELINE_WORKER_PYTHON" in out.stderr


def test_worker_python_is_the_wrapper_for_a_pip_install() -> None:
    import pyspark

    assert worker_python() == str(WORKER_PYTHON)  # this venv's pyspark is a pip install: Spark's home
    assert os.environ["PIPELINE_WORKER_PYTHON"] == sys.executable
    assert Path(pyspark.__file__).parent.joinpath("python", "lib", "pyspark.zip").exists()


@pytest.mark.spark
def test_spark_workers_import_the_installed_package(spark) -> None:  # noqa: ANN001
    """What the wrapper is for: a real worker imports pyspark from the package directory, not the zip."""
    import pyspark

    files = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()
    assert files == [pyspark.__file__]
