"""The Alerts page's rows and its timeline, from what the monitor wrote (no Redis, no Streamlit: unit-tested).

The timeline pairs each alert's firing with its resolve by alert and start time (a notice's ``starts_at_ms``),
so a bar spans exactly the time the alert fired; one still firing reaches now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import plotly.graph_objects as go

from dashboard.charts import HEIGHT, Mark, span_text, tick_format, ts
from dashboard.status import clock, human_ms
from dashboard.text import md
from streaming.alerting.conditions import RULES, SUBJECT_LABEL, one_server
from streaming.alerting.health import Health
from streaming.alerting.lifecycle import AlertState, Notice
from streaming.alerting.observation import MAIN
from streaming.store.alert_store import DAY_MS

SEVERITY_COLOR = {"critical": "#d62728", "warning": "#ff7f0e"}
SUBJECT_NAMES = {"server": "Server", "pipeline": "Pipeline", "region": "Region", "": ""}
SUBJECT_PLURAL = "subjects"


def subject_text(rule: str, subject: str) -> str:
    label = SUBJECT_LABEL[rule]
    if label == "region" and not subject:  # ServerSilent for the servers whose events carry no region
        return "servers without a region"
    return f"{SUBJECT_NAMES[label].lower()} {subject}" if label else "-"


def alert_rows(alerts: Sequence[AlertState], now_ms: int) -> list[dict[str, str]]:
    """One row per alert, most severe and oldest first."""
    order = sorted(alerts, key=lambda a: (RULES[a.rule][1] != "critical", a.since_ms, a.key))
    return [{"Alert": a.alertname, "Severity": RULES[a.rule][1], "About": subject_text(a.rule, a.subject),
             "Since": f"{clock(a.since_ms)} ({human_ms(max(0, now_ms - a.since_ms))})",
             "What": a.summary + (f" Not resolved while {a.held}." if a.status == "firing" and a.held else "")}
            for a in order]


NAMED = 8
"""Subjects named per alert in the firing line; the rest counted (an outage of 300 servers is one line)."""


def health_text(health: Mapping[str, Health]) -> str:
    """``Health (the monitor's verdict): **main** live · **per-server-min** stalled``: the pipeline first, the lab
    lanes after it by name; the words are the states ``/metrics`` gives (``wm_pipeline_health``)."""
    names = sorted(health, key=lambda n: (n != MAIN, n))
    return "Health (the monitor's verdict): " + " · ".join(f"**{n}** {health[n].value.replace('_', ' ')}"
                                                            for n in names)


def firing_text(alerts: Sequence[AlertState]) -> str | None:
    """``4 alerts firing: PlayersDrop (server B), ServerSilent (38 servers in eu, eu-7 in na).``, critical first,
    one part per alert name however many servers it covers, a region's one silent server named; None when nothing
    fires."""
    firing = [a for a in alerts if a.status == "firing"]
    if not firing:
        return None
    by_name: dict[str, list[AlertState]] = {}
    for a in sorted(firing, key=lambda a: (RULES[a.rule][1] != "critical", a.alertname, a.subject)):
        by_name.setdefault(a.alertname, []).append(a)
    parts = []
    for name, group in by_name.items():
        if group[0].rule == "server_silent":  # one alert a region, its value the count of silent servers in it
            counts = [(int(a.value or 0), a.subject, one_server(a.servers)) for a in group]
            parts.append(f"{name} (" + ", ".join((md(alone) if n == 1 and alone else
                                                  f"{n:,} server{'s' if n != 1 else ''}")
                                                 + (f" in {md(region)}" if region else "")
                                                 for n, region, alone in sorted(counts, reverse=True)[:NAMED])
                         + (f" and {len(counts) - NAMED} more regions" if len(counts) > NAMED else "") + ")")
            continue
        label = SUBJECT_NAMES[SUBJECT_LABEL[group[0].rule]].lower()
        subjects = [md(a.subject) for a in group if a.subject]
        named = ", ".join(subjects[:NAMED]) + (f" and {len(subjects) - NAMED} more" if len(subjects) > NAMED else "")
        parts.append(f"{name} ({label}{'s' if len(subjects) > 1 else ''} {named})" if subjects else name)
    return f"{len(firing)} alert{'s' if len(firing) > 1 else ''} firing: {', '.join(parts)}."


def held_rows(alerts: Sequence[AlertState], now_ms: int) -> list[dict[str, str]]:
    return [{"Alert": a.alertname, "About": subject_text(a.rule, a.subject),
             "Since": f"{clock(a.since_ms)} ({human_ms(max(0, now_ms - a.since_ms))})",
             "Would say": a.summary, "Held because": a.held or ""}
            for a in sorted(alerts, key=lambda a: a.key)]


def history_rows(history: Sequence[Notice]) -> list[dict[str, str]]:
    """Newest first."""
    return [{"At": clock(n.at_ms), "Alert": n.alertname, "About": subject_text(n.rule, n.subject),
             "Event": "fired" if n.status == "firing" else f"resolved after {human_ms(n.at_ms - n.starts_at_ms)}",
             "What": n.summary}
            for n in reversed(history)]


@dataclass(frozen=True)
class Span:
    label: str
    severity: str
    start_ms: int
    end_ms: int
    open: bool
    alertname: str = field(default="", compare=False)  # what the marks over the time charts group by
    subject: str = field(default="", compare=False)


def spans(history: Sequence[Notice], firing: Sequence[AlertState], now_ms: int,
          since_ms: int | None = None) -> list[Span]:
    """Each firing since ``since_ms`` (default: a day ago) as a span; one firing now reaches ``now_ms`` (its start
    cut at ``since_ms``)."""
    since = now_ms - DAY_MS if since_ms is None else since_ms
    resolved = {(n.rule, n.subject, n.starts_at_ms): n.at_ms for n in history if n.status == "resolved"}
    starts = {(n.rule, n.subject, n.starts_at_ms) for n in history if n.status == "firing"}
    starts |= {(a.rule, a.subject, a.since_ms) for a in firing if a.status == "firing"}
    starts |= set(resolved)
    out = []
    for rule, subject, start in sorted(starts, key=lambda k: (k[2], k[0], k[1])):
        end = resolved.get((rule, subject, start))
        if end is not None and end < since:
            continue
        label = RULES[rule][0] + (f" · {subject}" if subject else "")
        out.append(Span(label, RULES[rule][1], max(start, since), end if end is not None else now_ms,
                        end is None, RULES[rule][0], subject))
    return out


def merged(items: Sequence[Span]) -> list[Span]:
    """Per alert name, overlapping firings as one span that says how many subjects fired in it: an outage of 300
    servers is one span ("ServerSilent · 300 servers"), not 300."""
    out: list[Span] = []
    for name in sorted({s.alertname for s in items}):
        mine = sorted((s for s in items if s.alertname == name), key=lambda s: s.start_ms)
        group: list[Span] = []
        for s in [*mine, None]:
            if s is not None and (not group or s.start_ms <= max(g.end_ms for g in group)):
                group.append(s)
                continue
            subjects = sorted({g.subject for g in group if g.subject})
            what = f" · {subjects[0]}" if len(subjects) == 1 else f" · {_count(group[0], len(subjects))}" \
                if subjects else ""
            out.append(Span(f"{name}{what}", group[0].severity, min(g.start_ms for g in group),
                            max(g.end_ms for g in group), any(g.open for g in group), name,
                            subjects[0] if len(subjects) == 1 else ""))
            group = [s] if s is not None else []
    return sorted(out, key=lambda m: (m.start_ms, m.label))


def _count(span: Span, n: int) -> str:
    """``300 servers``: how many subjects, named by what they are."""
    rule = next((r for r, (name, _) in RULES.items() if name == span.alertname), "")
    label = SUBJECT_LABEL.get(rule, "")
    return f"{n} {label}s" if label else f"{n} {SUBJECT_PLURAL}"


def alert_marks(items: Sequence[Span]) -> list[Mark]:
    """Fired alerts to draw over the time charts: one range per :func:`merged` span."""
    return [Mark(s.start_ms, s.end_ms, s.label, SEVERITY_COLOR[s.severity]) for s in merged(items)]


def timeline(items: Sequence[Span], now_ms: int) -> go.Figure:
    """A bar per firing, one row per alert and subject, firings of one alert at once merged (:func:`merged`: an
    outage of 300 servers is one row); the axis spans the firings shown, up to now."""
    items = merged(items)
    fig = go.Figure()
    for severity in ("critical", "warning"):
        mine = [s for s in items if s.severity == severity]
        if not mine:
            continue
        fig.add_trace(go.Bar(
            y=[s.label for s in mine], x=[max(s.end_ms - s.start_ms, 1_000) for s in mine],
            base=[ts(s.start_ms) for s in mine], orientation="h", name=severity,
            marker={"color": SEVERITY_COLOR[severity]},
            customdata=[[clock(s.start_ms), "still firing" if s.open else clock(s.end_ms),
                         human_ms(s.end_ms - s.start_ms)] for s in mine],
            hovertemplate="%{y}<br>fired %{customdata[0]}, %{customdata[1]}<br>for %{customdata[2]}<extra></extra>"))
    if items:
        first = min(s.start_ms for s in items)
        pad = max(30_000, (now_ms - first) // 40)
        # bars are durations on a time base: charts.frame does not see a time axis, so it is framed here
        fig.update_xaxes(type="date", range=[ts(first - pad), ts(now_ms + pad)], tickformat=tick_format(now_ms - first))
        fig.update_layout(title_subtitle_text=span_text(first, now_ms, asked_ms=DAY_MS))
    labels = sorted({s.label for s in items})
    fig.update_layout(title={"text": "Alerts fired in the last day", "x": 0, "xanchor": "left"},
                      height=max(HEIGHT // 2, 60 + 28 * len(labels)), barmode="overlay", bargap=0.35,
                      margin={"l": 10, "r": 10, "t": 64, "b": 10}, hovermode="closest",
                      legend={"orientation": "h", "y": -0.2, "yanchor": "top"},
                      yaxis={"categoryorder": "array", "categoryarray": labels[::-1], "title": None})
    return fig
