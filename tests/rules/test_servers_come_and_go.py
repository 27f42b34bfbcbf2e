"""Servers come and go: the lab lanes' per-server watermarks and the idle ticker follow every server from its
first event with no KNOWN_SERVERS; the pipeline's own per-server mode says at start why it cannot; the job's
idle log is one line per change, not one per server per marker."""

from __future__ import annotations

import pytest

from watermark.rules.idleness import IdleTicker, summary
from watermark.rules.watermarks import ServerWatermarks, policy_max
from watermark.schema.config import Config, ConfigError
from watermark.schema.lanes import lane_config


def test_a_lane_without_a_list_follows_every_server_from_its_first_event() -> None:
    model = ServerWatermarks((), delay_ms=10, policy="min")
    assert model.update({"A": 100}) == {"A": 90}
    assert model.combined(0) == 90  # B is not there yet: it holds nothing back
    assert model.update({"B": 50}) == {"A": 90, "B": 40}  # B appears: counted from its first event
    assert model.combined(90) == 90  # never backwards
    assert model.update({"B": 200, "C": 150}) == {"A": 90, "B": 190, "C": 140}
    assert model.holder() == "A"
    assert policy_max({"A": 5, "B": 9}, (), "min") == 5
    # a fixed list keeps Spark's rule: a server without data counts as 0
    fixed = ServerWatermarks(("A", "B"), delay_ms=10, policy="min")
    assert fixed.update({"A": 100}) == {"A": 90, "B": 0}
    assert policy_max({"A": 5}, ("A", "B"), "min") is None


def test_default_lanes_start_without_known_servers_and_per_server_mode_says_why_not() -> None:
    cfg = Config(lanes=("per-server-min", "per-server-min-idle"))
    assert lane_config(cfg, "per-server-min").known_servers is None
    with pytest.raises(ConfigError, match=r"cannot follow servers that appear later.*LAB_LANES=per-server-min"):
        Config(watermark_mode="per-server")


def test_the_idle_ticker_watches_every_server_heard_from() -> None:
    ticker = IdleTicker((), timeout_ms=1_000, interval_ms=1_000, started_ms=0)
    assert [d.server for d in ticker.due(5_000, {"A": 4_500, "B": 1_000, "C": 3_900})] == ["B", "C"]
    assert ticker.idle == {"B", "C"}
    assert ticker.due(5_400, {"A": 4_500, "B": 1_000, "C": 3_900}) == []  # within the interval
    assert ticker.idle == {"B", "C"}


def test_the_idle_log_is_one_line_per_change_at_three_hundred_servers() -> None:
    names = frozenset(f"eu-{i:03d}" for i in range(300))
    line = summary(frozenset(), names)
    assert line is not None and line.startswith("idle: 300 server(s) silent") and "(+295 more)" in line
    assert "newly idle: 300" in line and line.count("eu-") == 5
    assert summary(names, names) is None  # the same set: nothing to say
    back = summary(names, names - {"eu-007"})
    assert back is not None and "back: eu-007" in back and "newly idle: 0" in back
