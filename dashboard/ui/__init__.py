"""The shell every page shares: the sidebar's controls, the refresh skeleton (:func:`live`: one read per tick, one
error policy, the status line first), the marks over every time chart, the Lab control's one write, and who is
looking (:func:`current_access`: signed in or open, viewer or operator; decision 0022). Each part is in the module
of what it is for (``view``: what the reader chose; ``pacing``: how often a page refreshes; ``controls``: the
sidebar's; ``access``: who is looking; ``writes``: the operator's writes; ``drawing``: every chart and table;
``skeleton``: the refresh skeleton); pages import them from here.

Reads go through :mod:`dashboard.loaders` (cached per refresh tick, shared by every session). Nothing here writes to
Redis but :func:`submit_control` and :func:`submit_annotation`, on an operator's press.
"""

from __future__ import annotations

from dashboard.ui.access import Access, access_note, current_access
from dashboard.ui.controls import (
    REGION_HELP,
    available_lanes,
    job_settings,
    region_filter,
    selected_lane,
    settings_text,
    sidebar,
)
from dashboard.ui.drawing import chart, draw, fmt_int, marked, page_marks, table, vega_chart
from dashboard.ui.pacing import PACES, paced_s, refreshing, repace
from dashboard.ui.skeleton import firing_banner, lane_snapshot, live, page, params_caption, retired_note, show_status
from dashboard.ui.view import (
    NOW_OVERRIDE,
    RANGES,
    REFRESH,
    REGION_KEY,
    View,
    current_region,
    current_view,
    now_ms,
    view_label,
)
from dashboard.ui.writes import (
    ANNOTATION_OPERATOR_NEEDED,
    CONTROL_RESULT,
    OPERATOR_NEEDED,
    submit_annotation,
    submit_control,
)

__all__ = ["ANNOTATION_OPERATOR_NEEDED", "Access", "CONTROL_RESULT", "NOW_OVERRIDE", "OPERATOR_NEEDED", "PACES",
           "RANGES", "REFRESH", "REGION_HELP", "REGION_KEY", "View", "access_note", "available_lanes", "chart",
           "current_access", "current_region", "current_view", "draw", "firing_banner", "fmt_int", "job_settings",
           "lane_snapshot", "live", "marked", "now_ms", "paced_s", "page", "page_marks", "params_caption",
           "refreshing", "region_filter", "repace", "retired_note", "selected_lane", "settings_text", "show_status",
           "sidebar", "submit_annotation", "submit_control", "table", "vega_chart", "view_label"]
