"""The dashboard's only writes to Redis, each on an operator's press: the Lab control's settings
(:func:`submit_control`) and an annotation (:func:`submit_annotation`). Each asks for the role again."""

from __future__ import annotations

from collections.abc import Callable

import redis
import streamlit as st

from dashboard.loaders import load_lab, load_marks, redis_client
from dashboard.status import Level, Status, clock, unreachable
from dashboard.text import md
from dashboard.ui.access import current_access
from dashboard.ui.view import now_ms
from streaming.schema.config import Config, ConfigError, redact_url
from streaming.schema.keys import KeySchema
from streaming.store.annotation_store import add_annotation, annotation_from
from streaming.store.control_store import write_control

CONTROL_RESULT = "lab_result"
"""Session-state key holding what the last control button press did, shown under the buttons."""
OPERATOR_NEEDED = ("changing the Lab control settings needs the operator role (docs/operations.md, Sign-in and "
                   "roles).")


def submit_control(cfg: Config, changes: Callable[[], dict[str, object]]) -> None:
    """A button's callback: runs before the page is drawn again, so the page shows the new request. The role is
    asked again here: a viewer's page offers no button, and a press that reaches the server anyway saves nothing."""
    keys = KeySchema(cfg.namespace)
    acc = current_access()
    if not acc.operator:
        st.session_state[CONTROL_RESULT] = Status(Level.WARNING, f"Not saved: {OPERATOR_NEEDED}")
        return
    who = acc.who if acc.sign_in else "anyone (no sign-in)"
    try:
        ctl = write_control(redis_client(cfg.redis_url), keys, by=who, role=acc.role,  # type: ignore[arg-type]
                            now_ms=now_ms(), **changes())
    except redis.exceptions.NoPermissionError as exc:
        result = Status(Level.WARNING, f"This dashboard's Redis user cannot change the control settings: NOPERM "
                                       f"{exc}. Give it write access to `{keys.control}` and `{keys.control_audit}` "
                                       "(e.g. `+hget +hset +hincrby +xadd +watch +multi +exec`), or use `wm-control "
                                       "set` with the job's user.")
    except (ConfigError, ValueError) as exc:
        result = Status(Level.ERROR, f"Not saved: {exc}")
    except redis.RedisError as exc:
        result = unreachable(redact_url(cfg.redis_url), exc)
    else:
        load_lab.clear()
        result = Status(Level.OK, f"Saved as rev {ctl.rev}.")
    st.session_state[CONTROL_RESULT] = result


ANNOTATION_OPERATOR_NEEDED = ("adding an annotation needs the operator role (docs/operations.md, Sign-in and "
                              "roles); `wm-annotate` and `POST /annotations` with the monitor's token add them too")


def submit_annotation(cfg: Config, doc: dict[str, object]) -> Status:
    """The Alerts page's form: an annotation (``annotation_from``'s fields) added for every time chart to draw. The
    role is asked again here: a viewer's page has no form, and a submit that reaches the server saves nothing."""
    if not current_access().operator:
        return Status(Level.WARNING, f"Not saved: {ANNOTATION_OPERATOR_NEEDED}")
    now = now_ms()
    try:
        a = annotation_from(doc, now)
        add_annotation(redis_client(cfg.redis_url), KeySchema(cfg.namespace), a, cfg.history_days, now)
    except ValueError as exc:
        return Status(Level.ERROR, f"Not saved: {exc}")
    except redis.RedisError as exc:
        return unreachable(redact_url(cfg.redis_url), exc)
    load_marks.clear()
    return Status(Level.OK, f"Added: {a.kind} “{md(a.text)}” from {clock(a.start_ms)}; every time chart draws it.")
