"""The watermark lab's figures and findings: snapshots of several pipelines in, plain words and figures out.

Pure (no Redis, no Streamlit), so every finding is unit-tested with hand-built
batches and an injected clock. A finding is what a presenter would point at:
which server holds a per-server ``min`` watermark back and whether it is idle,
what ``max`` costs a slow server, what the idle markers did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from dashboard.charts import PALETTE, layout, server_colors, time_axis, ts
from dashboard.fleet import MAX_SERIES
from dashboard.status import Level, Status, clock, human_ms, stall
from dashboard.text import md
from streaming.schema.config import Lane
from streaming.store.views.snapshot import Snapshot


@dataclass(frozen=True)
class LaneRow:
    """One line of the comparison table."""

    pipeline: str
    watermark: str
    final_windows: int
    events: int
    dropped: int
    dropped_by_server: str
    late: int
    idle_markers: int


LANE_COLUMNS = {"pipeline": "Pipeline", "watermark": "Watermark", "final_windows": "Final windows",
                "events": "Accepted", "dropped": "Dropped late", "dropped_by_server": "Dropped by server",
                "late": "Late accepted", "idle_markers": "Idle markers"}
"""The comparison table's headers, for people (no watermark lag: one clock for all lanes, and the table must fit a
1280 px page)."""


def lane_table(rows: Sequence[LaneRow]) -> list[dict[str, object]]:
    """The rows with people's headers and formatted counts."""
    return [{LANE_COLUMNS[k]: f"{v:,}" if isinstance(v, int) else v for k, v in r.__dict__.items()
             if k in LANE_COLUMNS} for r in rows]


def lane_row(lane: Lane, snap: Snapshot) -> LaneRow:
    s, t = snap.state, snap.totals
    wm = s.next_watermark_ms if s else 0
    by_server = dropped_by_server({name: st.dropped for name, st in t.servers.items()})
    return LaneRow(pipeline=lane.label, watermark=clock(wm, zone=False),
                   final_windows=sum(1 for w in snap.windows if w.final), events=t.events, dropped=t.dropped,
                   dropped_by_server=by_server, late=t.late, idle_markers=sum(b.ticks for b in snap.batches))


SHOWN_DROPPERS = 3
"""Servers the comparison table names by their drops; past them it counts the rest (300 names do not fit a cell)."""


def dropped_by_server(dropped: dict[str, int]) -> str:
    """``A 0, B 2, C 40`` for a few servers; for many, the ones that dropped most and how many others did:
    ``eu-003 40, na-011 12, as-007 3 and 4 more servers`` (or ``none of 300 servers``)."""
    if not dropped:
        return "-"
    if len(dropped) <= SHOWN_DROPPERS:
        return ", ".join(f"{name} {n:,}" for name, n in dropped.items())
    droppers = sorted(((n, name) for name, n in dropped.items() if n), key=lambda x: (-x[0], x[1]))
    if not droppers:
        return f"none of {len(dropped):,} servers"
    shown = ", ".join(f"{name} {n:,}" for n, name in droppers[:SHOWN_DROPPERS])
    rest = len(droppers) - SHOWN_DROPPERS
    return shown + (f" and {rest:,} more server{'s' if rest > 1 else ''}" if rest > 0 else "")


def findings(lane: Lane, snap: Snapshot, seen_ms: Mapping[str, int], now_ms: int, idle_after_ms: int,
             reference: Snapshot | None = None) -> list[Status]:
    """What this pipeline's watermark is doing, in words; ``reference`` is the configured pipeline's snapshot,
    to compare drops with."""
    out: list[Status] = []
    last = snap.last_batch
    if last is None or snap.state is None:
        return [Status(Level.INFO, f"{lane.label}: no batch yet.")]
    if lane.mode == "per-server" and last.server_watermarks:
        marks = last.server_watermarks
        pick = (min if lane.policy == "min" else max)(marks.values())
        holder = min(s for s, v in marks.items() if v == pick)
        silent = now_ms - seen_ms[holder] if holder in seen_ms else None
        run = stall(snap, now_ms)
        if lane.policy == "min":
            others = [v for s, v in marks.items() if s != holder]
            gap = f", {human_ms(max(others) - pick)} behind the fastest" if others else ""
            quiet = (f"; it has been silent for {human_ms(silent)}" if silent is not None and silent >= idle_after_ms
                     else "")
            text = f"{lane.label}: **{md(holder)}** holds the combined watermark at {clock(pick)}{gap}{quiet}."
            if run is not None:  # the problem: yellow, and called a stall (as the WatermarkFlat alert does)
                text += (f" Stalled: windows stopped closing at {clock(run.since_ms)}, {human_ms(run.held_ms(now_ms))} "
                         f"ago, while {run.arrived:,} events arrived.")
                level = Level.WARNING
            elif quiet and lane.idle:  # the remedy at work: green, and called what it is
                text += " Its idle markers move its watermark on, so windows keep closing: no stall."
                level = Level.OK
            else:
                level = Level.WARNING if quiet else Level.INFO
            out.append(Status(level, text))
        else:
            slow = min(marks, key=lambda s: marks[s])
            lost = {s: t.dropped for s, t in snap.totals.servers.items() if t.dropped}
            text = (f"{lane.label}: the fastest server **{md(holder)}** drives the watermark ({clock(pick)}); the "
                    f"slowest now, **{md(slow)}**, trails it by {human_ms(pick - marks[slow])}. Late (event, window) "
                    "pairs dropped here: " + (", ".join(f"{md(s)} {n:,}" for s, n in sorted(lost.items())) or "none"))
            if reference is not None:
                ref = {s: t.dropped for s, t in reference.totals.servers.items() if t.dropped}
                text += " (configured pipeline: " + (", ".join(f"{md(s)} {n:,}" for s, n in sorted(ref.items()))
                                                      or "none") + ")"
            out.append(Status(Level.WARNING if lost else Level.INFO, text + "."))
        ticks = sum(b.ticks for b in snap.batches)
        if lane.idle and ticks:
            out.append(Status(Level.OK, f"{lane.label}: idleness at work: {ticks:,} idle markers in the range, "
                                        f"written by the job for servers silent {human_ms(idle_after_ms)} or more, "
                                        "so a silent server stops holding the watermark back."))
        elif lane.idle:
            out.append(Status(Level.INFO, f"{lane.label}: 0 idle markers in the range: no server has been silent "
                                          f"for {human_ms(idle_after_ms)}, so idleness has had nothing to do."))
    else:
        run = stall(snap, now_ms)
        if run is not None:
            out.append(Status(Level.WARNING, f"{lane.label}: the watermark has not moved since {clock(run.since_ms)} "
                                             f"({human_ms(run.held_ms(now_ms))}) although {run.arrived:,} events "
                                             "arrived (they are all older than the newest one)."))
        else:
            out.append(Status(Level.OK, f"{lane.label}: one watermark over all servers, at "
                                        f"{clock(snap.state.next_watermark_ms)}."))
    return out


