"""The wire format of one game-server event in the Redis Stream, and its parser.

A stream entry has a single field ``e`` holding a JSON object::

    {"event_id": "C-42-17", "server": "C", "player_id": "p0042",
     "kind": "heartbeat", "event_time": "2026-11-22T10:00:01.250Z"}

``server``, ``player_id`` and ``event_time`` are required; ``kind``,
``event_id`` and ``region`` (a string the pipeline carries but does not count
by) are optional (replayed event sets carry none). Fields it does not know are
ignored, so new optional fields can be added without breaking older readers
(docs/ingest.md). The entry ID's
millisecond part is the ingest time. Anything that does not fit is not dropped:
:func:`parse_entry` returns a :class:`BadEntry` with a stable reason code that
the sink counts and keeps in the dead-letter stream.

Reason codes: ``missing_payload``, ``malformed_json``, ``not_an_object``,
``missing_field``, ``bad_type``, ``bad_timestamp``, ``bad_value``, ``bad_name`` (a name too long, holding a
control or invisible character, or edged with a space: :func:`bad_name`), and under
:class:`Rules`: ``future_timestamp`` (event time more than the allowed skew
ahead of ingest time: it would drag the watermark forward and make every later
event late), ``unknown_server`` and ``forged_idle_marker`` (an idle marker the
job did not sign: see :func:`sign`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from watermark_client.timeutil import iso_from_us, parse_iso_us

PAYLOAD_FIELD = "e"
NAME_LIMITS = {"server": 64, "region": 64, "player_id": 128, "event_id": 128}
"""The longest name each field may hold, in characters. A server or region name becomes a Redis key, a metric
label and a column on the pages: Kubernetes pod and Agones game server names are DNS labels of at most 63
characters, so 64 takes every real one and keeps a key, a label and a table cell readable. Player and event ids
take 128: a UUID is 36, platform ids are shorter still. A longer name is quarantined (``bad_name``), not cut: a
cut name would merge two servers."""
_INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")
"""Every character of Unicode's categories Cc (control), Cf (format: zero-width characters, bidirectional
overrides, invisible tags), Zl and Zp (line and paragraph separators), as Unicode 18 lists them: the same list
under every Python the project runs on (3.11 has Unicode 14, which had not yet made U+13439-U+1343F format
characters; a test checks the list against ``unicodedata``). A name holding one could break a log line or a
notice, or show as another name (``bad_name``)."""


def bad_name(field: str, value: str) -> str | None:
    """Why ``value`` cannot be the name in ``field`` (:data:`NAME_LIMITS`); None when it can."""
    limit = NAME_LIMITS[field]
    if len(value) > limit:
        return f"{field} is {len(value):,} characters long, at most {limit} allowed (it begins {value[:20]!r})"
    if (m := _INVISIBLE.search(value)) is not None:
        return f"{field} holds U+{ord(m.group()):04X} at {m.start()}, a control or invisible character"
    if value != value.strip():  # " eu-1" shows as "eu-1", and " " as nothing
        return f"{field} {value!r} begins or ends with a space"
    if field == "server" and (value == "*" or value.startswith("region|")):
        return f"server {value!r} is a reserved name: it stands for all servers or a region in the online view"
    return None

KINDS = ("login", "heartbeat", "logout")
IDLE_KIND = "idle"
"""An idle marker: the pipeline's declaration that a silent server has nothing older than its event time
(``streaming.rules.fleet``). It moves that server's watermark in per-server lanes with idleness on and is never
counted as an event or a player."""
IDLE_PLAYER = "*"
ACCEPTED_KINDS = (*KINDS, IDLE_KIND)


@dataclass(frozen=True, slots=True)
class Event:
    server: str
    player_id: str
    event_time_us: int
    kind: str | None = None
    event_id: str | None = None
    region: str | None = None

    def payload(self) -> bytes:
        doc: dict[str, object] = {}
        if self.event_id is not None:
            doc["event_id"] = self.event_id
        doc["server"] = self.server
        doc["player_id"] = self.player_id
        if self.kind is not None:
            doc["kind"] = self.kind
        doc["event_time"] = iso_from_us(self.event_time_us)
        if self.region is not None:
            doc["region"] = self.region
        return orjson.dumps(doc)

    def fields(self) -> dict[str, bytes]:
        """The stream entry's fields, ready for ``XADD``."""
        return {PAYLOAD_FIELD: self.payload()}


def idle_marker(server: str, event_time_us: int) -> Event:
    return Event(server, IDLE_PLAYER, event_time_us, IDLE_KIND)


# Idle markers travel through the input stream, which producers write too. The job signs each marker with a
# secret only it holds (kept beside its checkpoint), so a producer's write cannot declare a server idle: the
# source quarantines a marker without a valid signature (``forged_idle_marker``).
SIG_BYTES = 16


def sign(key: bytes, server: str, event_time_us: int, silent_ms: int) -> str:
    """The marker's signature: HMAC-SHA256 over what it declares, hex, ``SIG_BYTES`` long."""
    msg = f"{server}|{event_time_us}|{silent_ms}".encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()[: 2 * SIG_BYTES]


def verify(key: bytes, server: str, event_time_us: int, silent_ms: object, sig: object) -> bool:
    if isinstance(silent_ms, bool) or not isinstance(silent_ms, int) or not isinstance(sig, str) or not sig.isascii():
        return False  # (compare_digest refuses non-ASCII text: a forged marker may hold anything)
    return hmac.compare_digest(sign(key, server, event_time_us, silent_ms), sig)


