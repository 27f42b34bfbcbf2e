"""The alerts through a real redis-server and a real HTTP receiver: one transaction per round, the webhook's
retries with backoff, nothing sent twice, nothing lost across a restart."""

from __future__ import annotations

import threading
import uuid

import redis

from streaming.alerting.conditions import Finding
from streaming.alerting.config import Timing
from streaming.alerting.lifecycle import Decision, Notice, step_all
from streaming.apps.monitor.notify import Notifier, Outgoing
from streaming.schema.keys import KeySchema
from streaming.store.alert_store import apply_decision, read_alert_view, read_alerts, read_outbox
from tests.receiver import alert_line, alert_lines, receiving

T0 = 1_800_000_000_000
NOW = lambda: T0  # noqa: E731 - the injected clock


def keys() -> KeySchema:
    return KeySchema(f"alerts-{uuid.uuid4().hex[:8]}")


def fire(subject: str = "B", at: int = T0) -> Decision:
    return step_all({}, [Finding("server_silent", subject, True, 61.0, f"no event from {subject}")], at,
                    {"server_silent": Timing(0, 0)})


def notifier(url: str, r: redis.Redis, k: KeySchema, max_backoff_ms: int = 40) -> Notifier:
    return Notifier(url, r, k, external_url="http://dash", timeout_ms=2_000, max_backoff_ms=max_backoff_ms, clock=NOW)


def test_a_round_is_one_transaction_of_alerts_history_and_outbox(r: redis.Redis) -> None:
    k = keys()
    d = fire()
    sent = apply_decision(r, k, d, T0, outbox=True)
    assert [n.status for _, n in sent] == ["firing"] and read_outbox(r, k) == sent
    assert read_alerts(r, k) == d.states
    view = read_alert_view(r, k, T0)
    assert [n.id for n in view.history] == [d.notices[0].id] and view.round_ms == T0 and view.webhook.waiting == 1
    # the alert resolves: the hash loses it, the history gains the resolve
    d2 = step_all(d.states, [Finding("server_silent", "B", False)], T0 + 5, {"server_silent": Timing(0, 0)})
    apply_decision(r, k, d2, T0 + 5, outbox=False)
    assert read_alerts(r, k) == {} and [n.status for n in read_alert_view(r, k, T0 + 5).history] == [
        "firing", "resolved"]


def test_history_keeps_a_day(r: redis.Redis) -> None:
    k = keys()
    apply_decision(r, k, fire("A", T0), T0, outbox=False)
    day_later = T0 + 86_400_000 + 1
    apply_decision(r, k, fire("B", day_later), day_later, outbox=False)
    assert [n.subject for n in read_alert_view(r, k, day_later).history] == ["B"]


def test_the_webhook_retries_with_backoff_and_delivers_each_notice_once(r: redis.Redis) -> None:
    k = keys()
    with receiving(statuses=[503, 500]) as hook:
        n = notifier(hook.url, r, k)
        ((oid, notice),) = apply_decision(r, k, fire(), T0, outbox=True)
        assert n.deliver(Outgoing(notice, oid)) is True
        assert hook.attempts == 3 and [alert_line(b) for b in hook.bodies] == [("firing", "ServerSilent", "B")]
    view = read_alert_view(r, k, T0)
    assert view.webhook.delivered == 1 and view.webhook.failures == 2 and view.webhook.waiting == 0
    assert "HTTP 500" in (view.webhook.last_error or "")


def test_a_rejected_notice_is_dropped_with_the_error_recorded_not_retried_forever(r: redis.Redis) -> None:
    k = keys()
    with receiving(statuses=[400]) as hook:
        ((oid, notice),) = apply_decision(r, k, fire(), T0, outbox=True)
        assert notifier(hook.url, r, k).deliver(Outgoing(notice, oid)) is False
        assert hook.attempts == 1
    view = read_alert_view(r, k, T0)
    assert view.webhook.waiting == 0 and "rejected, not retried: HTTP 400" in (view.webhook.last_error or "")