def lanes_watermarks(lanes: Sequence[Lane], snaps: Sequence[Snapshot], now_ms: int) -> go.Figure:
    """Each pipeline's watermark as its distance behind the newest event time (the configured pipeline's running
    maximum at the same batch), over the same events: a lane held back by a silent server stands above the others,
    one running ahead below, and no lane's line hides under another's."""
    fig = go.Figure()
    first = next((s for s in snaps if s.batches), None)
    newest = {b.batch: b.running_max_event_us // 1000 for b in (first.batches if first else ())
              if b.running_max_event_us}
    for i, (lane, snap) in enumerate(zip(lanes, snaps, strict=True)):
        bs = [b for b in snap.batches if b.next_watermark_ms and newest.get(b.batch)]
        behind = [(newest[b.batch] - b.next_watermark_ms) / 1000 for b in bs]
        # Each later line thinner, so lanes at the same distance show as a line inside a line, not one line.
        fig.add_trace(go.Scatter(
            x=[ts(b.batch_ts_ms) for b in bs], y=behind, name=lane.label, mode="lines",
            line={"shape": "hv", "color": PALETTE[i % len(PALETTE)], "width": max(1.5, 6 - 2 * i)},
            customdata=[[b.batch, clock(b.next_watermark_ms)] for b in bs],
            hovertemplate=f"<b>{lane.label}</b> batch %{{customdata[0]}}<br>watermark %{{customdata[1]}}, "
                          "%{y:.1f} s behind the newest event<extra></extra>"))
    fig = layout(fig, "Each pipeline's watermark behind the newest event", "seconds behind", counts=False)
    fig.update_layout(legend={"y": -0.3})
    fig.update_xaxes(title="processing time (UTC)")
    return time_axis(fig)


def server_watermarks(lane: Lane, snap: Snapshot) -> go.Figure:
    """A per-server pipeline's inputs: each server's own watermark and the combined one Spark uses."""
    fig = go.Figure()
    bs = [b for b in snap.batches if b.server_watermarks]
    servers = sorted({s for b in bs for s in (b.server_watermarks or {})})
    every = len(servers)
    if every > MAX_SERIES:  # the servers that decide the combined watermark: lowest under min, highest under max
        latest = bs[-1].server_watermarks or {}
        far = 1 if lane.policy == "min" else -1
        servers = sorted(sorted(latest, key=lambda s: (far * latest[s], s))[:MAX_SERIES])
    colors = server_colors(servers)
    # The combined line first and wide, the servers' thin and dotted on top: a server whose watermark is the
    # combined one shows inside it instead of vanishing under it.
    fig.add_trace(go.Scatter(x=[ts(b.batch_ts_ms) for b in bs],
                             y=[ts(b.next_watermark_ms) if b.next_watermark_ms else None for b in bs],
                             name=f"combined ({lane.policy})", mode="lines",
                             line={"shape": "hv", "color": "rgba(0,0,0,0.35)", "width": 7},
                             hovertemplate="<b>combined</b> %{y|%H:%M:%S.%L}<extra></extra>"))
    for s in servers:
        fig.add_trace(go.Scatter(
            x=[ts(b.batch_ts_ms) for b in bs],
            y=[ts(v) if (v := (b.server_watermarks or {}).get(s)) else None for b in bs],
            name=f"{s}'s watermark", mode="lines", line={"shape": "hv", "color": colors[s], "dash": "dot",
                                                         "width": 2},
            hovertemplate="<b>%{fullData.name}</b> %{y|%H:%M:%S.%L}<extra></extra>"))
    which = ("each server's watermark" if every <= MAX_SERIES else
             f"the {MAX_SERIES} {'lowest' if lane.policy == 'min' else 'highest'} of {every} servers' watermarks")
    fig = layout(fig, f"{lane.label}: {which}", "event time (UTC)", counts=False)
    fig.update_layout(legend={"y": -0.3})  # below the axis title
    fig.update_xaxes(title="processing time (UTC)")
    fig.update_yaxes(tickformat="%H:%M:%S")
    return time_axis(fig)
