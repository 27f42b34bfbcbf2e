"""The wall's rows: what is firing, counted by alert and region (pure, tested as tables).

A TV across a room has room for a few lines: an outage of 300 servers must be one of them, not 300. Each line is an
alert name and where it fires (a region, a pipeline, or Redis) with how many subjects, worst first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from streaming.alerting.conditions import RULES, SUBJECT_LABEL, one_server
from streaming.alerting.lifecycle import AlertState

SHOWN = 6
"""Lines of the firing list a 1080-pixel screen holds beside its chart; the rest are counted in one more."""


@dataclass(frozen=True)
class FiringLine:
    alert: str
    where: str
    count: int
    """Servers: ServerSilent's count, or a server's rule's servers in the region; 0: one server, named in ``where``,
    or a pipeline's or Redis' rule."""
    since_ms: int
    critical: bool

    def text(self) -> str:
        what = f"{self.count:,} server{'s' if self.count != 1 else ''}" if self.count else ""
        return " · ".join(p for p in (self.alert, self.where, what) if p)


def firing_lines(alerts: Sequence[AlertState], regions: Mapping[str, str]) -> list[FiringLine]:
    """The firing alerts, one line per (alert, region): a server's alert counts under its region (``regions``:
    server -> region), ServerSilent's value is its region's count of silent servers. Critical first, then the
    most subjects, then the oldest.

    >>> a = AlertState(rule="players_drop", subject="eu-1", status="firing", since_ms=5, active_since_ms=5)
    >>> b = AlertState(rule="server_silent", subject="eu", status="firing", since_ms=9, active_since_ms=9, value=38)
    >>> c = AlertState(rule="server_silent", subject="na", status="firing", since_ms=9, active_since_ms=9, value=1,
    ...                servers=("na-4",))
    >>> [line.text() for line in firing_lines([a, b, c], {"eu-1": "eu"})]
    ['PlayersDrop · eu-1 in eu', 'ServerSilent · eu · 38 servers', 'ServerSilent · na-4 in na']
    """
    lines: dict[tuple[str, str], FiringLine] = {}
    single: dict[tuple[str, str], list[str]] = {}  # a server's rule: its servers, to name one when it is alone
    for a in alerts:
        if a.status != "firing":
            continue
        label = SUBJECT_LABEL[a.rule]
        if a.rule == "server_silent" and int(a.value or 0) == 1 and one_server(a.servers):  # one: named
            where, n = one_server(a.servers) + (f" in {a.subject}" if a.subject else ""), 0
        elif a.rule == "server_silent":
            where, n = a.subject or "no region", int(a.value or 0)
        elif label == "server":
            where, n = regions.get(a.subject) or "no region", 1
            single.setdefault((RULES[a.rule][0], where), []).append(a.subject)
        else:  # a pipeline's or Redis' own
            where, n = a.subject, 0
        name, severity = RULES[a.rule]
        prior = lines.get((name, where))
        lines[(name, where)] = FiringLine(name, where, n + (prior.count if prior else 0),
                                          min(a.since_ms, prior.since_ms) if prior else a.since_ms,
                                          severity == "critical")
    for key, servers in single.items():
        if len(servers) == 1:  # one server: named, with its region
            region = key[1] if key[1] != "no region" else ""
            lines[key] = FiringLine(key[0], servers[0] + (f" in {region}" if region else ""), 0,
                                    lines[key].since_ms, lines[key].critical)
    return sorted(lines.values(), key=lambda x: (not x.critical, -x.count, x.since_ms, x.alert, x.where))