def test_what_was_owed_at_a_stop_is_sent_after_the_restart_and_only_that(r: redis.Redis) -> None:
    k = keys()
    with receiving() as hook:
        first = apply_decision(r, k, fire("A"), T0, outbox=True)
        second = apply_decision(r, k, fire("B"), T0 + 1, outbox=True)
        n = notifier(hook.url, r, k)
        n.deliver(Outgoing(first[0][1], first[0][0]))  # delivered before the stop; B's was still owed
        owed = read_outbox(r, k)  # what a restarted monitor reads back
        assert [x.subject for _, x in owed] == ["B"] and owed == second
        restarted = notifier(hook.url, r, k)
        restarted.start()
        for oid, x in owed:
            restarted.offer(Outgoing(x, oid))
        bodies = hook.wait_for(lambda b: len(b) == 2, 10, "both notices")
        restarted.close()
    assert [alert_line(b) for b in bodies] == [("firing", "ServerSilent", "A"), ("firing", "ServerSilent", "B")]
    assert read_outbox(r, k) == []


def test_an_unreachable_receiver_never_blocks_the_caller(r: redis.Redis) -> None:
    """offer() returns at once; the thread keeps retrying until closed, and the notice stays owed."""
    k = keys()
    ((oid, notice),) = apply_decision(r, k, fire(), T0, outbox=True)
    failed = threading.Event()

    class Watched(Notifier):
        def _failed(self, error: str) -> None:
            super()._failed(error)
            failed.set()

    n = Watched("http://127.0.0.1:9/none", r, k, external_url="", timeout_ms=2_000, max_backoff_ms=20, clock=NOW)
    n.start()  # port 9: nothing listens
    n.offer(Outgoing(notice, oid))
    assert failed.wait(30), "no delivery attempt"
    n.close()
    assert [x.id for _, x in read_outbox(r, k)] == [notice.id]
    assert read_alert_view(r, k, T0).webhook.failures >= 1


def test_notice_round_trips_through_the_history(r: redis.Redis) -> None:
    k = keys()
    d = fire()
    apply_decision(r, k, d, T0, outbox=False)
    (back,) = read_alert_view(r, k, T0).history
    assert back == d.notices[0] and isinstance(back, Notice)


def test_a_notice_sent_from_memory_and_found_in_the_outbox_too_is_not_sent_again(r: redis.Redis) -> None:
    """Redis took the round's transaction but its reply was lost: the monitor sent the notice from memory, and
    the outbox has it as well; the restarted monitor finds it delivered and only clears it."""
    k = keys()
    with receiving() as hook:
        ((oid, notice),) = apply_decision(r, k, fire(), T0, outbox=True)
        n = notifier(hook.url, r, k)
        assert n.deliver(Outgoing(notice, None)) is True  # from memory
        assert n.deliver(Outgoing(notice, oid)) is True  # from the outbox, after a restart
        assert [alert_line(b) for b in hook.bodies] == [("firing", "ServerSilent", "B")]
    assert read_outbox(r, k) == []


def test_a_receiver_answering_garbage_is_retried_not_fatal(r: redis.Redis) -> None:
    """A reply that is not HTTP (http.client raises, not OSError) is one more failed attempt."""
    import socket

    k = keys()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def garbage() -> None:
        for _ in range(2):
            conn, _addr = srv.accept()
            conn.recv(65536)
            conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            conn.close()

    t = threading.Thread(target=garbage, daemon=True)
    t.start()
    ((oid, notice),) = apply_decision(r, k, fire(), T0, outbox=True)
    failures = []

    class Counting(Notifier):
        def _failed(self, error: str) -> None:
            failures.append(error)
            if len(failures) == 2:
                self.stopping.set()

    n = Counting(f"http://127.0.0.1:{srv.getsockname()[1]}/", r, k, external_url="", timeout_ms=2_000,
                 max_backoff_ms=10, clock=NOW)
    assert n.deliver(Outgoing(notice, oid)) is False  # stopped after two failed attempts, not crashed
    srv.close()
    assert len(failures) == 2 and all("BadStatusLine" in f or "RemoteDisconnected" in f for f in failures), failures
    assert [x.id for _, x in read_outbox(r, k)] == [notice.id]  # still owed


