"""The dashboard's entry script: ``streamlit run dashboard/app.py``.

Draws the shared controls, then the chosen page. Each page is a folder under ``screens/`` whose ``page.main`` draws
it; the navigation below names them. Lab control, the one page that writes, is in the navigation only when
``LAB_CONTROL`` is on (by default in the demo, off in production mode: ``DEMO=off``). With sign-in configured
(``wm-dashboard``, decision 0022) a signed-out browser gets the sign-in page alone, whatever its URL path; a viewer
sees Lab control read-only. ``dashboard.testing`` runs one page as this script would, for tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from dashboard import ui  # the installed package (pip install -e .): `streamlit run` adds only this folder
from dashboard.screens.alerts import page as alerts
from dashboard.screens.control import page as control
from dashboard.screens.delay import page as delay
from dashboard.screens.events import page as events
from dashboard.screens.health import page as health
from dashboard.screens.lab import page as lab
from dashboard.screens.lag import page as lag
from dashboard.screens.live_ops import page as live_ops
from dashboard.screens.wall import page as wall
from dashboard.screens.watermark import page as watermark
from streaming.schema.config import Config, ConfigError

ROOT = Path(__file__).resolve().parent.parent


def lab_control() -> bool:
    """Whether to offer the Lab control page; not while the configuration is invalid (every page says why)."""
    try:
        return Config.from_env(os.environ).lab_control
    except ConfigError:
        return False


@dataclass(frozen=True)
class PageSpec:
    main: Callable[[], None]
    title: str
    icon: str
    url_path: str


# The pages that draw one region's servers alone when the Region filter is set. The others are the whole fleet's
# (Alerts name each alert's region; the lab, the delay advice and lab control are the pipeline's): they show the
# filter disabled, saying so. (A comment, not a docstring: Streamlit draws a bare string of the entry script.)
REGIONAL = frozenset({"ops", "watermark", "lag", "events", "health", "wall"})

# Every page by its URL path, in the navigation's order; Live ops is the default.
PAGES: dict[str, PageSpec] = {
    "ops": PageSpec(live_ops.main, "Live ops", ":material/sports_esports:", "ops"),
    "alerts": PageSpec(alerts.main, "Alerts", ":material/notifications_active:", "alerts"),
    "watermark": PageSpec(watermark.main, "Watermark", ":material/water:", "watermark"),
    "lag": PageSpec(lag.main, "Lag", ":material/schedule:", "lag"),
    "events": PageSpec(events.main, "Events", ":material/scatter_plot:", "events"),
    "health": PageSpec(health.main, "Pipeline health", ":material/monitor_heart:", "health"),
    "lab": PageSpec(lab.main, "Watermark lab", ":material/science:", "lab"),
    "delay": PageSpec(delay.main, "Choosing the delay", ":material/tune:", "delay"),
    "control": PageSpec(control.main, "Lab control", ":material/settings_remote:", "control"),
    "wall": PageSpec(wall.main, "Wall screen", ":material/tv:", "wall"),
}


# Data before prose: Streamlit's 6 rem above a page's title, and its 2.75 rem title, held the first chart below a
# laptop's fold. (A comment, not a docstring: this is the entry script, and Streamlit writes its bare strings out.)
COMPACT = """<style>
.block-container {padding-top: 2rem;}
h1 {padding-top: 0.1rem !important; padding-bottom: 0.3rem !important; font-size: 2.1rem !important;}
</style>"""


def page_config() -> None:
    # A local icon: a material icon as page_icon makes the browser fetch it from a font host on the internet,
    # and a wall screen in a studio may be offline.
    st.set_page_config(page_title="Watermark dashboard", page_icon=str(ROOT / "dashboard" / "static" / "favicon.png"),
                       layout="wide")
    st.html(COMPACT)


def shown_pages() -> list[str]:
    """The pages in the navigation: every one but Lab control while ``LAB_CONTROL`` is off."""
    return [name for name in PAGES if name != "control" or lab_control()]


def sign_in_page() -> None:
    st.title("Watermark dashboard")
    st.write("Sign in to see the dashboard.")
    st.button("Sign in", key="sign_in", type="primary", icon=":material/login:", on_click=st.login)


def gate(acc: ui.Access) -> bool:
    """Before sign-in (or when sign-in is asked for but missing), one page whatever the URL path, and no other:
    the sign-in page, or why nothing is shown. True when it drew that page."""
    if acc.shut:
        st.navigation([st.Page(lambda: st.error(acc.shut), title="Watermark dashboard", url_path="closed",
                               default=True)], position="hidden").run()
        return True
    if acc.signed_out:
        st.navigation([st.Page(sign_in_page, title="Sign in", url_path="sign-in", default=True)],
                      position="hidden").run()
        return True
    return False


def main() -> None:
    page_config()
    acc = ui.current_access()
    if gate(acc):
        return
    shown = shown_pages()
    pages = {name: st.Page(PAGES[name].main, title=PAGES[name].title, icon=PAGES[name].icon,
                           url_path=PAGES[name].url_path, default=name == "ops") for name in shown}
    page = st.navigation(list(pages.values()))
    name = next(n for n, p in pages.items() if p is page)
    ui.sidebar(active=name != "control", regional=name in REGIONAL)  # Lab control reads none of them
    ui.access_note(acc)
    page.run()


def run_one(name: str) -> None:
    """One page as :func:`main` draws it when it is chosen, without the navigation (``dashboard.testing``)."""
    page_config()
    ui.sidebar(active=name != "control", regional=name in REGIONAL)
    ui.access_note(ui.current_access())
    PAGES[name].main()


if __name__ == "__main__":
    main()
