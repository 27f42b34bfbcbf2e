"""What reaches the project from outside is held to what its sender may do (issue 63, items 2 and 6): a delay
written straight into the lab's control hash is not followed; a receiver's reply and a Redis error are shown as
text; a receiver's password, path and query stay out of the log and the Alerts page; a spreadsheet's formula is
kept from running; an annotation's fields stay within limits. Each test is an attack that worked once; it fails if
it works again."""

from __future__ import annotations

import base64
import logging
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import redis

from dashboard.text import md
from streaming.apps.redis_server import free_port
from streaming.schema.keys import KeySchema
from streaming.store.alert_store import record_failure
from tests.ui.test_alerts_page import T0, run_alerts, seeded_alerts  # noqa: F401 - the fixture, used by name


def test_the_job_reads_a_requested_delay_only_with_lab_control_on(rd: redis.Redis, keys: KeySchema) -> None:
    """Production (``LAB_CONTROL`` off) reads nothing of the control hash, whoever wrote it (issue 63)."""
    from streaming.apps.job import requested_delay
    from streaming.schema.config import Config
    from streaming.store.control_store import write_control

    write_control(rd, keys, by="ana@example.com", role="operator", delay_ms=20_000)
    assert requested_delay(rd, keys, Config(lab_control=False)) is None
    assert requested_delay(rd, keys, Config(lab_control=True)) == 20_000


