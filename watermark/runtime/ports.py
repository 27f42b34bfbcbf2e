"""A free TCP port on the loopback for a child server (Redis, Spark's daemons) to listen on."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick): the caller's child binds it next."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
