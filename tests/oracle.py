"""An independent oracle for the check document, written from the issue's rules alone.

It shares no code with ``streaming/``: it works in integer milliseconds with
its own ISO parsing, so a bug in the product's window math or late rule shows
up as a difference rather than being reproduced.
"""

from __future__ import annotations

import calendar
import random
import time
from collections import defaultdict

T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def to_ms(iso: str) -> int:
    """``YYYY-MM-DDTHH:MM:SS[.fff]Z`` -> epoch ms (the only form the event sets use)."""
    base, _, frac = iso.rstrip("Z").partition(".")
    secs = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
    return secs * 1000 + (int((frac + "000")[:3]) if frac else 0)


def to_iso(ms: int) -> str:
    secs, rem = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{rem:03d}Z"


def windows_of(t: int, length: int, slide: int) -> list[tuple[int, int]]:
    out = []
    k = t // slide
    while k * slide + length > t:
        out.append((k * slide, k * slide + length))
        k -= 1
    return out


Judged = tuple[dict, int, list[tuple[int, int, bool]]]


def _run(lines: list[dict], length: int, slide: int, delay: int, per_server: str | None = None,
         servers: str = "", idle: bool = False, delays: dict[int, int] | None = None) -> tuple[list[Judged], int]:
    """Every line in batch order with the watermark its batch met and each window's ``(start, end, dropped)``,
    and the watermark after the last batch. Idle markers (``"kind": "idle"``) have no windows."""
    by_batch: dict[int, list[dict]] = defaultdict(list)
    for line in lines:
        by_batch[line["batch"]].append(line)
    wm = 0
    own: dict[str, int] = {}
    out = []
    for label in sorted(by_batch):
        delay = (delays or {}).get(label, delay)
        max_t = None
        max_by_server: dict[str, int] = {}
        for ev in by_batch[label]:
            t = to_ms(ev["event_time"])
            marker = ev.get("kind") == "idle"
            if not marker or (per_server and idle):
                max_by_server[ev["server"]] = max(t, max_by_server.get(ev["server"], t))
            if marker:
                out.append((ev, wm, []))
                continue
            max_t = t if max_t is None else max(max_t, t)
            out.append((ev, wm, [(start, end, end <= wm) for start, end in windows_of(t, length, slide)]))
        if per_server:
            for server in servers:
                if server in max_by_server:
                    own[server] = max(own.get(server, max_by_server[server] - delay), max_by_server[server] - delay)
                else:
                    own.setdefault(server, 0)
            wm = max(wm, (min if per_server == "min" else max)(own.values()))
        elif max_t is not None:
            wm = max(wm, max_t - delay)
    return out, wm


def judged(lines: list[dict], length: int, slide: int, delay: int) -> list[Judged]:
    """Every line in batch order with the watermark its batch met and each window's ``(start, end, dropped)``."""
    return _run(lines, length, slide, delay)[0]


def event_status(line: dict, wm: int, windows: list[tuple[int, int, bool]]) -> str:
    """One word per event: dropped from all windows, from some (sliding), late but accepted, or on time."""
    dropped = sum(d for _, _, d in windows)
    if dropped == len(windows):
        return "dropped"
    if dropped:
        return "partly_dropped"
    return "late_accepted" if to_ms(line["event_time"]) < wm else "on_time"


