"""One configuration: every setting is read from the environment by ``streaming.schema.config.Config`` alone, and
a namespace's :class:`Params` is built by ``streaming.schema.params.params_for`` alone."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
CODE = ("streaming", "dashboard")

READS_ON_PURPOSE = {
    "streaming/spark/query.py": "SPARK_HOME: where Spark is installed, Spark's own variable, not a setting of ours",
    "streaming/spark/standalone.py": "JAVA_HOME: whether Java is there before a Spark process is launched",
    "streaming/apps/redis_server.py": "REDIS_SERVER_BIN and PATH: which redis-server binary runs; asked by tests "
                                      "and benchmarks that build no Config, as a program looks up its binary",
}
"""Reads of the environment that are no setting of the pipeline's, each with its reason."""


def env_reads(path: Path) -> list[int]:
    """Lines reading the environment: ``os.environ[...]``, ``os.environ.get(...)``, ``os.getenv(...)``. Passing
    ``os.environ`` whole (to ``Config.from_env``, or an env dict for a child process) is not a read."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" \
                and isinstance(node.ctx, ast.Load):
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv"):
            found.append(node.lineno)
    return found


def test_only_the_configuration_reads_the_environment() -> None:
    reads = {str(p.relative_to(ROOT)): lines for d in CODE for p in sorted((ROOT / d).rglob("*.py"))
             if (lines := env_reads(p))}
    assert set(reads) - {"streaming/schema/config.py"} - set(READS_ON_PURPOSE) == set(), reads


def test_the_exceptions_still_read_it() -> None:
    """An exception whose read went is taken off the list."""
    assert [f for f in READS_ON_PURPOSE if not env_reads(ROOT / f)] == []


def test_params_are_built_in_one_place() -> None:
    built = [f"{p.relative_to(ROOT)}:{node.lineno}" for d in (*CODE, "tests", "bench", "scripts")
             for p in (ROOT / d).rglob("*.py")
             for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Call) and ast.unparse(node.func) in ("Params", "params.Params")]
    assert len(built) == 1 and built[0].startswith("streaming/schema/params.py:"), built