def test_an_outage_of_300_servers_is_one_message_listing_them(r: redis.Redis) -> None:
    """ServerSilent for 300 servers decided within the group wait, and a PlayersDrop among them: two messages,
    one per alert name, each alert acknowledged in the outbox."""
    from tests.receiver import alert_lines

    k = keys()
    servers = [f"eu-{i:03d}" for i in range(300)]
    findings = [Finding("server_silent", s, True, 61.0, f"no event from {s}") for s in servers]
    drop = [Finding("players_drop", "eu-007", True, 80.0, "eu-007: 20 players online, down 80 %")]
    decided = step_all({}, findings + drop, T0, {"server_silent": Timing(0, 0), "players_drop": Timing(0, 0)})
    sent = apply_decision(r, k, decided, T0, outbox=True)
    with receiving() as hook:
        n = Notifier(hook.url, r, k, external_url="http://dash", timeout_ms=2_000, max_backoff_ms=40, clock=NOW,
                     group_wait_ms=2_000)
        n.start()
        for oid, notice in sent:
            n.offer(Outgoing(notice, oid))
        bodies = hook.wait_for(lambda b: sum(len(x["alerts"]) for x in b) == 301, 20, "every notice")
        n.close()
    assert sorted((b["groupLabels"]["alertname"], len(b["alerts"])) for b in bodies) == [("PlayersDrop", 1),
                                                                                          ("ServerSilent", 300)]
    (outage,) = [b for b in bodies if b["groupLabels"]["alertname"] == "ServerSilent"]
    assert sorted(x[2] for x in alert_lines(outage)) == servers
    assert "server" not in outage["commonLabels"] and outage["commonLabels"]["alertname"] == "ServerSilent"
    assert read_outbox(r, k) == [] and read_alert_view(r, k, T0).webhook.delivered == 301


def test_a_receiver_refusing_for_days_leaves_an_outbox_of_the_newest_notices_and_an_exact_count_of_the_rest(
        r: redis.Redis) -> None:
    """The outbox holds ``keep`` notices; older ones leave it counted, are never sent, and stay in the history;
    the notifier's memory holds no more, and a notice queued before its entry was trimmed is not sent either."""
    k = keys()
    keep = 3
    n = notifier("http://unused", r, k)
    n.keep = keep
    offered = []
    for i in range(7):
        d = fire(f"S{i}", T0 + i)
        ((oid, notice),) = apply_decision(r, k, d, T0 + i, outbox=True, outbox_keep=keep)
        offered.append(Outgoing(notice, oid))
        n.offer(Outgoing(notice, oid))
    assert [x.subject for _, x in read_outbox(r, k)] == ["S4", "S5", "S6"]
    view = read_alert_view(r, k, T0 + 7)
    assert (view.webhook.dropped, view.webhook.waiting) == (4, 3)
    assert len(view.history) == 7  # every change is still in the history
    queued = [n.queue.get_nowait() for _ in range(n.queue.qsize())]
    assert [x.notice.subject for x in queued if x] == ["S4", "S5", "S6"]
    with receiving() as hook:
        n.url = hook.url
        # S2 was dequeued before the trim (in flight): its entry is gone, so it is counted, not sent
        assert n.deliver_group([offered[2], *queued]) is True
        (body,) = hook.bodies  # one group, one message
        assert [line[2] for line in alert_lines(body)] == ["S4", "S5", "S6"]
    view = read_alert_view(r, k, T0 + 7)
    assert (view.webhook.delivered, view.webhook.dropped, view.webhook.waiting) == (3, 4, 0)