def oracle(lines: list[dict], length: int, slide: int, delay: int, with_late: bool = False, *,
           per_server: str | None = None, servers: str = "", idle: bool = False,
           delays: dict[int, int] | None = None) -> dict:
    """The check document; ``with_late`` adds each window's late-but-accepted count (``late``).

    ``per_server`` ("min"/"max"): each server in ``servers`` has its own watermark (0 until it has data),
    combined by that policy after every batch. Lines with ``"kind": "idle"`` are idle markers: never
    counted, they move their server's watermark only with ``idle``. ``delays`` maps a batch label to the
    delay in force from that batch on (a restart with a new delay).
    """
    acc: dict[tuple[int, int, str], dict] = {}
    batches: dict[int, dict] = {}
    rows, wm_final = _run(lines, length, slide, delay, per_server, servers, idle, delays)
    for ev, wm, windows in rows:
        b = batches.setdefault(ev["batch"], {"batch": ev["batch"], "watermark": to_iso(wm), "input": 0,
                                             "dropped": 0})
        b["input"] += 1
        t = to_ms(ev["event_time"])
        for start, end, dropped in windows:
            cell = acc.setdefault((start, end, ev["server"]), {"events": 0, "players": set(), "dropped": 0,
                                                              "late": 0})
            if dropped:
                cell["dropped"] += 1
                b["dropped"] += 1
            else:
                cell["events"] += 1
                cell["late"] += t < wm
                cell["players"].add(str(ev["player_id"]))
    windows = [
        {"server": server, "start": to_iso(start), "end": to_iso(end), "events": c["events"],
         "players": len(c["players"]), "dropped": c["dropped"], "final": end <= wm_final,
         **({"late": c["late"]} if with_late else {})}
        for (start, end, server), c in sorted(acc.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1]))
    ]
    return {"batches": [batches[k] for k in sorted(batches)], "windows": windows}


def windows_part(doc: dict) -> dict:
    """A check document without its ``online`` list, to compare with :func:`oracle` (which has none)."""
    return {k: v for k, v in doc.items() if k != "online"}


def random_event_set(seed: int, batches: int = 6, per_batch: int = 25, servers: str = "ABC") -> list[dict]:
    """Batches of events around a moving 'now', with late and very late stragglers and
    events on exact window boundaries, where off-by-one mistakes live."""
    rng = random.Random(seed)
    now = T0_MS
    lines = []
    for b in range(batches):
        now += rng.randint(1, 8) * 60_000
        for _ in range(rng.randint(1, per_batch)):
            roll = rng.random()
            if roll < 0.6:
                t = now - rng.randint(0, 120_000)
            elif roll < 0.85:
                t = now - rng.randint(120_000, 1_200_000)
            else:
                t = now - rng.randint(1_200_000, 3_600_000)
            if rng.random() < 0.2:
                t -= t % 300_000  # exactly on a 5-minute boundary
            lines.append({"server": rng.choice(servers), "player_id": f"p{rng.randint(1, 9)}",
                          "event_time": to_iso(t), "batch": b * 2 + rng.randint(0, 1)})
    return lines


