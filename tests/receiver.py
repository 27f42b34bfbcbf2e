"""A real local HTTP receiver for the webhook tests: keeps every JSON body posted to it, answers with the
statuses it is told to (so a test can make it fail first), and lets a test wait on what arrived."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, statuses: list[int] | None = None) -> None:
        self.bodies: list[dict] = []
        self.attempts = 0
        self.statuses = list(statuses or [])
        """Answers for the first requests, in order; 200 after them."""
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._cond:
                    receiver.attempts += 1
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    if status == 200:
                        receiver.bodies.append(json.loads(body))
                    receiver._cond.notify_all()
                self.send_response(status)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait_for(self, predicate: Callable[[list[dict]], bool], timeout: float, what: str) -> list[dict]:
        """Blocks until ``predicate(bodies)`` holds (woken by each request), or fails saying what it saw."""
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self.bodies), timeout=timeout):
                raise AssertionError(f"the webhook did not get {what} within {timeout:.0f} s; got "
                                     f"{[alert_lines(b)[:3] if isinstance(b, dict) else b for b in self.bodies]}")
            return list(self.bodies)


def alert_line(body: dict) -> tuple[str, str, str]:
    """(status, alertname, subject) of a one-alert webhook message."""
    (line,) = alert_lines(body)
    return line


def alert_lines(body: dict) -> list[tuple[str, str, str]]:
    """(status, alertname, subject) of each alert a webhook message lists."""
    return [(a["status"], a["labels"]["alertname"],
             a["labels"].get("server") or a["labels"].get("pipeline") or a["labels"].get("region") or "")
            for a in body["alerts"]]


@contextmanager
def receiving(statuses: list[int] | None = None) -> Iterator[Receiver]:
    r = Receiver(statuses)
    t = threading.Thread(target=r.server.serve_forever, daemon=True)
    t.start()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()
