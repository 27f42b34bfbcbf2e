"""The Events page's rows and texts (pure, tested as tables)."""

from __future__ import annotations

from collections.abc import Sequence

from dashboard.screens.events import figures
from dashboard.status import clock
from streaming.rules.eventview import STATUS_LABELS, EventPoint
from streaming.store.views.events import PlayerEvents
from streaming.store.views.snapshot import Snapshot

ALL = "all servers"
"""The server selector's choice for every server."""


def latest_server(snap: Snapshot) -> str:
    """The server whose events the page opens on: the most dropped and late-accepted events in the batches
    shown, else the first server (all servers when there is none)."""
    late: dict[str, int] = {}
    for b in snap.batches:
        for server, sb in b.servers.items():
            late[server] = late.get(server, 0) + sb.dropped + sb.late
    ranked = [s for s in snap.servers if late.get(s)]
    if ranked:
        return max(ranked, key=lambda s: late[s])
    return snap.servers[0] if snap.servers else ALL


def point_rows(points: Sequence[EventPoint]) -> list[dict[str, object]]:
    """Events as table rows, in people's words."""
    return [{
        "Arrived": figures.clock_ms(p.arrival_ms), "Event time": figures.clock_ms(p.event_time_us // 1000),
        "Server": p.server,
        "Player": p.player_id, "Kind": p.kind or "", "Batch": p.batch,
        "Watermark met": figures.clock_ms(p.watermark_ms) if p.watermark_ms is not None else "",
        "Status": STATUS_LABELS[p.status],
        "Windows": "; ".join(f"{figures.clock_ms(w.window.start_ms)}–{figures.clock_ms(w.window.end_ms)} "
                             f"{figures.VERDICT_LABELS[w.verdict]}" for w in p.windows),
    } for p in points]


def lookup_coverage(found: PlayerEvents) -> str:
    """What the search covered, in words: where the stream's part started and stopped."""
    if found.stream_from_ms is None and found.trimmed:
        text = "The input stream holds nothing from that time any more (it has been trimmed)"
    elif found.stream_from_ms is not None and found.stream_from_ms > found.lo_ms and found.trimmed:
        text = (f"The input stream holds entries from {clock(found.stream_from_ms)} on ({found.trimmed:,} older "
                "ones were trimmed): earlier on-time events are not in it")
    else:
        text = "Searched the whole range in the input stream"
    if found.capped_at_ms is not None:
        text += (f"; the search stopped after {found.scanned:,} entries, at {clock(found.capped_at_ms)}: narrow the "
                 "time to search past it")
    return text + ". Late events (dropped or late but accepted) come from those kept, whenever they arrived."
