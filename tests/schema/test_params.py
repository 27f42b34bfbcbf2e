"""A namespace's build parameters come from the configuration: ``Params`` has no default of its own, and
:func:`params_for` builds exactly what the job built before it was the one builder."""

from __future__ import annotations

from dataclasses import MISSING, asdict, fields, replace

import pytest

from streaming.schema.config import Config
from streaming.schema.params import Params, params_for
from streaming.schema.records import StateParams

TODAY = dict(window_ms=60_000, slide_ms=60_000, delay_ms=30_000, retention_ms=86_400_000, progress_history=10_000,
             progress_bytes=134_217_728, stream_keep_ms=600_000, stream_keep_entries=1_000_000, ttl_ms=None,
             trigger_ms=500, mode="global", policy="min", servers=(), idle_timeout_ms=None, trims=True,
             late_keep=200_000, shards=1, history_days=8, retire_after_ms=600_000, new_servers_per_minute=1_000,
             wait_replicas=0, wait_timeout_ms=1_000)
"""What the job built for the default configuration before Params lost its defaults (written down then)."""


def test_params_has_no_default() -> None:
    assert [f.name for f in fields(Params) if f.default is not MISSING or f.default_factory is not MISSING] == []


def test_the_default_pipeline_is_built_as_it_was() -> None:
    assert asdict(params_for(Config())) == {**TODAY, "readers": ("wm:online:state",), "players_lanes": ()}


def test_a_pipeline_with_lanes_and_its_lane_are_built_as_they_were() -> None:
    cfg = Config(lanes=("global", "per-server-min-idle"))
    lanes = ("wm.global:state", "wm.per-server-min-idle:state")
    assert asdict(params_for(cfg)) == {**TODAY, "readers": (*lanes, "wm:online:state"), "players_lanes": lanes}
    lane = cfg.lane_configs()[1]
    assert asdict(params_for(lane)) == {**TODAY, "mode": "per-server", "idle_timeout_ms": 20_000, "trims": False,
                                        "readers": (), "new_servers_per_minute": 0, "players_lanes": None}


def test_per_server_inputs_and_online_groups_are_built_as_they_were() -> None:
    cfg = Config(watermark_mode="per-server", known_servers=frozenset({"b", "a"}), idle_timeout_ms=5_000,
                 online_groups=2)
    assert asdict(params_for(cfg)) == {**TODAY, "mode": "per-server", "servers": ("a", "b"), "idle_timeout_ms": 5_000,
                                       "readers": ("wm:handoff:guard",), "players_lanes": ()}


def test_the_flood_guard_is_the_pipelines_only() -> None:
    cfg = Config()
    assert params_for(cfg).new_servers_per_minute == cfg.new_servers_per_minute
    assert params_for(cfg.with_(input_namespace="wm")).new_servers_per_minute == 0  # a lane reads the pipeline's


# A namespace keeps its window, slide, watermark mode and policy for good; its delay may change (the lab's lever).
@pytest.mark.parametrize(("built", "changes"), [
    (StateParams(window_ms=60_000, slide_ms=60_000, delay_ms=30_000), {}),
    (StateParams(window_ms=60_000, slide_ms=60_000, delay_ms=5_000), {}),  # another delay: allowed
    (StateParams(window_ms=30_000, slide_ms=60_000, delay_ms=30_000), {"window_ms": (30_000, 60_000)}),
    (StateParams(window_ms=60_000, slide_ms=30_000, mode="per-server", policy="max"),
     {"slide_ms": (30_000, 60_000), "mode": ("per-server", "global"), "policy": ("max", "min")}),
])
def test_what_a_namespace_keeps_for_good(built: StateParams, changes: dict) -> None:
    assert params_for(Config()).fixed_changes(built) == changes


# Batch records kept: PROGRESS_HISTORY, fewer when they would pass PROGRESS_BYTES at the newest record's size, >= 10.
@pytest.mark.parametrize(("history", "budget", "record", "kept"), [
    (10_000, 128 << 20, 2_000, 10_000),      # 3 servers: the count binds
    (10_000, 128 << 20, 100_000, 1_342),     # 300 servers: the bytes bind
    (10_000, 1_000, 1_000_000, 10),          # never below 10
    (5, 128 << 20, 0, 10),                   # at least 10 however few are asked; an empty record is a byte
])
def test_batch_records_kept(history: int, budget: int, record: int, kept: int) -> None:
    params = replace(params_for(Config()), progress_history=history, progress_bytes=budget)
    assert params.records_kept(record) == kept
