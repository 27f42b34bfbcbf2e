"""A free TCP port on the loopback for a child server (Redis, Spark's daemons) to listen on."""

from __future__ import annotations

import random
import socket


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick): the caller's child binds it next."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


CLUSTER_PORT_MAX = 55535
"""A Redis Cluster node also listens 10,000 above its port (the cluster bus), which must be a port too."""


def free_cluster_port(rng: random.Random | None = None, tries: int = 200) -> int:
    """A port for a Redis Cluster node: free, at most :data:`CLUSTER_PORT_MAX`, and its bus port free as well (the
    kernel's own picks are mostly above the range)."""
    pick = rng or random.Random()
    for _ in range(tries):
        port = pick.randrange(20_000, CLUSTER_PORT_MAX)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10_000))
        except OSError:
            continue
        return port
    raise OSError(f"no free port pair for a cluster node after {tries} tries")
