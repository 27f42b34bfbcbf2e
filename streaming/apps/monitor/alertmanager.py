"""The Alertmanager pusher: a thread that keeps a Prometheus Alertmanager told what fires (decision 0013).

The monitor's round only passes on what stands (:meth:`AlertmanagerPusher.update`); the thread pushes it to
``POST /api/v2/alerts`` at once when an alert fired or resolved, and every ``resend`` otherwise, as Prometheus
does. Nothing queues up: a push that fails is tried again, with backoff, with whatever stands by then, and a
resolved alert is pushed until Alertmanager has taken it once. An alert is known to Alertmanager by its labels,
so pushing the same one again is harmless, and one whose monitor stopped resolves when its ``endsAt`` passes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from streaming.alerting.alertmanager import postable_alerts
from streaming.alerting.lifecycle import AlertState, Notice
from streaming.alerting.webhook import backoff_ms
from streaming.apps.monitor.notify import ReceiverError, post
from streaming.runtime.clock import wall_ms
from streaming.schema.config import scrub_url, shown_url

log = logging.getLogger(__name__)

API_PATH = "/api/v2/alerts"


class AlertmanagerPusher(threading.Thread):
    def __init__(self, url: str, namespace: str, *, external_url: str, resend_ms: int, timeout_ms: int,
                 max_backoff_ms: int = 60_000, clock: Callable[[], int] | None = None) -> None:
        super().__init__(name="alertmanager", daemon=True)
        self.url = url.rstrip("/") + API_PATH
        self.namespace, self.external_url = namespace, external_url
        self.resend_ms, self.timeout_s, self.max_backoff_ms = resend_ms, timeout_ms / 1000, max_backoff_ms
        self.clock = clock or wall_ms
        self._lock = threading.Lock()
        self._firing: list[AlertState] = []
        self._resolved: list[Notice] = []
        self._changed = False
        self._first = True  # the first round's alerts go at once: a restarted monitor's still-firing ones too
        self._wake = threading.Event()
        self.stopping = threading.Event()
        self.pushed = 0
        """Pushes Alertmanager took."""
        self.last_error = ""

    def update(self, states: Mapping[str, AlertState], notices: Sequence[Notice]) -> None:
        """What stands after a round: every alert's state, and the notices the round decided."""
        with self._lock:
            self._firing = sorted((s for s in states.values() if s.status == "firing"), key=lambda s: s.key)
            self._resolved += [n for n in notices if n.status == "resolved"]
            if notices or self._first:
                self._first = False
                self._changed = True
                self._wake.set()

    def push(self) -> None:
        """One push of what stands; raises what the POST raised."""
        with self._lock:
            firing, resolved = list(self._firing), list(self._resolved)
            self._changed = False
        body = postable_alerts(firing, resolved, self.namespace, self.external_url, self.clock(), self.resend_ms)
        if body:
            post(self.url, body, self.timeout_s)
            self.pushed += 1
        with self._lock:  # taken: those resolved are said
            self._resolved = [n for n in self._resolved if n not in resolved]

    def close(self, timeout_s: float = 2.0) -> None:
        self.stopping.set()
        self._wake.set()
        self.join(timeout=timeout_s)

    def run(self) -> None:
        attempt, wait_s = 0, 0.0
        while not self.stopping.is_set():
            self._wake.wait(wait_s)
            self._wake.clear()
            if self.stopping.is_set():
                break
            try:
                self.push()
            except Exception as exc:  # noqa: BLE001 - refused, reset, a 4xx or 5xx: said once, tried again
                attempt += 1
                error = scrub_url(str(exc) if isinstance(exc, ReceiverError) else f"{type(exc).__name__}: {exc}",
                                  self.url)
                if error != self.last_error:
                    log.warning("alertmanager %s: %s (trying again)", shown_url(self.url), error)
                    self.last_error = error
                with self._lock:
                    self._changed = True
                wait_s = backoff_ms(attempt, self.max_backoff_ms) / 1000
                continue
            if attempt:
                log.info("alertmanager %s: pushed again after %d failed attempts", shown_url(self.url), attempt)
            attempt, self.last_error = 0, ""
            with self._lock:
                wait_s = 0.0 if self._changed else self.resend_ms / 1000
