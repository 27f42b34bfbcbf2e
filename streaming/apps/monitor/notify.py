"""The webhook sender: a thread that posts each notice once, in order, retrying with backoff.

The monitor's round only enqueues (a receiver that hangs or refuses never delays an evaluation, and the
job is another process altogether). A notice leaves the Redis outbox only once the receiver took it (any
2xx), so a monitor stopped or crashed with notices owed sends them when it starts again. A receiver that
rejects a notice as malformed (4xx other than 408 and 429) will never take it: it is dropped with the error
recorded, rather than block every later notice.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

import redis

from streaming.alerting.lifecycle import Notice
from streaming.alerting.webhook import backoff_ms, group_key, group_payload
from streaming.runtime.clock import wall_ms
from streaming.schema.config import scrub_url, shown_url
from streaming.schema.keys import KeySchema
from streaming.store.alert_store import OUTBOX_KEEP, acknowledge, record_failure, still_owed, was_delivered

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outgoing:
    notice: Notice
    outbox_id: str | None
    """Its entry in ``{ns}:alerts:outbox``; None when Redis was unreachable as it was decided."""


class Rejected(Exception):
    """The receiver will never take this notice."""


def post(url: str, body: object, timeout_s: float) -> None:
    """POST ``body`` as JSON to a receiver. A user and password in ``url`` (``https://user:pw@host/hook``) go as
    HTTP Basic authentication, never on the request line. What it raises never holds the URL's secrets (its
    password, path or query: :func:`~streaming.schema.config.scrub_url`): the log and the Alerts page show it."""
    address, auth = split_credentials(url)
    headers = {"Content-Type": "application/json", **({"Authorization": auth} if auth else {})}
    req = urllib.request.Request(address, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - the configured receiver
            resp.read()
    except urllib.error.HTTPError as exc:
        if 400 <= exc.code < 500 and exc.code not in (408, 429):
            raise Rejected(scrub_url(f"HTTP {exc.code} {str(exc.reason)[:200]}", url)) from None
        raise ReceiverError(scrub_url(f"HTTP {exc.code} {str(exc.reason)[:200]}", url)) from None
    except (OSError, ValueError) as exc:  # refused, reset, timed out, a URL urllib cannot send to
        raise ReceiverError(scrub_url(f"{type(exc).__name__}: {exc}", url)) from None


class ReceiverError(OSError):
    """The receiver could not be reached or answered 5xx (tried again); its text holds no secret of the URL."""


def split_credentials(url: str) -> tuple[str, str]:
    """``url`` without its user and password, and the Basic ``Authorization`` header they make ("" without).

    >>> split_credentials("https://alice:s3cret@hooks.example.com/x")
    ('https://hooks.example.com/x', 'Basic YWxpY2U6czNjcmV0')
    >>> split_credentials("http://127.0.0.1:9093")
    ('http://127.0.0.1:9093', '')
    """
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, ""
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return urlunsplit(parts._replace(netloc=host)), f"Basic {token}"


class Notifier(threading.Thread):
    def __init__(self, url: str, client: redis.Redis, keys: KeySchema, *, external_url: str,
                 timeout_ms: int, max_backoff_ms: int, clock: Callable[[], int] | None = None,
                 group_wait_ms: int = 0, keep: int = OUTBOX_KEEP) -> None:
        super().__init__(name="webhook", daemon=True)
        self.url, self.client, self.keys = url, client, keys
        self.external_url = external_url
        self.timeout_s, self.max_backoff_ms = timeout_ms / 1000, max_backoff_ms
        self.group_wait_s = group_wait_ms / 1000
        self.clock = clock or wall_ms
        self.queue: queue.Queue[Outgoing | None] = queue.Queue()
        self.keep = keep
        self.stopping = threading.Event()

    def offer(self, item: Outgoing) -> None:
        """Queued in memory as the outbox holds it in Redis: the newest ``keep``. An older one left behind here
        has left the outbox too (it keeps the same newest ``keep``, and counted it dropped)."""
        self.queue.put(item)
        while self.queue.qsize() > self.keep:
            try:
                oldest = self.queue.get_nowait()
            except queue.Empty:
                break
            if oldest is None:  # a stop: it stays, after what is owed
                self.queue.put(None)
                break
            if oldest.outbox_id is None:
                log.warning("webhook: %s dropped unsent: more than %d notices owed", oldest.notice.id, self.keep)

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop after the notice in flight; what is owed stays in the outbox for the next start."""
        self.stopping.set()
        self.queue.put(None)
        self.join(timeout=timeout_s)

    def run(self) -> None:
        while not self.stopping.is_set() and (item := self.queue.get()) is not None:
            items, stop = self._gather(item)
            groups: dict[tuple[str, str], list[Outgoing]] = {}
            for x in items:
                groups.setdefault(group_key(x.notice), []).append(x)
            for group in groups.values():
                self.deliver_group(group)
            if stop:
                break

    def _gather(self, first: Outgoing) -> tuple[list[Outgoing], bool]:
        """``first`` and whatever else is offered within ``group_wait`` of it; True when a stop came too."""
        items, deadline = [first], time.monotonic() + self.group_wait_s
        while True:
            try:
                nxt = self.queue.get(timeout=max(0.0, deadline - time.monotonic())) if self.group_wait_s else \
                    self.queue.get_nowait()
            except queue.Empty:
                return items, False
            if nxt is None:
                return items, True
            items.append(nxt)

    def deliver(self, item: Outgoing) -> bool:
        """Until delivered, rejected or stopped; True when the receiver took it (now or before)."""
        return self.deliver_group([item])

    def deliver_group(self, items: list[Outgoing]) -> bool:
        """Notices of one :func:`group_key` as one message, until delivered, rejected or stopped; True when the
        receiver took them (now or before). Each is acknowledged in the outbox on its own."""
        owed = []
        for item in self._still_owed(items):
            if self._delivered_before(item):
                self._ack(item)
            else:
                owed.append(item)
        if not owed:
            return True
        body = group_payload([x.notice for x in owed], self.keys.namespace, self.external_url)
        ids = ", ".join(x.notice.id for x in owed[:3]) + (f" and {len(owed) - 3} more" if len(owed) > 3 else "")
        attempt = 0
        while not self.stopping.is_set():
            attempt += 1
            try:
                post(self.url, body, self.timeout_s)
            except Rejected as exc:
                self._failed(f"{ids} rejected, not retried: {exc}")
                for x in owed:
                    self._ack(x, delivered=False)
                return False
            except Exception as exc:  # noqa: BLE001 - any other failure (refused, reset, a bad reply) is retried
                said = str(exc) if isinstance(exc, ReceiverError) else f"{type(exc).__name__}: {exc}"
                self._failed(f"{ids}: {said}")
                self.stopping.wait(backoff_ms(attempt, self.max_backoff_ms) / 1000)
                continue
            for x in owed:
                self._ack(x)
            return True
        return False

    def _still_owed(self, items: list[Outgoing]) -> list[Outgoing]:
        """Those still in the outbox (or never in it): one trimmed while the receiver refused was counted as
        dropped, and sending it now would count it twice."""
        ids = [x.outbox_id for x in items if x.outbox_id is not None]
        try:
            there = dict(zip(ids, still_owed(self.client, self.keys, ids), strict=True)) if ids else {}
        except redis.RedisError:
            return items  # cannot tell: send (at least once)
        gone = [x for x in items if x.outbox_id is not None and not there[x.outbox_id]]
        if gone:
            log.warning("webhook: %d notices left the outbox unsent (more than %d owed), e.g. %s", len(gone),
                        self.keep, gone[0].notice.id)
        return [x for x in items if x.outbox_id is None or there[x.outbox_id]]

    def _delivered_before(self, item: Outgoing) -> bool:
        """The same notice reached the receiver already (sent from memory while Redis was away, and found in
        the outbox too): not sent twice."""
        try:
            return was_delivered(self.client, self.keys, item.notice.id)
        except redis.RedisError:
            return False

    def _ack(self, item: Outgoing, delivered: bool = True) -> None:
        try:
            acknowledge(self.client, self.keys, item.outbox_id, item.notice.id, self.clock(), delivered)
        except redis.RedisError as exc:  # sent; at worst sent again after a restart, with the same id
            log.warning("webhook: delivered %s but could not acknowledge it: %s", item.notice.id, exc)

    def _failed(self, error: str) -> None:
        error = scrub_url(error, self.url)
        log.warning("webhook %s: %s", shown_url(self.url), error)
        try:
            record_failure(self.client, self.keys, error, self.clock())
        except redis.RedisError:
            pass  # Redis down too: the log has it