@dataclass(frozen=True)
class Rules:
    """Admission rules beyond the wire format; ``None`` switches a rule off."""

    max_future_skew_ms: int | None = None
    servers: frozenset[str] | None = None
    idle_key: bytes | None = None
    """The job's secret: idle markers must be signed with it (None: markers are taken as they are)."""

    def __post_init__(self) -> None:
        if self.max_future_skew_ms is not None and self.max_future_skew_ms < 0:
            raise ValueError(f"max_future_skew_ms must not be negative, got {self.max_future_skew_ms}")
        if self.idle_key is not None and len(self.idle_key) < SIG_BYTES:
            raise ValueError(f"idle_key must be at least {SIG_BYTES} bytes, got {len(self.idle_key)}")

    def to_options(self) -> dict[str, str]:
        """As data source options (strings), read back by :meth:`from_options`. The secret's option name
        matches Spark's redaction pattern, so plans and the UI show it redacted."""
        return {"maxFutureSkewMs": "" if self.max_future_skew_ms is None else str(self.max_future_skew_ms),
                "servers": ",".join(sorted(self.servers)) if self.servers is not None else "",
                "idleMarkerSecret": "" if self.idle_key is None else self.idle_key.hex()}

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Rules:
        skew = (options.get("maxFutureSkewMs") or "").strip()
        servers = (options.get("servers") or "").strip()
        secret = (options.get("idleMarkerSecret") or "").strip()
        try:
            key = bytes.fromhex(secret) if secret else None
        except ValueError:
            raise ValueError("option idleMarkerSecret must be hex") from None
        return cls(int(skew) if skew else None,
                   frozenset(s.strip() for s in servers.split(",") if s.strip()) if servers else None, key)


NO_RULES = Rules()


@dataclass(frozen=True, slots=True)
class BadEntry:
    reason: str
    detail: str
    raw: str


def parse_entry(fields: Mapping[bytes, bytes], entry_id: str, rules: Rules = NO_RULES) -> Event | BadEntry:
    """Validate one stream entry; never raises."""
    payload = fields.get(PAYLOAD_FIELD.encode())
    if payload is None:
        raw = orjson.dumps({k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in fields.items()})
        return BadEntry("missing_payload", f"entry has no field {PAYLOAD_FIELD!r}", raw.decode())
    return parse_payload(payload, entry_id, rules)


def parse_payload(payload: bytes, entry_id: str, rules: Rules = NO_RULES) -> Event | BadEntry:
    def bad(reason: str, detail: str) -> BadEntry:
        return BadEntry(reason, detail, payload.decode("utf-8", "replace"))

    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        return bad("malformed_json", str(exc))
    if not isinstance(doc, dict):
        return bad("not_an_object", f"payload is a JSON {type(doc).__name__}, not an object")

    for name in ("server", "player_id", "event_time"):
        if doc.get(name) is None:
            return bad("missing_field", f"{name} is missing")
    server = doc["server"]
    if not isinstance(server, str) or not server:
        return bad("bad_type", f"server must be a non-empty string, got {server!r}")
    if (why := bad_name("server", server)) is not None:
        return bad("bad_name", why)
    if rules.servers is not None and server not in rules.servers:
        return bad("unknown_server", f"server {server!r} is not one of {', '.join(sorted(rules.servers))}")
    player = doc["player_id"]
    if isinstance(player, bool) or not isinstance(player, (str, int)) or player == "":
        return bad("bad_type", f"player_id must be a non-empty string or integer, got {player!r}")
    ts = doc["event_time"]
    if not isinstance(ts, str):
        return bad("bad_type", f"event_time must be an ISO-8601 string, got {ts!r}")
    try:
        event_time_us = parse_iso_us(ts)
    except (ValueError, OverflowError) as exc:
        return bad("bad_timestamp", f"event_time {ts!r} does not parse: {exc}")
    if rules.max_future_skew_ms is not None:
        ahead_us = event_time_us - parse_entry_id(entry_id)[0] * 1000
        if ahead_us > rules.max_future_skew_ms * 1000:
            return bad("future_timestamp", f"event_time {ts} is {ahead_us / 1e6:.3f} s ahead of its ingest time "
                                           f"(at most {rules.max_future_skew_ms / 1000:g} s allowed)")
    kind = doc.get("kind")
    if kind is not None and kind not in ACCEPTED_KINDS:
        return bad("bad_value", f"kind must be one of {', '.join(ACCEPTED_KINDS)}, got {kind!r}")
    if kind == IDLE_KIND and rules.idle_key is not None and not verify(
            rules.idle_key, server, event_time_us, doc.get("silent_ms"), doc.get("sig")):
        return bad("forged_idle_marker", f"an idle marker for server {server!r} without the job's signature: only "
                                         "the job declares a server idle")
    event_id = doc.get("event_id")
    if event_id is not None and not isinstance(event_id, (str, int)):
        return bad("bad_type", f"event_id must be a string, got {event_id!r}")
    region = doc.get("region")
    if region is not None and not isinstance(region, str):
        return bad("bad_type", f"region must be a string, got {region!r}")
    names = {"player_id": str(player), "event_id": None if event_id is None else str(event_id), "region": region}
    if (why := next((w for f, v in names.items() if v is not None and (w := bad_name(f, v))), None)) is not None:
        return bad("bad_name", why)
    return Event(
        server=server,
        player_id=str(player),
        event_time_us=event_time_us,
        kind=kind,
        event_id=str(event_id) if event_id is not None else entry_id,
        region=region,
    )


def parse_entry_id(entry_id: str | bytes) -> tuple[int, int]:
    """A stream entry ID as ``(ms, seq)``, which orders like Redis does; ``ms`` is the ingest time."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)
