"""Live ops' rows and texts: snapshots and the online view in, words and table rows out (pure, tested as tables)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from urllib.parse import urlencode

from dashboard import charts
from dashboard.fleet import NO_REGION, Grouping, latest_per_server
from dashboard.status import clock, human_ms
from dashboard.text import md
from streaming.alerting.health import Verdict
from streaming.rules.fleet import in_view
from streaming.rules.online.rollup import TOTAL, region_key
from streaming.rules.server_clock import NOTICEABLE_AHEAD_MS
from streaming.store.views.online import OnlineView
from streaming.store.views.snapshot import Snapshot, WindowRow


def window_status(w: WindowRow | None, bounds: tuple[int, int] | None, watermark_ms: int,
                  head_ms: int | None) -> str:
    """Says how far the window has got, so a small early count is not mistaken for a drop in players."""
    if w is None:
        where = "" if bounds is None else f" ({charts.ts(bounds[0]):%H:%M:%S}–{charts.ts(bounds[1]):%H:%M:%S})"
        return f"no events in the current window{where} yet"
    span = f"window {charts.ts(w.start_ms):%H:%M:%S}–{charts.ts(w.end_ms):%H:%M:%S}"
    if w.final:
        return f"{span} · final"
    seen = "" if head_ms is None else f" ({human_ms(head_ms - w.start_ms)} of {human_ms(w.end_ms - w.start_ms)} seen)"
    return (f"{span}{seen} · provisional: final once the watermark (now {clock(watermark_ms)}) reaches "
            f"{clock(w.end_ms)}")


def live_servers(snap: Snapshot) -> list[str]:
    """The servers the live views show: every server neither retired nor drained, and any retired one with players
    still."""
    counts = snap.online.counts if snap.online else {}
    return sorted({*snap.servers, *(s for s, n in counts.items()
                                    if in_view(retired=s in snap.retired, drained=s in snap.drained, players=n))})


def series_labels(g: Grouping) -> dict[str, str]:
    """The stored series a time chart draws for a grouping, with their names: the total and each region (or each
    server; past 8 servers without regions the busiest, the rest having no series of their own)."""
    out = {TOTAL: "All servers"}
    for label, servers in g.members.items():
        if g.by == "region" and label != NO_REGION:
            out[region_key(label)] = label
        elif g.by != "region" and len(servers) == 1:
            out[servers[0]] = label
    return out


def peak_rows(v: OnlineView, g: Grouping, labels: Mapping[str, str]) -> list[dict[str, object]]:
    """Players online now, the day's peak and the highest ever, each with when, per series drawn."""
    grouped = g.counts(v.counts)
    rows = []
    for series, label in labels.items():
        now = v.total if series == TOTAL else grouped.get(label, v.counts.get(series, 0))
        day, ever = v.peaks.get(series), v.peaks_ever.get(series)
        rows.append({"": label, "Online now": now, "Peak today": day[0] if day else None,
                     "Today at (UTC)": clock(day[1]) if day else "", "Highest ever": ever[0] if ever else None,
                     "Ever at (UTC)": f"{charts.ts(ever[1]):%Y-%m-%d %H:%M}" if ever else ""})
    return rows


