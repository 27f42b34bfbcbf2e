"""Mark what happened to the game (a deploy, maintenance, an incident) so every time chart draws it over its range.

``wm-annotate "patch 1.4.2" [--kind deploy] [--region eu] [--at ISO] [--until ISO | --for 30m]``
adds one (``--at``: now when left out; no ``--until``/``--for``: a moment) and prints it as JSON;
``wm-annotate --list [--since 7d]`` prints those of the range. The same over HTTP on the monitor's port
(``METRICS_PORT``, beside ``/metrics``): ``POST /annotations`` with a JSON body ``{"text": ..., "kind": ...,
"region": ..., "start": ISO or ms, "end": ISO or ms}`` adds one (201 and the annotation; 400 and why), ``GET
/annotations?since=7d`` lists them. Stored by :mod:`streaming.store.annotation_store`.

``POST`` asks for ``Authorization: Bearer <token>`` when a token is configured (``ANNOTATIONS_TOKEN`` or
``ANNOTATIONS_TOKEN_FILE``), and is refused when the port listens beyond loopback without one: anyone who can
reach the port could otherwise write to Redis. ``GET`` stays open, as ``/metrics`` is. The command writes to
Redis itself, or with ``--url`` (``ANNOTATIONS_URL``) goes through a monitor's endpoint with the same token.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, urlencode

import msgspec
import redis

from streaming.apps import config_or_exit
from streaming.schema.config import Config, ConfigError, annotations_token
from streaming.schema.keys import KeySchema
from streaming.schema.records import ANNOTATION_KINDS, Annotation
from streaming.store.annotation_store import add_annotation, annotation_from, read_annotations
from watermark_client.connection import open_client
from watermark_client.timeutil import parse_duration_ms

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def _doc(a: Annotation) -> dict[str, Any]:
    doc: dict[str, Any] = msgspec.to_builtins(a)
    return doc


def annotations_app(client: redis.Redis, keys: KeySchema, keep_days: int,
                    now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> WsgiApp:
    """``POST /annotations`` and ``GET /annotations?since=7d`` as a WSGI application. Who may ``POST`` (the token,
    the size, the site it comes from) is decided by the server before the body is read
    (:func:`streaming.apps.monitor.http.admit`)."""

    def reply(start: StartResponse, status: str, body: object) -> list[bytes]:
        data = json.dumps(body).encode()
        start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def app(environ: dict[str, Any], start: StartResponse) -> list[bytes]:
        method, now = environ["REQUEST_METHOD"], now_ms()
        try:
            if method == "POST":
                body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
                doc = json.loads(body or b"{}")
                if not isinstance(doc, dict):
                    raise ValueError("the body must be a JSON object")
                a = annotation_from(doc, now)
                add_annotation(client, keys, a, keep_days, now)
                return reply(start, "201 Created", _doc(a))
            if method == "GET":
                since = parse_qs(environ.get("QUERY_STRING", "")).get("since", ["7d"])[0]
                found = read_annotations(client, keys, now - parse_duration_ms(since), now + 1)
                return reply(start, "200 OK", [_doc(a) for a in found])
            return reply(start, "405 Method Not Allowed", {"error": "GET or POST"})
        except (ValueError, KeyError) as exc:
            return reply(start, "400 Bad Request", {"error": str(exc)})
        except redis.RedisError as exc:
            return reply(start, "503 Service Unavailable", {"error": f"Redis: {exc}"})

    return app


def beside(other: WsgiApp, annotations: WsgiApp) -> WsgiApp:
    """``/annotations`` to ``annotations``, every other path to ``other`` (``/metrics``)."""

    def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        return (annotations if environ.get("PATH_INFO", "").rstrip("/") == "/annotations" else other)(environ, start)

    return app


def parse_args(argv: list[str] | None, settings: Config | None = None) -> argparse.Namespace:
    """The command line; ``--url``'s default is the environment's, as ``settings`` (:class:`Config`) read it."""
    settings = settings or Config()
    p = argparse.ArgumentParser(prog="wm-annotate", description=__doc__.split("\n\n")[0])
    p.add_argument("text", nargs="?", help='what happened, e.g. "patch 1.4.2"')
    p.add_argument("--kind", default="note", choices=ANNOTATION_KINDS)
    p.add_argument("--region", help="the region it concerns (default: every region)")
    p.add_argument("--at", help="when it started (ISO-8601 UTC; default: now)")
    span = p.add_mutually_exclusive_group()
    span.add_argument("--until", help="when it ended (ISO-8601 UTC)")
    span.add_argument("--for", dest="duration", help="how long it lasted, e.g. 30m")
    p.add_argument("--list", action="store_true", help="print the annotations of the last --since instead")
    p.add_argument("--since", default="7d", help="with --list: how far back (default 7d)")
    p.add_argument("--url", default=settings.annotations_url,
                   help="a monitor (http://host:9108): add and list through its /annotations, sending "
                        "ANNOTATIONS_TOKEN (ANNOTATIONS_URL; default: straight to Redis)")
    args = p.parse_args(argv)
    if not args.list and not args.text:
        p.error("give the annotation's text, or --list")
    return args


def _endpoint(url: str) -> str:
    base = url.strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"--url (ANNOTATIONS_URL) {url!r} must start with http:// or https://")
    return base if base.endswith("/annotations") else f"{base}/annotations"


def _said(exc: urllib.error.HTTPError) -> str:
    """What the monitor said, from its JSON body, else the status' reason."""
    try:
        return str(json.loads(exc.read())["error"])
    except (ValueError, KeyError, TypeError, OSError, http.client.HTTPException):
        return str(exc.reason)


