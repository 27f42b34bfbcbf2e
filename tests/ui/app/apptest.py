"""A page run under AppTest as the entry script draws it, and what the tests read off it: metrics, status messages,
counts; and Redis' count of writes (the dashboard never writes)."""

from __future__ import annotations

import redis
from streamlit.testing.v1 import AppTest

from dashboard.testing import page_test
from tests.paths import APP

PAGES = ["ops", "watermark", "lag", "health"]
LAB_PAGES = ["events", "lab", "delay", "control"]


def run_page(page: str | None = None, now_ms: int | None = None, **state: object) -> AppTest:
    """``page`` (a URL path) as the entry script draws it; None: the entry script itself, its navigation and its
    default page (Live ops)."""
    if page is None:
        at = AppTest.from_file(APP, default_timeout=60)
        if now_ms is not None:
            at.session_state["now_ms"] = now_ms
        for k, v in state.items():
            at.session_state[k] = v
        at.run()
    else:
        at = page_test(page, now_ms=now_ms, **state)
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def statuses(at: AppTest) -> list[str]:
    return [e.value for e in (*at.error, *at.warning, *at.info, *at.success)]


def n(text: str) -> int:
    return int(text.replace(",", ""))


def dirty(client: redis.Redis) -> int:
    """Redis' count of changes since the last save: any write moves it."""
    return int(client.info("persistence")["rdb_changes_since_last_save"])
