"""A small, realistic pipeline run for the dashboard tests: the late-burst scenario through the real pipeline.

Events come from the generator's pure simulator, are cut into micro-batches by
arrival time and replayed through the real source, query and sink, so Redis
holds exactly what the live job would have written for that arrival pattern.
A few malformed entries ride along so the quarantine counts are not zero.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from streaming.apps.replay import ReplayBatch, replay
from streaming.rules.scenarios import Scenario
from streaming.rules.simulate import Simulator
from streaming.schema.config import Config
from watermark_client.events import Event
from watermark_client.timeutil import iso_from_us

BAD_PAYLOADS = (b"{not json", b'{"server": "A"}', b'{"server": "B", "player_id": "p1", "event_time": "yesterday"}')


def arrival_ids(events: Sequence[tuple[int, Event]], last: tuple[int, int] = (0, 0)) -> list[str]:
    """The writer's explicit entry IDs: ``{arrival_ms}-{seq}``, kept strictly above ``last``."""
    out = []
    ms_last, seq = last
    for arrival, _ in events:
        ms = arrival // 1000
        ms_last, seq = (ms, 0) if ms > ms_last else (ms_last, seq + 1)
        out.append(f"{ms_last}-{seq}")
    return out


@dataclass(frozen=True)
class Seeded:
    cfg: Config
    t0_us: int
    lines: list[dict]  # the accepted-or-dropped events as oracle lines (batch, server, player_id, event_time)
    bad: int
    document: dict
    entries: list[tuple[str, Event]]  # (entry ID, event) for every well-formed event written


def seed_pipeline(redis_url: str, tmp_path: Path, *, seed: int = 7, rate: float = 10, count: int = 4_000,
                  batch_arrival_ms: int = 40_000, delay_ms: int = 10_000, slide_ms: int = 60_000,
                  minutes_ago: int = 15, scenario: str | Scenario = "late-burst",
                  rename: Mapping[str, tuple[str, str | None]] | None = None) -> Seeded:
    """About 6.7 minutes of late-burst traffic, ending minutes before now, in batches of
    ``batch_arrival_ms`` of arrival time; entry IDs are the simulated arrival times. Windows are a
    minute long, sliding by ``slide_ms``. Starting under 10 minutes ago keeps the sink from trimming
    any of the stream (it keeps 10 minutes). ``rename``: server -> (the name and region its events carry instead),
    for names the simulator would refuse (a producer's markup)."""
    ns = f"dash-{uuid.uuid4().hex[:8]}"
    cfg = Config(redis_url=redis_url, embedded_redis=False, namespace=ns, window_ms=60_000, slide_ms=slide_ms,
                 delay_ms=delay_ms, trigger_ms=1_000, checkpoint_dir=str(tmp_path / ns), spark_master="local[2]",
                 retention_ms=100 * 365 * 86_400_000)
    t0_us = (int(time.time()) // 60 - minutes_ago) * 60_000_000  # a window boundary, minutes ago
    events = list(Simulator(scenario, seed=seed, start_us=t0_us, rate=rate, count=count))
    if rename:
        events = [(at, replace(ev, server=rename[ev.server][0], region=rename[ev.server][1]) if ev.server in rename
                   else ev) for at, ev in events]
    groups: dict[int, list[bytes]] = {}
    ids: dict[int, list[str]] = {}
    lines: list[dict] = []
    entries: list[tuple[str, Event]] = []
    for (arrival_us, ev), entry_id in zip(events, arrival_ids(events), strict=True):
        entries.append((entry_id, ev))
        label = (arrival_us - t0_us) // (batch_arrival_ms * 1000)
        groups.setdefault(label, []).append(ev.payload())
        ids.setdefault(label, []).append(entry_id)
        lines.append({"batch": label, "server": ev.server, "player_id": ev.player_id,
                      "event_time": iso_from_us(ev.event_time_us)})
    for i, payload in enumerate(BAD_PAYLOADS):  # at the end of the first batches
        label = sorted(groups)[i]
        groups[label].append(payload)
        ms, seq = map(int, ids[label][-1].split("-"))
        ids[label].append(f"{ms}-{seq + 1}")
    batches = [ReplayBatch(label, groups[label], ids[label]) for label in sorted(groups)]
    document = replay(batches, cfg)
    return Seeded(cfg=cfg, t0_us=t0_us, lines=lines, bad=len(BAD_PAYLOADS), document=document,
                  entries=entries)
