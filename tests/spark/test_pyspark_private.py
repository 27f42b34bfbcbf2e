"""Each of PySpark's private members the project reaches (:mod:`streaming.spark.pyspark_private`), called against the
installed PySpark: an upgrade that renames or removes one fails here, by name, not in a running job."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from py4j.java_gateway import JavaObject
from pyspark.sql import SparkSession

from streaming.spark import pyspark_private
from streaming.spark.cluster import added_files

pytestmark = pytest.mark.spark
UPGRADE = "a PySpark upgrade changed what streaming/spark/pyspark_private reaches"


def test_the_jvm_s_classes_are_reached(spark: SparkSession) -> None:
    path = pyspark_private.jvm(spark).org.apache.hadoop.fs.Path("file:/tmp/checkpoint/offsets/7")
    assert path.getName() == "7", f"{UPGRADE}: SparkSession._jvm no longer reaches Hadoop's classes"


def test_the_hadoop_configuration_carries_the_session_s_settings(spark: SparkSession) -> None:
    conf = pyspark_private.hadoop_configuration(spark)
    assert conf.get("fs.AbstractFileSystem.file.impl") == "org.apache.hadoop.fs.local.RawLocalFs", (
        f"{UPGRADE}: SparkSession._jsc.hadoopConfiguration() no longer gives the session's spark.hadoop.* settings")


def test_a_listener_s_jvm_side_is_what_the_query_manager_registers(spark: SparkSession) -> None:
    made: list[object] = []

    class Side:
        """A py4j callback implementing Spark's listener interface, counting nothing."""

        def onQueryStarted(self, jevent: object) -> None: ...
        def onQueryProgress(self, jevent: object) -> None: ...
        def onQueryIdle(self, jevent: object) -> None: ...
        def onQueryTerminated(self, jevent: object) -> None: ...

        class Java:
            implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]

    class Listener(pyspark_private.JvmSideListener):
        def jvm_side(self) -> object:
            made.append(Side())
            return made[-1]

        def onQueryStarted(self, event: object) -> None: ...
        def onQueryProgress(self, event: object) -> None: ...
        def onQueryIdle(self, event: object) -> None: ...
        def onQueryTerminated(self, event: object) -> None: ...

    listener = Listener()
    spark.streams.addListener(listener)
    spark.streams.removeListener(listener)
    assert len(made) == 1, f"{UPGRADE}: StreamingQueryManager.addListener no longer reads listener._jlistener"
    assert isinstance(getattr(listener, "_jlistenerobj", None), JavaObject), (
        f"{UPGRADE}: SparkContext._jvm.PythonStreamingQueryListenerWrapper no longer wraps the JVM side")


def test_the_files_added_to_a_context_are_listed_by_name(spark: SparkSession, tmp_path: os.PathLike) -> None:
    """(Public API, the one ``ship_package`` relies on to ship each zip once.)"""
    probe = os.path.join(tmp_path, "probe-0123456789abcdef.zip")
    with open(probe, "wb") as f:
        f.write(b"PK\x05\x06" + b"\0" * 18)  # an empty zip
    spark.sparkContext.addPyFile(probe)
    assert "probe-0123456789abcdef.zip" in added_files(spark.sparkContext)


def test_the_job_s_own_jvm_starts_in_a_session_of_its_own() -> None:
    """In a process of its own: one SparkContext per process, and the tests' session is running."""
    code = textwrap.dedent("""
        import os
        from pyspark import SparkConf
        from streaming.spark.pyspark_private import context_in_own_session
        conf = SparkConf().setAll([("spark.master", "local[1]"), ("spark.app.name", "own-session"),
                                   ("spark.ui.enabled", "false"), ("spark.driver.host", "127.0.0.1"),
                                   ("spark.driver.bindAddress", "127.0.0.1")])
        sc = context_in_own_session(conf)
        try:
            from pyspark.sql import SparkSession
            from streaming.spark.pyspark_private import jvm
            pid = jvm(SparkSession.builder.getOrCreate()).java.lang.ProcessHandle.current().pid()
            print(os.getsid(pid) != os.getsid(0))
        finally:
            sc.stop()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                         env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.returncode == 0, f"{UPGRADE}: launch_gateway(popen_kwargs=...) / SparkContext(gateway=...):\n" \
                                f"{out.stderr[-3000:]}"
    assert out.stdout.strip().splitlines()[-1] == "True", "the JVM shares the caller's session"