def over_http(args: argparse.Namespace, token: str | None) -> int:
    """Adds or lists through a monitor's ``/annotations``: where only its port is reachable, not Redis."""
    url = _endpoint(args.url)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    if args.list:
        req = urllib.request.Request(f"{url}?{urlencode({'since': args.since})}", headers=headers)
    else:
        body = {"text": args.text, "kind": args.kind, "region": args.region, "start": args.at, "end": args.until,
                "for": args.duration}
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            doc = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        hint = ""
        if exc.code == 401:
            hint = ("; ANNOTATIONS_TOKEN (or ANNOTATIONS_TOKEN_FILE) is not the monitor's token" if token else
                    "; set ANNOTATIONS_TOKEN (or ANNOTATIONS_TOKEN_FILE) to the monitor's token")
        print(f"annotate: error: {url} refused it ({exc.code}): {_said(exc)}{hint}", file=sys.stderr)
        return 2 if exc.code == 400 else 1
    except (OSError, ValueError, http.client.HTTPException) as exc:  # URLError is an OSError
        print(f"annotate: error: {url}: {getattr(exc, 'reason', None) or exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    cfg = config_or_exit("annotate")
    args = parse_args(argv, cfg)
    now = int(time.time() * 1000)
    try:
        if args.url:
            return over_http(args, annotations_token(os.environ))
        keys = KeySchema(cfg.namespace)
        client = open_client(cfg.redis_url, socket_connect_timeout=2.0, socket_timeout=5.0)
        if args.list:
            found = read_annotations(client, keys, now - parse_duration_ms(args.since), now + 1)
            print(json.dumps([_doc(a) for a in found], indent=2))
            return 0
        a = annotation_from({"text": args.text, "kind": args.kind, "region": args.region, "start": args.at,
                             "end": args.until, "for": args.duration}, now)
        add_annotation(client, keys, a, cfg.history_days, now)
    except (ConfigError, ValueError) as exc:
        print(f"annotate: error: {exc}", file=sys.stderr)
        return 2
    except redis.RedisError as exc:
        print(f"annotate: error: Redis: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(_doc(a), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