def online_oracle(batches: list[list[tuple]], delay: int, timeout: int) -> list[dict[str, set[str]]]:
    """Players online per server after each batch, written from the rule alone (docs/semantics.md, "Who is
    online"): each server is judged by its own clock, never another's.

    Events are ``(server, player, event_ms, kind)`` or ``(..., arrival_ms)`` in arrival order (no arrival: 0).
    An event is accepted iff its time is above its server's watermark in force and its player has no later
    accepted one (event time, then arrival). After the batch each server's clock moves: expected is its clock
    when it last moved on events plus the arrival time passed since (the server's newest arrival in the batch,
    else the batch's newest); it moves to the newest accepted time among its players in the batch that is at
    most ``timeout`` past the expectation, or to the second-newest of its kept players past that bound when
    two are (then its players whose latest time is at or below that bound move forward by the clock's step over
    the expectation); failing both, to the expectation. A server's first batch: its newest accepted time. Before a
    batch is accepted, a server whose newest event in it (late or not) is more than ``timeout`` behind its
    expectation, from two players or more, in every batch of its for ``timeout`` of arrival time, is set back:
    clock to that event, watermark to it minus the delay. Watermark: ``max(watermark, clock - delay)``. A player
    is kept while their latest event is a logout above the watermark or another event whose time + timeout is
    above it; online iff kept and not logged out.
    """
    latest: dict[tuple[str, str], tuple[int, int, str | None]] = {}
    wm: dict[str, int] = {}
    clock: dict[str, int] = {}
    moved: dict[str, tuple[int, int]] = {}  # server -> (arrival when its events last moved it, its clock then)
    behind_since: dict[str, int] = {}  # server -> arrival since which its batches are all far behind its clock
    seq = 0
    out = []
    for batch in batches:
        arrivals: dict[str, int] = {}
        newest_of: dict[str, int] = {}
        players_of: dict[str, set[str]] = defaultdict(set)
        for server, player, t, _kind, *arrival in batch:
            arrivals[server] = max(arrivals.get(server, 0), arrival[0] if arrival else 0)
            newest_of[server] = max(newest_of.get(server, t), t)
            players_of[server].add(player)
        for server, newest_t in newest_of.items():  # a clock set back: judged from its newest event again
            if server not in clock:
                continue
            expected = moved[server][1] + max(0, arrivals[server] - moved[server][0])
            if len(players_of[server]) < 2 or newest_t >= expected - timeout:
                behind_since.pop(server, None)
            elif server not in behind_since:
                behind_since[server] = arrivals[server]
            elif arrivals[server] - behind_since[server] >= timeout:
                clock[server], moved[server] = newest_t, (arrivals[server], newest_t)
                wm[server] = newest_t - delay
                behind_since.pop(server)
        applied: dict[str, dict[str, int]] = defaultdict(dict)
        for server, player, t, kind, *_arrival in batch:
            seq += 1
            key = (server, player)
            if t > wm.get(server, 0) and (key not in latest or (t, seq) > latest[key][:2]):
                latest[key] = (t, seq, kind)
                applied[server][player] = t
        newest = max(arrivals.values(), default=None)
        for server in sorted(set(clock) | set(arrivals)):
            now = arrivals.get(server, newest)
            times = list(applied[server].values())
            if server not in clock:
                if not times:
                    continue
                clock[server] = max(times)
                moved[server] = (now, clock[server])
            elif now is not None:
                expected = moved[server][1] + max(0, now - moved[server][0])
                bound = expected + timeout
                near = [t for t in times if t <= bound]
                far = sorted((t for (s, _), (t, _, _) in latest.items() if s == server and t > bound), reverse=True)
                candidates = ([max(near)] if near else []) + ([far[1]] if len(far) >= 2 else [])
                if candidates:
                    clock[server] = max(clock[server], *candidates)
                    moved[server] = (now, clock[server])
                    if clock[server] > bound:  # set forward: its players on the old clock move with it
                        step = clock[server] - expected
                        for key, (t, sq, kind) in list(latest.items()):
                            if key[0] == server and t <= bound:
                                latest[key] = (t + step, sq, kind)
                else:
                    clock[server] = max(clock[server], expected)
            wm[server] = max(wm.get(server, 0), clock[server] - delay)
        for key, (t, _, kind) in list(latest.items()):
            w = wm.get(key[0], 0)
            if (kind == "logout" and t <= w) or (kind != "logout" and t + timeout <= w):
                del latest[key]
        online: dict[str, set[str]] = defaultdict(set)
        for (server, player), (_, _, kind) in latest.items():
            if kind != "logout":
                online[server].add(player)
        out.append(dict(online))
    return out


def random_online_batches(seed: int, batches: int = 8, per_batch: int = 8) -> list[list[tuple]]:
    """Logins, heartbeats, logouts and kind-less events of a few players on two servers around a
    moving 'now', on a 500 ms grid so equal event times happen, some late, some far apart."""
    rng = random.Random(seed)
    now = 0  # ms after T0_MS
    out = []
    for _ in range(batches):
        now += rng.choice([2_000, 5_000, 9_000, 15_000])
        batch = []
        for _ in range(rng.randint(0, per_batch)):
            t = now - rng.choice([0, 0, 500, 1_000, 3_000, 6_000, 12_000])
            batch.append((rng.choice("AB"), f"p{rng.randint(0, 7)}", t,
                          rng.choice(["login", "login", "heartbeat", "heartbeat", "logout", None])))
        out.append(batch)
    return out
