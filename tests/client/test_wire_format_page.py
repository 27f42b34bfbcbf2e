"""docs/wire-format.md, the protocol a producer in any language follows: the page's numbers are the code's, the
characters it forbids are the parser's and its examples hold, so it cannot drift (its Node.js producer is
tested in ``test_node_producer``)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from streaming.schema.acl import CONNECTION, part_rules
from streaming.schema.config import Config, ConfigError
from streaming.spark.rows import FAST_SHAPE
from watermark_client.batch_channel import MARKER_TTL_S
from watermark_client.encode import FIELDS
from watermark_client.events import NAME_LIMITS, bad_name
from watermark_client.stream import input_shard_key, producer_marker_key, shard_of

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "wire-format.md"
NS = "wm"


def between(tag: str) -> str:
    """The text the page holds between ``<!-- tag -->`` and ``<!-- /tag -->``, on one line."""
    m = re.search(rf"<!-- {tag} -->(.*?)<!-- /{tag} -->", SPEC.read_text(), re.S)
    assert m, f"docs/wire-format.md has no <!-- {tag} --> mark"
    return " ".join(m.group(1).split())


def code_value(ref: str) -> object:
    """``module.name``, ``module.Class.name``, ``module.name["key"]`` or ``module.Callable(param)`` (that
    parameter's default)."""
    m = re.fullmatch(r"([\w.]+)(?:\[\"(\w+)\"\]|\((\w+)\))?", ref)
    assert m, ref
    path, key, param = m.groups()
    parts = path.split(".")
    n = len(parts) - 1
    while True:  # the longest prefix that is a module; the rest are attributes
        try:
            value: Any = importlib.import_module(".".join(parts[:n]))
            break
        except ModuleNotFoundError:
            n -= 1
    for name in parts[n:]:
        value = getattr(value, name)
    if key is not None:
        value = value[key]
    if param is not None:
        value = inspect.signature(value).parameters[param].default
    return value


def numbers() -> list[tuple[str, str, str]]:
    table = SPEC.read_text().split("\n## Numbers\n")[1]
    rows = re.findall(r"^\| ([^|]+) \| ([^|]+) \| `([^`]+)` \|$", table, re.M)
    assert len(rows) >= 15, rows
    return rows


@pytest.mark.parametrize(("what", "said", "ref"), numbers(), ids=[r[0] for r in numbers()])
def test_each_number_the_page_states_is_the_codes(what: str, said: str, ref: str) -> None:
    value, said = code_value(ref), said.strip("` ")
    if isinstance(value, (tuple, list)):
        assert [w.strip() for w in said.split(",")] == list(value), what
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        assert said == value, what
    else:
        assert float(said.replace(",", "")) == value, what


def test_the_page_says_its_numbers_where_it_uses_them() -> None:
    for field, limit in NAME_LIMITS.items():
        assert re.search(rf"^\| `{field}` \|[^\n]*at most {limit} characters", SPEC.read_text(), re.M), field
    text = " ".join(SPEC.read_text().split())
    assert f"SET {{marker}} {{seq}} EX {MARKER_TTL_S}" in text and f"{MARKER_TTL_S} s = 7 days" in text
    assert f"`MAX_FUTURE_SKEW` (default {Config.max_future_skew_ms:,} ms" in text
    assert f"`STREAM_MAX_ENTRIES` (default {Config.stream_max_entries:,})" in text
    assert between("order") == ", ".join(f"`{f}`" for f in FIELDS)
    assert re.findall(r"\?P<(\w+)>", FAST_SHAPE) == list(FIELDS)  # the fast path's order is the producer's
    assert between("producer") == ", ".join(f"`{c[1:].upper()}`" for c in part_rules(NS)["producer"].commands
                                             if c not in CONNECTION)


def code_points(text: str) -> set[int]:
    out: set[int] = set()
    for first, last in re.findall(r"U\+([0-9A-F]{4,6})(?:–U\+([0-9A-F]{4,6}))?", text):
        out.update(range(int(first, 16), int(last or first, 16) + 1))
    return out


def test_the_characters_the_page_forbids_are_the_parsers() -> None:
    """Every code point the parser refuses inside a name, and every one it refuses only at a name's edge (a space),
    is the page's list: scanned over all of Unicode through ``bad_name`` itself."""
    invisible, spaces = set(), set()
    for cp in (*range(0xD800), *range(0xE000, 0x110000)):
        c = chr(cp)
        if bad_name("server", f"a{c}a"):
            invisible.add(cp)
        elif bad_name("server", f"{c}a"):
            spaces.add(cp)
    assert code_points(between("invisible")) == invisible
    assert code_points(between("spaces")) == spaces


def test_the_namespace_the_page_describes_is_the_configs() -> None:
    for ok in ("wm", "a" * 64, "{wm}", "{wm}.lab", "my-game_1.eu"):
        assert Config.from_env({"PIPELINE_NAMESPACE": ok}).namespace == ok
    for bad in ("a" * 65, "wm:x", "w m", "{}", "x{wm}"):
        with pytest.raises(ConfigError):
            Config.from_env({"PIPELINE_NAMESPACE": bad})


def test_the_page_s_shard_example_holds() -> None:
    assert shard_of("A", 4) == 3 and input_shard_key("{wm}:events", 3) == "{wm:events:3}"
    assert producer_marker_key("{wm:events:3}", "i") == "{wm:events:3}:producer:i"
    assert producer_marker_key("wm:events:3", "i") == "wm:events:3:producer:i"
