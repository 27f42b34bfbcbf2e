"""The commands: the job, replay, the event generator and its control.
"""

from __future__ import annotations

import os
import sys

from streaming.schema.config import Config, ConfigError


def config_or_exit(prog: str) -> Config:
    """The settings of this process's environment (``Config.from_env``), read first thing by a command's ``main``:
    one invalid setting stops the command with ``prog: error: ...`` naming the variable, and status 2."""
    try:
        return Config.from_env(os.environ)
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
