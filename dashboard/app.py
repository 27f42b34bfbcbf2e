"""The dashboard's entry script: ``streamlit run dashboard/app.py``.

Draws the shared controls, then the chosen page. Pages live in ``views/``;
each reads one :class:`~dashboard.data.Snapshot` per refresh tick. Lab control,
the one page that writes, is in the navigation only when ``LAB_CONTROL`` is on
(by default in the demo, off in production mode: ``DEMO=off``).
"""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from dashboard import ui  # the installed package (pip install -e .): `streamlit run` adds only this folder
from watermark.schema.config import Config, ConfigError

ROOT = Path(__file__).resolve().parent.parent


def lab_control() -> bool:
    """Whether to offer the Lab control page; not while the configuration is invalid (every page says why)."""
    try:
        return Config.from_env(os.environ).lab_control
    except ConfigError:
        return False


def main() -> None:
    # A local icon: a material icon as page_icon makes the browser fetch it from a font host on the internet,
    # and a wall screen in a studio may be offline.
    st.set_page_config(page_title="Watermark dashboard", page_icon=str(ROOT / "dashboard" / "static" / "favicon.png"),
                       layout="wide")
    pages = [
        st.Page("views/ops.py", title="Live ops", icon=":material/sports_esports:", default=True),
        st.Page("views/alerts.py", title="Alerts", icon=":material/notifications_active:", url_path="alerts"),
        st.Page("views/watermark.py", title="Watermark", icon=":material/water:", url_path="watermark"),
        st.Page("views/lag.py", title="Lag", icon=":material/schedule:", url_path="lag"),
        st.Page("views/events.py", title="Events", icon=":material/scatter_plot:", url_path="events"),
        st.Page("views/health.py", title="Pipeline health", icon=":material/monitor_heart:", url_path="health"),
        st.Page("views/lab.py", title="Watermark lab", icon=":material/science:", url_path="lab"),
        st.Page("views/delay.py", title="Choosing the delay", icon=":material/tune:", url_path="delay"),
    ]
    if lab_control():
        pages.append(st.Page("views/control.py", title="Lab control", icon=":material/settings_remote:",
                             url_path="control"))
    page = st.navigation(pages)
    ui.sidebar(active=page.url_path != "control")  # Lab control reads none of them
    page.run()


main()
