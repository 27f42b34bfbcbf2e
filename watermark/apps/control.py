"""``wm-control``: show or change what the lab's generator runs and the watermark delay the job should use.

The request and the generator's status live in Redis (:mod:`watermark.store.control_store`); this is their
command line.
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

from watermark.rules.scenarios import SCENARIOS, scenarios_help
from watermark.schema.config import Config, ConfigError
from watermark.schema.keys import KeySchema
from watermark.schema.records import check_rate
from watermark.schema.timeutil import format_duration_ms, parse_duration_ms
from watermark.store.control_store import read_lab, write_control
from watermark.store.redis_conn import open_client

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
        description="Show or change what the lab's generator runs and the watermark delay the job should use "
                    "(REDIS_URL, PIPELINE_NAMESPACE from the environment).",
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


if __name__ == "__main__":
    sys.exit(main())
