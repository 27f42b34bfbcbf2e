"""``wm-control``: show or change what the lab's generator runs and the watermark delay the job should use; forget a
test server.

The request and the generator's status live in Redis (:mod:`streaming.store.control_store`); this is their
command line. ``wm-control forget SERVER...`` removes servers' traces from the namespace, as the job does once they
retire (:mod:`streaming.store.online.forget`), and only with an operator's credential.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
from dataclasses import asdict

import redis

from streaming.rules.scenarios import SCENARIOS, scenarios_help
from streaming.schema.acl import user_name
from streaming.schema.config import Config, ConfigError
from streaming.schema.keys import KeySchema
from streaming.schema.params import params_for
from streaming.schema.records import check_rate
from streaming.store.control_store import read_lab, write_control
from streaming.store.online.forget import ask, known, players_online
from watermark_client.connection import open_client
from watermark_client.timeutil import format_duration_ms, parse_duration_ms

# --------------------------------------------------------------------------- CLI


def _rate(text: str) -> float:
    try:
        return check_rate(float(text))
    except (ValueError, ConfigError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _delay(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="wm-control",
        description="Show or change what the lab's generator runs and the watermark delay the job should use; "
                    "forget test servers (REDIS_URL, PIPELINE_NAMESPACE from the environment).",
        epilog=scenarios_help(),
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("show", help="print the request and the generator's status as JSON")
    s = sub.add_parser("set", help="change the request (bumps rev)")
    s.add_argument("--scenario", choices=list(SCENARIOS), default=None)
    s.add_argument("--rate", type=_rate, default=None, help="events per second; 0 = as fast as possible")
    s.add_argument("--delay", type=_delay, default=None, help="watermark delay for the job, e.g. 20s, 2m")
    run = s.add_mutually_exclusive_group()
    run.add_argument("--start", dest="running", action="store_const", const=True, default=None)
    run.add_argument("--stop", dest="running", action="store_const", const=False)
    f = sub.add_parser("forget", help="remove test servers' traces from the namespace (an operator's credential: "
                                      "REDIS_URL=$(wm-redis url admin)); their players must be logged out first")
    f.add_argument("servers", nargs="+", metavar="SERVER")
    return p.parse_args(argv)


def cli_user() -> str:
    """Who runs ``wm-control``, as the audit records it: the login and the host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = Config.from_env(os.environ)
        keys = KeySchema(cfg.namespace)
        client = open_client(cfg.redis_url, socket_connect_timeout=2.0, socket_timeout=5.0)
        if args.command == "forget":
            return forget(client, keys, args.servers, params_for(cfg).ttl_s)
        if args.command == "set":
            write_control(client, keys, by=cli_user(), role="Redis credential (wm-control)",
                          scenario=args.scenario, rate=args.rate, running=args.running, delay_ms=args.delay)
        control, status = read_lab(client, keys)
    except (ConfigError, redis.RedisError) as exc:
        print(f"control: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    doc = {"control": None if control is None else {**asdict(control), "delay": None if control.delay_ms is None
                                                    else format_duration_ms(control.delay_ms)},
           "generator": None if status is None else asdict(status)}
    print(json.dumps(doc, indent=2))
    return 0


OPERATORS = ("default", user_name("admin"))
"""The credentials that may forget a server: Redis' own default user (the demo, a Redis without users) and the
operators' (``wm-admin``); never a part's, least of all a game server's (``wm-producer``)."""


def credential(client: redis.Redis) -> str | None:
    """The user ``client`` connects as; None when it may not even ask (``ACL WHOAMI``: a game server's)."""
    try:
        who = client.acl_whoami()
    except redis.exceptions.NoPermissionError:
        return None
    return who.decode() if isinstance(who, bytes) else str(who)


def forget(client: redis.Redis, keys: KeySchema, servers: list[str], ttl_s: int) -> int:
    """``wm-control forget``: refused without an operator's credential (2) or while a server has players online (1,
    naming them to log out); servers of which nothing is kept are said and skipped."""
    who = credential(client)
    if who not in OPERATORS:
        said = f"{who}'s" if who else "a user's that may not ask who it is (ACL WHOAMI)"
        print(f"control: error: forgetting a server takes an operator's credential ({user_name('admin')}: "
              f"REDIS_URL=$(wm-redis url admin)), and REDIS_URL is {said}", file=sys.stderr)
        return 2
    servers = list(dict.fromkeys(servers))
    online = {s: n for s, n in players_online(client, keys, servers).items() if n}
    for server, n in online.items():
        players = sorted(p.decode() for p in client.hkeys(keys.online(server)))[:10]
        print(f"control: error: {server} has {n} player(s) online: log them out first, then forget it "
              f"(docs/ingest.md: producer.stop_server({server!r}, {players!r}))", file=sys.stderr)
    if online:
        return 1
    found = known(client, keys, servers)
    for server in (s for s in servers if not found[s]):
        print(f"nothing of {server} is kept in {keys.namespace}")
    todo = [s for s in servers if found[s]]
    if todo:
        ask(client, keys, todo, ttl_s)
        print(f"forgot {', '.join(todo)} in {keys.namespace}: their counts, regions and windows now; their clocks, "
              "peaks and per-minute history with the online view's next batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
