"""The online view's keys renamed from the layout before issue 45 (``presence:``, ``present:``, ``loggedout:``, the
hand-off's ``online:``) when the job starts: every key keeps its content under its new name, a second start moves
nothing, and the new layout's keys (a server called ``rows`` or ``state`` too) are never taken for old ones. Real
redis-server."""

from __future__ import annotations

import uuid

import redis

from streaming.schema.keys import KeySchema
from streaming.store.online.moved import move_old_keys, new_name


def test_an_old_layout_is_renamed_once_and_keeps_everything(r: redis.Redis) -> None:
    keys = KeySchema(f"mv-{uuid.uuid4().hex[:8]}")
    ns = keys.namespace
    old = {  # old name -> (new name, content)
        f"{ns}:presence:state": (keys.online_state, {"last_batch": "41"}),
        f"{ns}:presence:counts": (keys.online_counts, {"A": "3", "state": "1"}),
        f"{ns}:presence:peak:ever": (keys.online_peak_ever, {"*": "4|1000"}),
        f"{ns}:presence:group:0-2": (keys.online_group(0, 2), {"last_batch": "41"}),
        f"{ns}:present:A": (keys.online("A"), {"p1": "1000"}),
        f"{ns}:present:state": (keys.online("state"), {"p2": "2000"}),  # a server called "state"
        f"{ns}:loggedout:rows": (keys.logged_out("rows"), {"p3": "3000"}),
        f"{ns}:online:handoff": (keys.handoff_guard, {"last_batch": "41"}),
        f"{ns}:online:rows:41:0": (keys.handoff_rows(41, 0), {"raw": "arrow"}),
    }
    for name, (_, content) in old.items():
        r.hset(name, mapping=content)
    r.zadd(f"{ns}:presence:minutes", {"m1": 1})
    r.xadd(f"{ns}:online:batches", {"b": "41"})
    r.hset(f"{ns}.per-server-min:state", "last_batch", "41")  # a lane's: not the online view's
    assert move_old_keys(r, keys) == len(old) + 2
    for name, (new, content) in old.items():
        assert not r.exists(name), name
        assert {k.decode(): v.decode() for k, v in r.hgetall(new).items()} == content, new
    assert r.zrange(keys.online_minutes, 0, -1) == [b"m1"]
    assert r.xlen(keys.handoff_batches) == 1
    assert r.exists(f"{ns}.per-server-min:state")
    assert move_old_keys(r, keys) == 0  # moved keys are not there to move again


def test_the_new_layout_s_names_are_never_old_ones() -> None:
    keys = KeySchema("wm")
    for new in (keys.online_state, keys.online("rows"), keys.online("presence"), keys.logged_out("batches"),
                keys.online_group(0, 1), keys.online_peak(0), keys.handoff_rows(1, 0), keys.handoff_batches,
                keys.handoff_guard, keys.state, "wm.lane:presence:state", "other:presence:state"):
        assert new_name(keys, new) is None, new
    assert new_name(keys, "wm:present:online") == keys.online("online") == "wm:online:players:online"
