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


def oracle(lines: list[dict], length: int, slide: int, delay: int, with_late: bool = False) -> dict:
    """The check document; ``with_late`` adds each window's late-but-accepted count (``late``)."""
    by_batch: dict[int, list[dict]] = defaultdict(list)
    for line in lines:
        by_batch[line["batch"]].append(line)
    wm = 0
    acc: dict[tuple[int, int, str], dict] = {}
    batches = []
    for label in sorted(by_batch):
        dropped_here = 0
        max_t = None
        for ev in by_batch[label]:
            t = to_ms(ev["event_time"])
            max_t = t if max_t is None else max(max_t, t)
            for start, end in windows_of(t, length, slide):
                cell = acc.setdefault((start, end, ev["server"]), {"events": 0, "players": set(), "dropped": 0,
                                                                  "late": 0})
                if end <= wm:
                    cell["dropped"] += 1
                    dropped_here += 1
                else:
                    cell["events"] += 1
                    cell["late"] += t < wm
                    cell["players"].add(str(ev["player_id"]))
        batches.append({"batch": label, "watermark": to_iso(wm), "input": len(by_batch[label]),
                        "dropped": dropped_here})
        if max_t is not None:
            wm = max(wm, max_t - delay)
    windows = [
        {"server": server, "start": to_iso(start), "end": to_iso(end), "events": c["events"],
         "players": len(c["players"]), "dropped": c["dropped"], "final": end <= wm,
         **({"late": c["late"]} if with_late else {})}
        for (start, end, server), c in sorted(acc.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1]))
    ]
    return {"batches": batches, "windows": windows}


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
