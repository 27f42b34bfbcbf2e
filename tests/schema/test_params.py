"""A namespace's build parameters come from the configuration: ``Params`` has no default of its own."""

from __future__ import annotations

from dataclasses import MISSING, fields

from streaming.schema.config import Config
from streaming.store.commit import Params, params_of

DERIVED = {"servers", "trims", "readers", "players_lanes", "new_servers_per_minute"}
"""Fields ``params_of`` derives from several settings (a lane's or the pipeline's), not one default each."""


def test_every_default_of_params_is_the_configurations() -> None:
    cfg = Config()
    built = params_of(cfg)
    bare = Params(window_ms=cfg.window_ms, slide_ms=cfg.slide_ms, delay_ms=cfg.delay_ms)
    differ = {f.name: (getattr(bare, f.name), getattr(built, f.name)) for f in fields(Params)
              if f.default is not MISSING and f.name not in DERIVED and getattr(bare, f.name) != getattr(built, f.name)}
    assert differ == {}


def test_the_flood_guard_is_the_pipelines_only() -> None:
    cfg = Config()
    assert params_of(cfg).new_servers_per_minute == cfg.new_servers_per_minute
    assert params_of(cfg.with_(input_namespace="wm")).new_servers_per_minute == 0  # a lane reads the pipeline's