def clock_notes(v: OnlineView, shown: int = 8, retired: Collection[str] = ()) -> list[str]:
    """Servers whose clock runs ahead (by how much) and servers gone silent, in words: each server's players
    are judged by its own clock (streaming.rules.server_clock), so neither takes another's players offline."""
    notes = []
    ahead = sorted(((c.ahead_ms, s) for s, c in v.clocks.items() if c.ahead_ms > NOTICEABLE_AHEAD_MS), reverse=True)
    if ahead:
        names = ", ".join(f"{md(s)} by {human_ms(ms)}" for ms, s in ahead[:shown])
        more = f" and {len(ahead) - shown} more" if len(ahead) > shown else ""
        notes.append(f"Clock ahead: {names}{more} (events arrived before they happened by that server's clock). "
                     "Its players are judged by its own clock; no other server's are affected.")
    # how far a clock has run on by arrival time since the server's last event it could use
    silent = sorted((((c.clock_us - c.clock_at_heard_us) // 1000, s) for s, c in v.clocks.items()
                     if c.clock_us - c.clock_at_heard_us > v.timeout_ms * 1000 and s not in retired), reverse=True)
    if silent:
        names = ", ".join(f"{md(s)} ({human_ms(ms)})" for ms, s in silent[:shown])
        more = f" and {len(silent) - shown} more" if len(silent) > shown else ""
        notes.append(f"Timing out: {names}{more} of arrival time without an event their clock could use "
                     "(nothing sent, or only late events); their clocks run on by arrival time, so their players "
                     "time out, and they are counted again from their next event.")
    return notes


def silent_note(silent: Mapping[str, int], now_ms: int, after_ms: int, shown: int = 8) -> str | None:
    """The servers silent by ServerSilent's rule (``streaming.rules.fleet.life``), the longest first: the same
    servers the alert counts and the Servers table marks "silent"."""
    if not silent:
        return None
    ranked = sorted(silent.items(), key=lambda kv: (kv[1], kv[0]))
    names = ", ".join(f"{md(s)} ({human_ms(now_ms - t)})" for s, t in ranked[:shown])
    more = f" and {len(ranked) - shown:,} more" if len(ranked) > shown else ""
    return (f"Silent: {names}{more}: no event for {human_ms(after_ms)} or more while players were online on them "
            "(ServerSilent's rule). Their numbers stand as of their last event.")


def online_loss_note(v: OnlineView) -> str | None:
    """What a loss of Redis' data did to the online view, in words; None when nothing was lost."""
    if v.partial:
        assert v.partial_until_ms is not None
        return (f"Partial: Redis came back empty before batch {v.lost_at_batch} while the job restarted, so the "
                "online view is being rebuilt from new events. Players who have not sent an event since are "
                f"missing, and their next event counts as a login, until the watermark reaches "
                f"{clock(v.partial_until_ms)} (now {clock(v.watermark_ms)}; by then they would have timed out).")
    if v.lost_at_batch is not None:
        how = "rebuilt from new events" if v.partial_until_ms is not None else "rewritten from the job's copy"
        return (f"Redis came back empty before batch {v.lost_at_batch}. Players online are whole again ({how}); "
                "transitions, peaks and the trend from before the loss are gone.")
    return None


def window_table(windows: tuple[WindowRow, ...], limit: int | None = None) -> list[dict[str, object]]:
    """The windows as rows, the newest first; ``limit``: at most that many."""
    newest = windows[::-1] if limit is None else windows[:-limit - 1:-1]
    return [
        {"Server": w.server, "Start (UTC)": f"{charts.ts(w.start_ms):%H:%M:%S}",
         "End (UTC)": f"{charts.ts(w.end_ms):%H:%M:%S}", "Players": f"{w.players:,}", "Events": f"{w.events:,}",
         "Late accepted": f"{w.late:,}", "Dropped": f"{w.dropped:,}", "Status": "final" if w.final else "provisional"}
        for w in newest
    ]


def as_of(v: Verdict) -> str | None:
    """When the numbers last moved, if most servers are silent (the one rule: ``streaming.alerting.health``), for
    the headline's label; None while servers speak."""
    if v.fleet is not None and v.fleet.heard_ms:
        return clock(v.fleet.heard_ms)
    return None


STATES = ("live", "silent", "drained", "retired")


def states_by_region(snap: Snapshot, silent: Collection[str]) -> list[dict[str, object]]:
    """Servers by state in each region (``streaming.rules.fleet``: silent by ServerSilent's rule), regions in one
    order (by name, those without one last), and the fleet's total: a fleet at a glance.

    Drained and retired servers count under the region their events carried, while the page still knows it."""
    rows: dict[str, dict[str, int]] = {}
    for state, names in (("live", [s for s in snap.servers if s not in silent]), ("silent", list(silent)),
                         ("drained", list(snap.drained)), ("retired", list(snap.retired))):
        for s in names:
            region = snap.regions.get(s) or NO_REGION
            rows.setdefault(region, dict.fromkeys(STATES, 0))[state] += 1
    order = sorted(rows, key=lambda r: (r == NO_REGION, r))
    out: list[dict[str, object]] = [{"Region": r, **{k.capitalize(): rows[r][k] for k in STATES}} for r in order]
    if len(out) > 1:
        out.append({"Region": "all", **{k.capitalize(): sum(rows[r][k] for r in rows) for k in STATES}})
    return out


def biggest_drops(v: OnlineView, servers: Collection[str], n: int = 5) -> list[tuple[str, int, int]]:
    """The servers whose players online fell most over the last hour: (server, an hour ago, now), the largest
    fall first; only falls (a server that gained is not listed)."""
    if not v.minutes:
        return []
    first = v.minutes[0].last
    falls = [(s, first.get(s, 0), v.counts.get(s, 0)) for s in servers if first.get(s, 0) > v.counts.get(s, 0)]
    return sorted(falls, key=lambda x: (x[2] - x[1], x[0]))[:n]


def slowest_clocks(snap: Snapshot, n: int = 5) -> list[tuple[str, float]]:
    """The servers whose events arrive latest behind their own clock: the worse of ingest and processing lag p95
    in each server's newest batch (ms, ``ServerRecord.worse_lag_p95``, as the Lag page heads it), the slowest
    first."""
    worse = {s: w[1] for s, (_, sb) in latest_per_server(snap.batches, snap.servers).items()
             if (w := sb.worse_lag_p95()) is not None}
    return sorted(worse.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


MAP_STATES = ("live", "empty", "silent")
"""A live server's state on the fleet map: speaking with players, speaking with none, silent (ServerSilent's rule)."""
MAP_COLUMNS = 25
"""Cells a row of a region's block: 300 servers in 6 regions are two rows each."""


def fleet_cells(snap: Snapshot, v: OnlineView, silent: Collection[str]) -> list[dict[str, object]]:
    """Every server in the live views as one cell of the fleet map: its region's block (regions in one order, as
    :func:`states_by_region`), its place in it (by name), its state (:data:`MAP_STATES`) and players online, and
    the address of its events (the Events page opens on it: ``events?server=``)."""
    by_region: dict[str, list[str]] = {}
    for s in snap.servers:
        by_region.setdefault(snap.regions.get(s) or NO_REGION, []).append(s)
    cells: list[dict[str, object]] = []
    for region in sorted(by_region, key=lambda r: (r == NO_REGION, r)):
        for i, s in enumerate(sorted(by_region[region])):
            state = "silent" if s in silent else "live" if v.counts.get(s, 0) else "empty"
            cells.append({"server": s, "region": region, "state": state, "players": v.counts.get(s, 0),
                          "col": i % MAP_COLUMNS, "row": i // MAP_COLUMNS,
                          "href": "events?" + urlencode({"server": s})})
    return cells