def test_a_delay_written_straight_into_the_hash_is_not_followed(rd: redis.Redis, keys: KeySchema,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """With lab control on, the job follows only a delay an operator's change recorded (the audit): a write
    straight into ``{ns}:control`` by a credential that may write it (the job's, the online groups', the
    dashboard's) is said in the log and not followed (issue 63, item 2)."""
    from streaming.apps.job import requested_delay
    from streaming.schema.config import Config
    from streaming.store.control_store import write_control

    on = Config(lab_control=True)
    rd.hset(keys.control, mapping={"delay_ms": "1", "rev": "7"})
    with caplog.at_level("WARNING", logger="streaming.apps.job"):
        assert requested_delay(rd, keys, on) is None
    assert "no operator's change recorded" in caplog.text
    write_control(rd, keys, by="ana@example.com", role="operator", delay_ms=20_000)
    assert requested_delay(rd, keys, on) == 20_000
    write_control(rd, keys, by="ana@example.com", role="operator", scenario="steady")  # not about the delay
    assert requested_delay(rd, keys, on) == 20_000
    rd.hset(keys.control, "delay_ms", "2")  # after an operator's change: still not theirs
    assert requested_delay(rd, keys, on) is None


SECRET_URL = "http://alice:s3cretpw@127.0.0.1:{port}/services/T0/B0/hooktoken?token=qtoken"
SECRETS = ("s3cretpw", "hooktoken", "qtoken", "/services/T0")


def test_a_receivers_reply_is_shown_as_text(seeded_alerts: KeySchema, redis_url: str) -> None:  # noqa: F811
    """A receiver answering with Markdown (an image that would make every viewer's browser fetch its URL, a link)
    is shown as its text: escaped, never rendered."""
    client = redis.Redis.from_url(redis_url)
    record_failure(client, seeded_alerts, "HTTP 400 ![x](http://attacker.example/pixel) [click](http://a.example)",
                   T0 + 1_000)
    text = " ".join(c.value for c in run_alerts(T0 + 2_000).caption)
    assert "![x](http://attacker.example/pixel)" not in text and "[click](http://a.example)" not in text
    assert md("![x](http://attacker.example/pixel)") in text


def test_a_redis_error_is_shown_as_text() -> None:
    """What Redis (or anything between) answers is quoted on every page's status line: as text."""
    from dashboard.status import unreachable

    said = unreachable("redis://db:6379/0", redis.ResponseError("![x](http://attacker.example/p) **bold**")).text
    assert "![x](http://attacker.example/p)" not in said and "**bold**" not in said
    assert md("![x](http://attacker.example/p) **bold**") in said


class Receiver(BaseHTTPRequestHandler):
    """A webhook receiver that keeps what it was sent and answers with the status the test asks for."""

    seen: list[tuple[str, str]] = []
    status = 200

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Receiver.seen.append((self.path, self.headers.get("Authorization", "")))
        self.send_response(Receiver.status, "no, s3cretpw /services/T0/B0/hooktoken")  # a reply quoting them
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def receiver() -> Iterator[int]:
    Receiver.seen, Receiver.status = [], 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_receivers_password_goes_as_basic_auth_never_on_the_line(receiver: int) -> None:
    from streaming.apps.monitor.notify import post

    post(SECRET_URL.format(port=receiver), {"x": 1}, timeout_s=5)
    assert Receiver.seen == [("/services/T0/B0/hooktoken?token=qtoken",
                              "Basic " + base64.b64encode(b"alice:s3cretpw").decode())]


@pytest.mark.parametrize("status", [400, 500])
def test_a_receivers_refusal_says_nothing_of_its_secrets(receiver: int, status: int) -> None:
    from streaming.apps.monitor.notify import ReceiverError, Rejected, post

    Receiver.status = status
    with pytest.raises(Rejected if status == 400 else ReceiverError) as caught:
        post(SECRET_URL.format(port=receiver), {"x": 1}, timeout_s=5)
    assert str(caught.value).startswith(f"HTTP {status}") and not [s for s in SECRETS if s in str(caught.value)]


@pytest.mark.parametrize("url", [SECRET_URL, "http://alice:s3cretpw@127.0.0.1/services/T0/B0/hooktoken"])
def test_an_unreachable_receiver_keeps_its_secrets_out_of_the_log_and_the_page(
        url: str, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Nothing listens there (and the second URL has no port: urllib once quoted ``alice:s3cretpw@127.0.0.1`` as
    a port it could not read): the failure the monitor logs and stores for the Alerts page names no secret."""
    from streaming.apps.monitor.notify import Notifier, ReceiverError, post

    url = url.format(port=free_port())
    with pytest.raises(ReceiverError) as caught:
        post(url, {"x": 1}, timeout_s=5)
    keys = KeySchema(f"sec-{uuid.uuid4().hex[:8]}")
    client = redis.Redis.from_url(redis_url)
    notifier = Notifier(url, client, keys, external_url="", timeout_ms=5_000, max_backoff_ms=1_000)
    with caplog.at_level(logging.WARNING, logger="streaming.apps.monitor.notify"):
        notifier._failed(f"n-1: {caught.value}")  # what the delivery loop says of a failed POST
    stored = client.hget(keys.alerts_webhook, "last_error").decode()
    for said in (str(caught.value), caplog.text, stored):
        assert said and not [s for s in SECRETS if s in said], said


def test_tables_keep_a_producers_formula_from_running_in_a_spreadsheet() -> None:
    """A table's "Download as CSV" keeps what a producer named: a name a spreadsheet would run as a formula
    (``=``, ``+``, ``-``, ``@``) gets a leading quote, numbers stay numbers."""
    import pandas as pd

    from dashboard import ui

    class Where:
        def dataframe(self, data: object, **kw: object) -> object:
            self.data = data
            return data

    w = Where()
    ui.table(w, [{"Server": "=HYPERLINK(\"http://x\",\"y\")", "Region": "+eu", "Players": 5, "Trend": [1, 2]},
                 {"Server": "@SUM(1)", "Region": "eu", "Players": -3, "Trend": []}])
    assert w.data == [{"Server": "'=HYPERLINK(\"http://x\",\"y\")", "Region": "'+eu", "Players": 5, "Trend": [1, 2]},
                      {"Server": "'@SUM(1)", "Region": "eu", "Players": -3, "Trend": []}]
    ui.table(w, pd.DataFrame({"Who": ["-cmd|' /C calc'!A0", "ana"], "Rev": [1, 2]}))
    assert list(w.data["Who"]) == ["'-cmd|' /C calc'!A0", "ana"] and list(w.data["Rev"]) == [1, 2]


DAY = 86_400_000


@pytest.mark.parametrize(("doc", "says"), [
    ({"text": "deploy", "region": "eu" * 40}, "region is 80 characters long, at most 64 allowed"),
    ({"text": "deploy", "region": "eu\u200b"}, "region"),  # an invisible character
    ({"text": "deploy", "region": "eu\nna"}, "region"),
    ({"text": "line one\nline two"}, "text must be one line without control characters"),
    ({"text": "x" * 201}, "text must be 1-200 characters"),
    # dated far ahead, a note would outlive every real one in the newest 10,000 kept
    ({"text": "deploy", "start": T0 + 8 * DAY}, "start must be within 400 days before and 7 days after now"),
    ({"text": "deploy", "start": 10**20}, "start must be within"),
    ({"text": "deploy", "start": -(10**30)}, "start must be within"),
    ({"text": "deploy", "start": T0 - 401 * DAY}, "start must be within"),
    ({"text": "deploy", "for": "100000d"}, "an annotation lasts at most 31 days"),
    ({"text": "deploy", "start": T0, "end": T0 + 32 * DAY}, "at most 31 days"),
])
def test_annotation_fields_have_limits(doc: dict, says: str) -> None:
    from streaming.store.annotation_store import annotation_from

    with pytest.raises(ValueError, match=says):
        annotation_from(doc, T0)


def test_annotations_within_the_limits_are_taken() -> None:
    from streaming.store.annotation_store import annotation_from

    for doc in ({"text": "deploy"}, {"text": "maintenance", "start": T0 + 6 * DAY, "for": "4h"},
                {"text": "old", "start": T0 - 399 * DAY, "end": T0 - 398 * DAY}):
        assert annotation_from(doc, T0).text == doc["text"]
