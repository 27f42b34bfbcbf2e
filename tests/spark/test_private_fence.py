"""PySpark's private members are reached in one module only (fast, no Spark; decision 0026): any other module of
``streaming/`` or ``dashboard/`` that names one fails here, with where."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = ROOT / "streaming" / "spark" / "pyspark_private"
PRIVATE = re.compile(
    r"\._j[a-z]\w*"  # PySpark's handles on JVM objects: _jvm, _jsc, _jdf, _jsparkSession, _jconf, _jsqm, ...
    r"|\b_jlistener\w*"  # the JVM side of a query listener
    r"|\._(?:gateway|python_includes|sc|active_spark_context|instantiatedSession|activeSession)\b"
    r"|\bjava_gateway\b|\blaunch_gateway\b"  # pyspark.java_gateway: not in PySpark's API reference
    r"|\b(?:SparkContext|SparkSession|SparkConf|DataFrame)\._[a-z]\w*"
    r"|\bpyspark(?:\.\w+)*\._(?!_)\w+"  # a private module of pyspark (not a dunder)
)


def reaching(text: str) -> list[tuple[int, str]]:
    """The lines of ``text`` (numbered from 1) that name a private member of PySpark.

    >>> reaching("jvm = spark._jvm\\nok = spark.sparkContext.listFiles\\nsc._python_includes")
    [(1, '._jvm'), (3, '._python_includes')]
    """
    return [(n, m.group(0)) for n, line in enumerate(text.splitlines(), 1) for m in PRIVATE.finditer(line)]


def test_only_the_fence_reaches_pyspark_s_private_members() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}: {what}"
             for top in ("streaming", "dashboard") for path in sorted((ROOT / top).rglob("*.py"))
             if FENCE not in path.parents for n, what in reaching(path.read_text())]
    assert not found, "PySpark's private members outside streaming/spark/pyspark_private:\n" + "\n".join(found)


def test_the_fence_is_where_they_are() -> None:
    assert reaching((FENCE / "__init__.py").read_text()), "the fence names nothing: the pattern no longer finds them"
