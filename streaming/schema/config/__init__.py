"""One configuration object, read from environment variables: :class:`Config`, built by ``Config.from_env`` from
the mapping a command passes (``os.environ``), the only reader of the settings. Each part is in the module of what it
is for (``settings``: the settings, their defaults and checks, and ``from_env``; ``parse``: one value of each kind
read from the mapping; ``lanes``: the lab lanes; ``urls``: addresses as they are shown; ``tokens``: the annotations'
token); they are imported from here.

Invalid values fail at construction with a message naming the variable, so a
typo stops the pipeline at start rather than producing wrong numbers later.
"""

from __future__ import annotations

from streaming.schema.config.lanes import DEFAULT_IDLE_TIMEOUT_MS, LANES, MAIN, Lane, lane_config, lane_namespace
from streaming.schema.config.parse import ConfigError
from streaming.schema.config.settings import (
    DEFAULT_EMBEDDED_PORT,
    DEFAULT_HISTORY_DAYS,
    DEFAULT_LATE_KEEP,
    MAX_WAIT_TIMEOUT_MS,
    REMOVED,
    WATERMARK_MODES,
    WATERMARK_POLICIES,
    Config,
    path_safe,
)
from streaming.schema.config.tokens import MIN_TOKEN, annotations_token
from streaming.schema.config.urls import SECRET_OPTIONS, hidden_url, is_loopback, redact_url, scrub_url, shown_url

__all__ = ["Config", "ConfigError", "DEFAULT_EMBEDDED_PORT", "DEFAULT_HISTORY_DAYS", "DEFAULT_IDLE_TIMEOUT_MS",
           "DEFAULT_LATE_KEEP", "LANES", "Lane", "MAIN", "MAX_WAIT_TIMEOUT_MS", "MIN_TOKEN", "REMOVED",
           "SECRET_OPTIONS", "WATERMARK_MODES", "WATERMARK_POLICIES", "annotations_token", "hidden_url",
           "is_loopback", "lane_config", "lane_namespace", "path_safe", "redact_url", "scrub_url", "shown_url"]
