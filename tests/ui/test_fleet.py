"""Many servers on one chart (dashboard/fleet.py): the grouping's choice at 3 and at 300 servers, and every
group's value equal to an independent sum over its servers (no Redis, no Spark)."""

from __future__ import annotations

import random
from collections import defaultdict

from dashboard.fleet import MAX_SERIES, NO_REGION, grouping
from streaming.rules.online.rollup import Minute
from streaming.schema.keys import WindowKey
from streaming.store.report import WindowRow
from streaming.store.views.online import OnlinePoint

SERVERS = [f"{r}-{k:03d}" for k in range(1, 51) for r in ("eu", "na", "sa", "as", "oc", "af")]
REGIONS = {s: s.split("-")[0] for s in SERVERS}


def test_a_few_servers_are_drawn_one_line_each() -> None:
    g = grouping(["A", "B", "C"], {}, {})
    assert g.by == "server" and g.labels == ["A", "B", "C"] and not g.grouped


def test_three_hundred_servers_in_six_regions_are_drawn_a_line_per_region() -> None:
    g = grouping(SERVERS, REGIONS, {})
    assert g.by == "region" and g.labels == ["af", "as", "eu", "na", "oc", "sa"]
    assert all(len(g.members[r]) == 50 for r in g.labels)
    some = grouping(SERVERS, {s: r for s, r in REGIONS.items() if not s.startswith("eu")}, {})
    assert some.labels[-1] == NO_REGION and len(some.members[NO_REGION]) == 50  # those without one, together


def test_without_regions_the_busiest_servers_and_the_rest_summed() -> None:
    weights = {s: i for i, s in enumerate(SERVERS)}
    g = grouping(SERVERS, {}, weights)
    assert g.by == "top" and len(g.labels) == MAX_SERIES
    assert g.labels[:-1] == SERVERS[::-1][:MAX_SERIES - 1] and g.labels[-1] == "other 293 servers"
    assert sum(len(m) for m in g.members.values()) == 300


def test_every_group_is_the_exact_sum_of_its_servers() -> None:
    rng = random.Random(7)
    g = grouping(SERVERS, REGIONS, {})
    counts = {s: rng.randint(0, 900) for s in SERVERS}
    model: dict[str, int] = defaultdict(int)
    for s, n in counts.items():
        model[REGIONS[s]] += n
    assert g.counts(counts) == dict(model)
    rows = [WindowRow(WindowKey(t, t + 60_000, s), events=rng.randint(0, 99), dropped=rng.randint(0, 9),
                      late=rng.randint(0, 9), players=rng.randint(0, 50), final=t < 120_000 or rng.random() < 0.5)
            for t in (0, 60_000, 120_000) for s in SERVERS if rng.random() < 0.8]
    for w in g.windows(rows):
        mine = [r for r in rows if r.start_ms == w.start_ms and REGIONS[r.server] == w.server]
        assert (w.events, w.dropped, w.late, w.players) == tuple(sum(getattr(r, a) for r in mine)
                                                                for a in ("events", "dropped", "late", "players"))
        assert w.final == all(r.final for r in mine)
    minutes = g.minutes([Minute(0, last=counts, peak={s: n + 5 for s, n in counts.items()})])
    assert minutes[0].last == dict(model) and minutes[0].peak == {}  # a sum of peaks is no count that ever was
    (point,) = g.history([OnlinePoint(1, 0, 0, counts, 0, 0)])
    assert point.counts == dict(model)


def test_a_past_minute_is_drawn_from_its_own_servers_not_todays() -> None:
    """A fleet of matches: an hour ago every server had another name (and those regions are forgotten since). Each
    region's line at that minute is the sum over the minute's own servers by their regions then; no region's and
    the rest's are the rest of its total."""
    rng = random.Random(11)
    then = [f"{r}-old{k:03d}" for k in range(40) for r in ("eu", "na", "sa")] + [f"x-old{k}" for k in range(5)]
    then_regions = {s: s.split("-")[0] for s in then if not s.startswith("x-")}
    counts = {s: rng.randint(0, 60) for s in then}
    minute = Minute(0)
    minute.add(counts, {}, then_regions)
    minute = Minute.from_json(minute.to_json())  # as the dashboard reads it back
    model: dict[str, int] = defaultdict(int)
    for s, n in counts.items():
        model[then_regions.get(s, NO_REGION)] += n
    today = [f"{r}-new{k:03d}" for k in range(40) for r in ("eu", "na", "sa")] + [f"x-new{k}" for k in range(5)]
    g = grouping(today, {s: s.split("-")[0] for s in today if not s.startswith("x-")}, {})
    assert g.by == "region" and g.labels == ["eu", "na", "sa", NO_REGION]
    (drawn,) = g.minutes([minute])
    assert drawn.last == {r: model[r] for r in g.labels} and sum(drawn.last.values()) == sum(counts.values())
    # the busiest servers: today's names have no count then; the rest is everything else that minute
    top = grouping(today, {}, {s: i for i, s in enumerate(today)})
    (drawn,) = top.minutes([minute])
    assert drawn.last == {**dict.fromkeys(top.labels[:-1], 0), top.labels[-1]: sum(counts.values())}
    # a minute written before regions were kept, a batch, a window: each server by the region the page knows for
    # it, a server drained since too (its region is kept until RETIRE_AFTER); one forgotten is in no line
    known = grouping(today, {**{s: s.split("-")[0] for s in today if not s.startswith("x-")}, "na-old001": "na"}, {})
    old = Minute.from_json('{"causes":{},"last":{"eu-new000":4,"na-old001":9,"eu-old000":5},"minute_ms":0,'
                           '"peak":{}}')
    assert old.regions is None and known.minutes([old])[0].last == {"eu": 4, "na": 9, "sa": 0, NO_REGION: 0}
    (point,) = known.history([OnlinePoint(1, 0, 0, {"eu-new000": 4, "na-old001": 9, "eu-old000": 5}, 0, 0)])
    assert point.counts == {"eu": 4, "na": 9, "sa": 0, NO_REGION: 0}
    rows = [WindowRow(WindowKey(0, 60_000, s), events=n, dropped=0, late=0, players=n, final=True)
            for s, n in (("eu-new000", 4), ("na-old001", 9), ("eu-old000", 5))]
    assert {w.server: w.players for w in known.windows(rows)} == {"eu": 4, "na": 9}


def test_a_lanes_watermark_chart_draws_the_servers_holding_it_back() -> None:
    from dashboard.screens.lab.model import server_watermarks
    from streaming.schema.config import Lane
    from streaming.store.views.snapshot import BatchPoint

    marks = {s: 1_800_000_000_000 + 1_000 * i for i, s in enumerate(SERVERS)}
    point = BatchPoint(batch=1, batch_ts_ms=1_800_000_100_000, watermark_ms=0, next_watermark_ms=min(marks.values()),
                       server_watermarks=marks, start_id="0-0", end_id="1-0", input=0, parsed=0, quarantined=0,
                       events=0, dropped=0, late=0)

    class Snap:
        batches = (point,)
    lane = Lane(name="per-server-min", namespace="wm.per-server-min", input_namespace="wm")
    fig = server_watermarks(lane, Snap())  # type: ignore[arg-type]
    names = [t.name for t in fig.data]
    assert len(names) == 1 + MAX_SERIES and names[0].startswith("combined")
    assert sorted(n.split("'")[0] for n in names[1:]) == sorted(SERVERS[:MAX_SERIES])  # the lowest eight
    assert "the 8 lowest of 300 servers' watermarks" in fig.layout.title.text
