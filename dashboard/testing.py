"""A page of the dashboard under Streamlit's ``AppTest``, drawn as the entry script draws it when chosen (the
sidebar, then the page), for tests of one page without a browser::

    from dashboard.testing import page_test

    at = page_test("alerts", now_ms=1_767_225_600_000)  # run once; at.error, at.metric, at.markdown ...

The environment says which Redis and namespace (``REDIS_URL``, ``PIPELINE_NAMESPACE``), as for the dashboard.
"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from dashboard.ui import NOW_OVERRIDE


def _one_page(name: str) -> None:  # run by AppTest as a script of its own: imports inside
    from dashboard.app import run_one

    run_one(name)


def page_test(name: str, *, now_ms: int | None = None, timeout: float = 60, run: bool = True,
              **state: object) -> AppTest:
    """The page at URL path ``name`` (``ops``, ``alerts``, ... as in ``dashboard.app.PAGES``), with ``state`` in its
    session (the sidebar's keys: ``range``, ``refresh``, ``paused``, ``pipeline``) and the clock at ``now_ms``."""
    at = AppTest.from_function(_one_page, args=(name,), default_timeout=timeout)
    if now_ms is not None:
        at.session_state[NOW_OVERRIDE] = now_ms
    for k, v in state.items():
        at.session_state[k] = v
    return at.run() if run else at
