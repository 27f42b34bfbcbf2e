"""The tests' JVMs start from a class archive that maps (``tests/procs.py``). A JVM that cannot use an archive starts
without it and says nothing: one built by another checkout was ignored that way by every later one on the machine,
and each job start took about 40 % more CPU unnoticed (docs/testing.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.procs import cache_dir, key, maps, prune

pytestmark = pytest.mark.spark


def test_the_jvms_start_from_this_environments_archive_and_it_maps() -> None:
    opts = os.environ["SPARK_SUBMIT_OPTS"]  # (set before this worker's first Spark test, tests/conftest.py)
    archive = cache_dir() / f"spark-{key()}.jsa"
    assert f"-XX:SharedArchiveFile={archive}" in opts.split(), opts
    maps(archive)


def test_an_archive_that_cannot_map_is_refused_and_a_gone_environments_is_pruned(tmp_path: Path) -> None:
    broken = tmp_path / "spark-broken.jsa"
    broken.write_bytes(b"not an archive")
    with pytest.raises(AssertionError, match="does not map"):
        maps(broken)
    (tmp_path / "home").mkdir()
    for name, home in (("kept", tmp_path / "home"), ("gone", tmp_path / "deleted-checkout"), ("orphan", None)):
        (tmp_path / f"spark-{name}.jsa").write_bytes(b"")
        if home is not None:  # (an orphan was written before archives named their environment)
            (tmp_path / f"spark-{name}.home").write_text(str(home))
    prune(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "spark-kept.home", "spark-kept.jsa"]


def test_an_archive_of_a_checkout_made_again_at_the_same_place_is_not_this_ones(tmp_path: Path) -> None:
    """A clone deleted and made again at the same path has jars of the same names and sizes, newer: the JVM refuses
    the old archive (it checks the jars' times), so the key must differ, and the old archive goes."""
    from tests.procs import spark_home

    (tmp_path / "spark-old.jsa").write_bytes(b"")
    (tmp_path / "spark-old.home").write_text(str(spark_home()))
    clone = tmp_path / "clone"  # a stand-in for a checkout's Spark: its jars only, never the real ones
    (clone / "jars").mkdir(parents=True)
    jar = clone / "jars" / "spark-core.jar"
    jar.write_bytes(b"jar")
    before = key(clone)
    os.utime(jar, ns=(0, jar.stat().st_mtime_ns + 1_000_000_000))  # cloned again: same name and size, newer
    assert key(clone) != before
    before = key()
    current = tmp_path / f"spark-{before}.jsa"
    current.write_bytes(b"")
    current.with_suffix(".home").write_text(str(spark_home()))
    prune(tmp_path, current)
    assert sorted(p.name for p in tmp_path.glob("spark-*")) == sorted([current.name, current.with_suffix(".home").name])
