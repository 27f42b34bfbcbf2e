"""The shell every page shares: the sidebar's controls, the refresh skeleton (:func:`live`: one read per tick, one
error policy, the status line first), the marks over every time chart, the Lab control's one write, and who is
looking (:func:`current_access`: signed in or open, viewer or operator; decision 0022).

Reads go through :mod:`dashboard.loaders` (cached per refresh tick, shared by every session). Nothing here writes to
Redis but :func:`submit_control` and :func:`submit_annotation`, on an operator's press.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import redis
import streamlit as st

from dashboard import access
from dashboard.charts import Mark, mark
from dashboard.fleet import ALL_REGIONS, in_region
from dashboard.loaders import (
    TICK_TTL_S,
    load_alerts,
    load_lab,
    load_lanes,
    load_marks,
    load_regions,
    load_snapshot,
    load_state,
    load_windows,
    redis_client,
)
from dashboard.status import Level, Status, assess, clock, human_ms, unreachable
from dashboard.text import csv_safe, md, safe_figure
from streaming.schema.config import Config, ConfigError, Lane, redact_url
from streaming.schema.keys import KeySchema
from streaming.store.annotation_store import add_annotation, annotation_from
from streaming.store.control_store import write_control
from streaming.store.pipeline_status import PipelineState
from streaming.store.views.snapshot import Snapshot

log = logging.getLogger("dashboard")

RANGES: dict[str, int] = {"5 min": 300_000, "15 min": 900_000, "60 min": 3_600_000}
REFRESH: dict[str, int] = {"1 s": 1, "2 s": 2, "5 s": 5, "10 s": 10}
CONTROL_RESULT = "lab_result"
"""Session-state key holding what the last control button press did, shown under the buttons."""
OPERATOR_NEEDED = ("changing the Lab control settings needs the operator role (docs/operations.md, Sign-in and "
                   "roles).")
NOW_OVERRIDE = "now_ms"
"""Session-state key a test sets to inject the clock (the dashboard's "now")."""


@dataclass(frozen=True)
class View:
    range_ms: int
    refresh_s: int
    paused: bool

    def tick(self, now_ms: int) -> int:
        """The refresh tick ``now_ms`` falls in: every cached read is keyed by it, so sessions share reads."""
        return now_ms // (self.refresh_s * 1000)


PACES = "paces"
"""Session-state key: each page's refresh interval when it draws slower than the View asks (:func:`paced_s`)."""


def paced_s(asked_s: int, took_s: float) -> int:
    """How often a page refreshes: as often as the View asks, or twice as long as its last refresh took (rounded
    up to a second), whichever is longer. A page is then idle at least half the time, so one viewer costs the
    dashboard at most about half a core, and the page can be read, scrolled and clicked between redraws; a page
    asked to refresh faster than it can draw would otherwise redraw back to back, never at rest.

    >>> paced_s(2, 0.3), paced_s(2, 1.0), paced_s(2, 1.2), paced_s(10, 2.6)
    (2, 2, 3, 10)
    """
    return max(asked_s, math.ceil(2 * took_s))


def repace(every_s: int, asked_s: int, took_s: float) -> int | None:
    """The interval a page refreshing every ``every_s`` moves to after a refresh that took ``took_s``, or None to
    stay: slower at once when a refresh took more than half the interval, faster again only once the interval
    would halve, so a page near the line does not flip between two paces.

    >>> repace(2, 2, 1.6), repace(4, 2, 1.6), repace(4, 2, 1.1), repace(4, 2, 0.4), repace(6, 2, 1.4)
    (4, None, None, 2, 3)
    """
    want = paced_s(asked_s, took_s)
    return want if want > every_s or (every_s > asked_s and 2 * want <= every_s) else None


def refreshing(page: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Decorates a page's body as a fragment that Streamlit reruns every View interval (never while paused),
    paced by :func:`repace`: when a refresh takes more than half the interval, the page re-registers at the slower
    pace (a rerun of the whole script) and says so under its data. ``page``: the key its pace is kept under. The
    first run of each registration (inside a whole run of the script: cold caches, imports) does not count."""
    view = current_view()
    paces: dict[str, int] = st.session_state.setdefault(PACES, {})
    every = None if view.paused else max(view.refresh_s, paces.get(page, 0))

    def wrap(body: Callable[[], None]) -> Callable[[], None]:
        first = [True]

        @st.fragment(run_every=every)
        def tick() -> None:
            started = time.perf_counter()
            body()
            took = time.perf_counter() - started
            if every is None:
                return
            if every > view.refresh_s:
                st.caption(f"Refreshing every {every} s, not every {view.refresh_s} s: drawing this page takes "
                           f"{took:.1f} s.")
            if first:
                first.clear()
                return
            if (new := repace(every, view.refresh_s, took)) is not None:
                paces[page] = new
                st.rerun()

        return tick

    return wrap


def now_ms() -> int:
    override = st.session_state.get(NOW_OVERRIDE)
    return int(override) if override is not None else int(time.time() * 1000)


def sidebar(active: bool = True, regional: bool = True) -> None:
    """The controls every page shares; drawn by the entry script so they persist across pages. On a page that
    reads none of them (``active`` false) they are shown disabled, with a word on why, and keep their values; the
    Region filter likewise on a page that is the whole fleet's (``regional`` false).

    They sit in a popover whose label says the view (range, refresh, paused): a browser draws the controls only
    when it is opened, and drawing them on every visit delayed Live ops' first chart (docs/benchmarks.md)."""
    lanes = available_lanes()
    off = not active
    region_filter(off or not regional)
    with st.sidebar.popover(view_label(current_view()), icon=":material/tune:", width="stretch", key="view_settings"):
        if off:
            st.caption("These settings are for the other pages; this one does not use them.")
        if len(lanes) > 1:
            st.selectbox("Pipeline", [lane.name for lane in lanes], key="pipeline", disabled=off,
                         format_func=lambda name: next(f"{x.label} ({x.mode}"
                                                       + (f", {x.policy}" if x.mode == "per-server" else "")
                                                       + (", idleness" if x.idle else "") + ")"
                                                       for x in lanes if x.name == name),
                         help="The configured pipeline, or one of the lab lanes the job runs beside it over the "
                              "same events (see the Watermark lab page).")
        st.segmented_control("Time range", list(RANGES), default="15 min", key="range", disabled=off,
                             help="Windows whose end is this close to the newest event time, and batches this close "
                                  "to the newest batch.")
        st.selectbox("Refresh every", list(REFRESH), index=1, key="refresh", disabled=off)
        st.toggle("Pause", key="paused", disabled=off, help="Stop refreshing; the page keeps what it shows.")
        if (settings := job_settings()) is not None:
            st.caption(settings)


REGION_HELP = ("Live ops, the wall, Watermark, Lag, Events and Health show this region's servers alone (the status "
               "line stays the whole fleet's); Alerts, the lab, the delay advice and Lab control are the whole "
               "fleet's. The address carries it: ?region=eu.")
REGION_KEY = "region"
"""Session-state key and URL parameter (``?region=eu``) of the region filter: set on one page, every page keeps it,
and a link carries it."""


def region_filter(off: bool) -> None:
    """The region filter, in the sidebar above the view settings: the fleet's regions (``{ns}:regions``). A
    ``?region=`` in the address sets it on arrival; the address then follows the choice."""
    try:
        cfg = Config.from_env(os.environ)
        regions = load_regions(cfg.redis_url, cfg.namespace, current_view().tick(now_ms()))
    except (ConfigError, redis.RedisError):
        regions = ()
    options = [ALL_REGIONS, *regions]
    asked = st.query_params.get(REGION_KEY)
    if asked is not None and REGION_KEY not in st.session_state:
        st.session_state[REGION_KEY] = asked if asked in options else ALL_REGIONS
    if st.session_state.get(REGION_KEY) not in options:
        st.session_state[REGION_KEY] = ALL_REGIONS
    chosen = st.sidebar.selectbox("Region", options, key=REGION_KEY, disabled=off,
                                  help=("This page is the whole fleet's; the filter is kept for the others. "
                                        if off else "") + REGION_HELP)
    if chosen == ALL_REGIONS:
        st.query_params.pop(REGION_KEY, None)
    else:
        st.query_params[REGION_KEY] = chosen


def current_region() -> str | None:
    """The region the filter holds; None: every region."""
    region = st.session_state.get(REGION_KEY)
    return None if region in (None, ALL_REGIONS) else str(region)


def job_settings() -> str | None:
    """The job's own settings as it committed them (never this dashboard's environment), for the View popover;
    None before its first batch or when Redis cannot say."""
    try:
        cfg = Config.from_env(os.environ)
        state = load_state(cfg.redis_url, cfg.namespace, current_view().tick(now_ms()))
    except (ConfigError, redis.RedisError, ValueError):
        return None
    return None if state is None else "The job: " + settings_text(cfg.namespace, state)


def view_label(view: View) -> str:
    """What the view settings' popover says while closed: the settings every page reads, in a few words."""
    rng = next(k for k, v in RANGES.items() if v == view.range_ms)
    every = next(k for k, v in REFRESH.items() if v == view.refresh_s)
    return f"View: {rng} · " + ("paused" if view.paused else f"every {every}")


@dataclass(frozen=True)
class Access:
    """Who is looking (decision 0022): whether sign-in is on, the signed-in user's claims, their role."""

    sign_in: bool  # Streamlit has [auth] secrets: nothing is shown before sign-in
    claims: dict[str, object] | None  # the ID token's claims once signed in
    role: str  # access.OPERATOR or access.VIEWER
    problem: str | None = None  # an invalid operator rule: everyone is a viewer, and every page says why
    shut: str | None = None  # why nothing is shown to anyone: sign-in asked for, but Streamlit was not given it

    @property
    def signed_out(self) -> bool:
        return self.sign_in and self.claims is None

    @property
    def operator(self) -> bool:
        return self.role == access.OPERATOR and self.problem is None and self.shut is None

    @property
    def who(self) -> str:
        claims = self.claims or {}
        return str(claims.get("email") or claims.get("name") or claims.get("sub") or "someone")


def current_access() -> Access:
    """This session's access: ``[auth]`` in Streamlit's secrets turns sign-in on (``wm-dashboard`` writes it from
    ``DASHBOARD_OIDC_*``); the operator rule is ``DASHBOARD_OPERATORS_*``. Fails closed: sign-in asked for in the
    environment but absent from Streamlit shuts the dashboard, an invalid rule leaves nobody an operator."""
    try:
        sign_in = "auth" in st.secrets
    except FileNotFoundError:  # no secrets file at all (StreamlitSecretNotFoundError is one)
        sign_in = False
    user = st.user.to_dict() if sign_in else {}
    claims = {k: v for k, v in user.items() if k not in ("is_logged_in", "tokens")} if user.get("is_logged_in") \
        else None
    shut = problem = None
    if not sign_in and any((os.environ.get(v) or "").strip() for v in access.REQUIRED):
        shut = ("Sign-in is configured (`DASHBOARD_OIDC_*`) but this dashboard was started without it, so it shows "
                "nothing: start it with `wm-dashboard` (the Procfile does), which hands Streamlit the `[auth]` "
                "secrets.")
    try:
        operators = access.Operators.from_env(os.environ)
    except access.AccessError as exc:
        operators, problem = access.Operators(), f"Nobody is an operator: {exc}."
    return Access(sign_in, claims, access.role(claims, operators, sign_in), problem, shut)


def access_note(acc: Access) -> None:
    """Under the sidebar's controls: who is signed in and as what, with a way out; or that the dashboard is open."""
    with st.sidebar:
        if acc.problem:
            st.warning(acc.problem)
        if not acc.sign_in:
            also = "and change what it offers to change" if acc.operator else "(changes need an operator: sign-in)"
            st.caption(f":material/lock_open: **Open to anyone who reaches this address**: no sign-in is configured, "
                       f"so anyone can see every page {also}. Docs: operations, *Sign-in and roles*.")
            return
        st.caption(f":material/account_circle: Signed in as {md(acc.who)} · **{acc.role}**")
        st.button("Sign out", key="sign_out", icon=":material/logout:", on_click=st.logout)


def current_view() -> View:
    state = st.session_state
    range_label = state.get("range") or "15 min"
    return View(range_ms=RANGES.get(range_label, RANGES["15 min"]),
                refresh_s=REFRESH.get(state.get("refresh") or "2 s", 2),
                paused=bool(state.get("paused", False)))


def retired_note(st: Any, snap: Snapshot, shown: int = 8) -> None:  # noqa: ANN401 - st or a column
    """Servers out of the live views, counted and named under the charts they left (never hidden without a word):
    drained (every player logged out) and retired (silent for RETIRE_AFTER). At a fleet's scale the newest few are
    named and the rest counted: a day of matches is thousands of names."""
    parts = []
    for gone, what in ((snap.drained, "drained (every player logged out: a match over, a pod drained)"),
                       (snap.retired, f"retired (no event for {human_ms(snap.retire_after_ms)} or longer, "
                                      "RETIRE_AFTER)")):
        if not gone:
            continue
        items = sorted(gone.items(), key=lambda kv: (-kv[1], kv[0]))
        names = ", ".join(f"{md(s)} ({human_ms(snap.read_ms - t)} ago)" for s, t in items[:shown])
        more = f" and {len(items) - shown:,} more" if len(items) > shown else ""
        parts.append(f"{len(items):,} {what}: {names}{more}")
    if parts:
        st.caption("Out of the live views, not charted here (the totals keep them; each is back with its next "
                   "event): " + "; ".join(parts) + ".")


def lane_snapshot(cfg: Config, lane: Lane, view: View, now: int, windows: bool = True) -> Snapshot:
    """The pipeline's snapshot for this tick, read from its own keys and its input stream; ``windows`` False: without
    the windows, for a page or tab that draws none."""
    args = (cfg.redis_url, lane.namespace, view.range_ms, view.refresh_s, view.tick(now), now, lane.input_namespace,
            cfg.retire_after_ms)
    snap = load_snapshot(*args)
    return replace(snap, windows=load_windows(*args)) if windows else snap


def available_lanes() -> list[Lane]:
    """The configured pipeline and its lanes; just the configured one if Redis cannot say."""
    try:
        cfg = Config.from_env(os.environ)
    except ConfigError:
        return []
    try:
        return load_lanes(cfg.redis_url, cfg.namespace, current_view().tick(now_ms()))
    except (redis.RedisError, ValueError, KeyError):  # the page's status line reports Redis itself
        return [Lane.main(cfg.namespace)]


def selected_lane(cfg: Config) -> Lane:
    lanes = available_lanes() or [Lane.main(cfg.namespace)]
    chosen = st.session_state.get("pipeline")
    return next((lane for lane in lanes if lane.name == chosen), lanes[0])


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


def page_marks(now: int | None = None) -> list[Mark]:
    """What every time chart draws over its data (the configured pipeline's: annotations concern the game, and
    the monitor watches that pipeline); none when they cannot be read (the status line speaks for Redis)."""
    at = now_ms() if now is None else now
    try:
        cfg = Config.from_env(os.environ)
        return load_marks(cfg.redis_url, cfg.namespace, current_view().tick(at), at)
    except (ConfigError, redis.RedisError, ValueError):
        return []


def marked(fig: Any) -> Any:  # noqa: ANN401 - a plotly figure
    """``fig`` with the annotations and fired alerts of its time range drawn over it (a chart without a time axis
    is left as it is)."""
    return mark(fig, page_marks())


def firing_banner(now: int) -> None:
    """On the headline page: what the monitor has firing, so a wall screen shows it without a click. Says
    nothing when it cannot read them (the status line speaks for Redis)."""
    from dashboard.alertview import firing_text

    try:
        cfg = Config.from_env(os.environ)
        view = load_alerts(cfg.redis_url, cfg.namespace, current_view().tick(now), now)
    except (ConfigError, redis.RedisError, ValueError):
        return
    text = firing_text(list(view.alerts.values()))
    if text:  # one line above the data: the Alerts page, in the navigation, says the rest
        st.error(text, icon=":material/notifications_active:")


def show_status(statuses: list[Status]) -> None:
    for s in statuses:
        {Level.OK: st.success, Level.INFO: st.info, Level.WARNING: st.warning, Level.ERROR: st.error}[s.level](s.text)


def live(render: Callable[[Snapshot, int], None], status: bool = True,
         windows: Callable[[], bool] = lambda: True, whole: bool = False) -> None:
    """Run ``render(snapshot, now_ms)`` now and, unless paused, every refresh interval; ``status`` False: the page
    says the pipeline's health itself (the wall), and only a Redis that cannot be read is said here. ``windows()``,
    asked each run: whether this run draws windows (False: the snapshot is read without them). The snapshot is
    the chosen region's (``dashboard.fleet.in_region``), or with ``whole`` the whole fleet's: the page judges the
    fleet's health on it and applies the region itself (the wall's status tile)."""
    view = current_view()

    @refreshing(render.__module__)
    def tick() -> None:
        now = now_ms()
        try:
            cfg = Config.from_env(os.environ)
        except ConfigError as exc:
            st.error(f"Configuration error: {exc}")
            return
        lane = selected_lane(cfg)
        try:
            snap = lane_snapshot(cfg, lane, view, now, windows())
        except redis.RedisError as exc:
            show_status([unreachable(redact_url(cfg.redis_url), exc)])
            return
        if status or snap.state is None:
            show_status(assess(snap, now, demo=cfg.demo))
        if view.paused:
            st.caption(f"Paused: showing data read at {clock(snap.read_ms)}.")
        if snap.state is None:
            return
        if lane.namespace != cfg.namespace:  # a lab lane: the page says so, with what makes it one
            st.caption(f"The lab lane {lane.label}, not the configured pipeline: {params_caption(snap)}")
        if (region := current_region()) is not None:
            st.caption(f"Region {md(region)} alone (the Region filter in the sidebar); the status line is the "
                       "whole fleet's.")
        try:
            render(snap if whole else in_region(snap, region), now)
        except Exception as exc:  # a bug or an unexpected record must not become a traceback on the page
            log.exception("rendering failed")
            st.error(f"This page could not be drawn from the data in Redis ({type(exc).__name__}: {exc}). "
                     "The other pages may still work; the dashboard log has the details.")

    tick()


def page(title: str, render: Callable[[Config], None]) -> None:
    """A page that draws from the configuration rather than one snapshot (the lab pages)."""
    st.title(title)
    try:
        cfg = Config.from_env(os.environ)
    except ConfigError as exc:
        st.error(f"Configuration error: {exc}")
        return
    render(cfg)


def params_caption(snap: Snapshot) -> str:
    assert snap.state is not None
    return settings_text(snap.namespace, snap.state)


def settings_text(namespace: str, s: PipelineState) -> str:
    """The job's settings, as its last commit wrote them, in one line."""
    kind = "tumbling" if s.slide_ms == s.window_ms else f"sliding every {human_ms(s.slide_ms)}"
    mode = f" · per-server watermarks combined by {s.policy}" if s.mode == "per-server" else ""
    return (f"Namespace `{namespace}` · windows of {human_ms(s.window_ms)} ({kind}) · watermark delay "
            f"{human_ms(s.delay_ms)}{mode} · trigger {human_ms(s.trigger_ms)} · times in UTC")


def chart(where: Any, fig: Any, key: str, empty: str, *, shared: tuple | None = None) -> None:  # noqa: ANN401
    """Draw ``fig`` in ``where`` (``st`` or a column), or, when it has nothing to show, say so in words:
    ``empty`` says what would appear and when. With ``shared``, ``fig`` is a function building the figure, and
    ``shared`` names everything it is built from (the snapshot read, the view's settings; the region filter is
    added here): every session drawing the same key within a refresh tick draws the one figure built for the
    first (marks and escaping included)."""
    ready = (_shared_chart((key, *shared, current_region(), current_view().tick(now_ms())), fig) if shared is not None
             else _ready(fig))
    if ready is None:
        where.info(empty)
    else:
        where.plotly_chart(ready, key=key, theme=None)


def vega_chart(where: Any, build: Callable[[], dict | None], key: str, empty: str, *,  # noqa: ANN401
               shared: tuple) -> None:
    """Draw the Vega-Lite spec ``build`` returns in ``where``, or say ``empty`` in words when it returns None;
    built once per ``shared`` (what it is built from) and refresh tick for every session, as :func:`chart`."""
    spec = _shared_spec((key, *shared, current_region(), current_view().tick(now_ms())), build)
    if spec is None:
        where.info(empty)
    else:
        where.vega_lite_chart(spec, key=key, width="stretch")


@st.cache_data(show_spinner=False, ttl=TICK_TTL_S, max_entries=512)
def _shared_spec(key: tuple, _build: Callable[[], dict | None]) -> dict | None:
    # st.cache_data: each session gets its own copy of the spec, which Streamlit may change as it draws it.
    return _build()


def _ready(fig: Any) -> Any:  # noqa: ANN401 - a plotly figure
    """The figure as drawn: its marks over it, its names as text; None when it has nothing to show."""
    from dashboard.charts import frame, has_data, themed

    return themed(safe_figure(marked(frame(fig)))) if has_data(fig) else None


@st.cache_resource(show_spinner=False, ttl=TICK_TTL_S, max_entries=512)
def _shared_chart(key: tuple, _build: Callable[[], Any]) -> Any:  # noqa: ANN401 - a plotly figure, or None
    return _ready(_build())


def draw(where: Any, fig: Any, key: str) -> None:  # noqa: ANN401 - st or a column; a plotly figure
    """Every chart is drawn here: framed (``dashboard.charts.frame``), the names it carries as text
    (``dashboard.text.safe_figure``), in our theme (``dashboard.charts.THEME``)."""
    from dashboard.charts import frame, themed

    where.plotly_chart(themed(safe_figure(frame(fig))), key=key, theme=None)


def table(where: Any, data: Any, **kw: Any) -> Any:  # noqa: ANN401 - st or a column; rows; st.dataframe's options
    """Every table is drawn here: its text cells safe in a spreadsheet (``dashboard.text.csv_safe``), since each
    offers its rows as CSV and producers' names reach them."""
    return where.dataframe(csv_safe(data), **kw)


def fmt_int(n: int) -> str:
    return f"{n:,}"
