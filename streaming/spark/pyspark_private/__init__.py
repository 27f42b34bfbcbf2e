"""The one place that reaches PySpark's private members (decision 0026): each behind a function or class here, saying
what it reaches and why no public API does. Nothing else in ``streaming/`` or ``dashboard/`` may name them
(``tests/spark/test_private_fence.py`` reads the sources); ``tests/spark/test_pyspark_private.py`` calls each one
against the installed PySpark, so an upgrade that renames or removes any of them fails there, by name.

A package of its own only because ``streaming/spark`` holds its twelve modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark import SparkContext
from pyspark.sql.streaming import StreamingQueryListener

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

def jvm(spark: SparkSession) -> Any:  # noqa: ANN401 - py4j's view of the JVM
    """The driver JVM's classes through py4j (``SparkSession._jvm``); called when a checkpoint on Hadoop's file
    systems (``hdfs://``, ``s3a://``) is read or written (:mod:`streaming.spark.checkpoint`). PySpark has no public
    way to a JVM class: its Hadoop ``FileSystem`` is not wrapped."""
    return spark._jvm  # type: ignore[attr-defined]  # noqa: SLF001 - see the docstring


def hadoop_configuration(spark: SparkSession) -> Any:  # noqa: ANN401 - a py4j JavaObject
    """The session's Hadoop ``Configuration`` (``SparkSession._jsc.hadoopConfiguration()``: the ``spark.hadoop.*``
    settings, credentials included) that opens a checkpoint's file system; called with :func:`jvm`. PySpark
    exposes no Hadoop configuration."""
    return spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]  # noqa: SLF001 - see the docstring


def context_in_own_session(conf: SparkConf) -> SparkContext:
    """The SparkContext, its JVM started in a process session of its own (``launch_gateway(popen_kwargs=...)``
    handed to ``SparkContext(gateway=...)``); called by ``build_session`` for the job's own session, before
    ``SparkSession.builder`` takes it. ``pyspark.java_gateway`` is not in PySpark's API reference and
    ``SparkContext``'s ``gateway`` is "only used internally"; PySpark starts its JVM in the caller's process group
    otherwise, so a terminal's Ctrl-C would reach the JVM under a running batch (``build_session``)."""
    from pyspark.java_gateway import launch_gateway

    return SparkContext(conf=conf, gateway=launch_gateway(conf, popen_kwargs={"start_new_session": True}))


class JvmSideListener(StreamingQueryListener):
    """A query listener whose JVM side is :meth:`jvm_side` (a py4j object implementing Spark's
    ``PythonStreamingQueryListener``) instead of PySpark's, which converts each event field by field over py4j.

    ``StreamingQueryManager.addListener`` (and ``removeListener``) register ``listener._jlistener``, a private
    property PySpark builds with ``SparkContext._jvm.PythonStreamingQueryListenerWrapper``; it is overridden here,
    built once (``_jlistenerobj``, PySpark's own cache name) when the listener is first added. No public API hands
    the JVM anything but PySpark's converting wrapper. Should PySpark stop reading ``_jlistener``, its own
    wrapper runs and the subclass' ``onQuery*`` methods get its converted events."""

    def jvm_side(self) -> object:
        """The py4j callback object the JVM calls; a subclass gives it."""
        raise NotImplementedError

    @property
    def _jlistener(self) -> object:
        made = getattr(self, "_jlistenerobj", None)
        if made is None:
            jvm_view = SparkContext._jvm  # noqa: SLF001 - see the docstring
            assert jvm_view is not None, "a listener is registered on a running SparkSession"
            made = self._jlistenerobj = jvm_view.PythonStreamingQueryListenerWrapper(self.jvm_side())
        return made
