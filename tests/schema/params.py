"""How a test builds a namespace's :class:`Params`: through :func:`params_for`, as the job does."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from streaming.schema.config import Config
from streaming.schema.params import Params, params_for


def built_params(window_ms: int, slide_ms: int, delay_ms: int, readers: tuple[str, ...] = (),
                 **settings: Any) -> Params:  # noqa: ANN401 - any field of Config, checked by it
    """The pipeline's parameters for a :class:`Config` with this window, slide and delay and any other ``settings``
    (Config's own field names: ``retire_after_ms``, ``late_events_keep``, ``wait_replicas``, ``input_namespace`` for
    a lab lane, ...), built by :func:`params_for`.

    One field is then replaced, as the Config has no setting for it: ``readers``, the other readers of the input
    whose commits hold its trim back. ``params_for`` names the online view's state and each lane's, which these
    tests do not run (a reader with no commit would keep every entry): none unless the test names its own. A test
    varying another such field (``trims``, ``players_lanes``, ``stream_keep_ms``) does
    ``dataclasses.replace`` on what this returns, and says why."""
    return replace(params_for(Config(window_ms=window_ms, slide_ms=slide_ms, delay_ms=delay_ms, **settings)),
                   readers=readers)
