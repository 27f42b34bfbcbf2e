"""``wm-online``: the online view folded off the job, one process per group of servers (decision 0020).

    wm-online [--group G]

With ``ONLINE_GROUPS=N`` (N >= 1) the job folds nothing for the online view: it hands each batch's accepted events
over, split among N groups of servers (a server's group: the CRC-32 of its name modulo N), and each group's
process folds its share (its players' state kept in memory between batches, as the job's fold does), the last one
to finish a batch merging it into the view. ``--group G`` runs group G (one per machine, say); without it every
group runs here, each in a child process of its own (what ``./run.sh`` starts). With ``ONLINE_GROUPS=0``, the
default, the job folds the view itself and this waits to be stopped, so a Procfile may always list it.

A stop (SIGTERM, SIGINT, a hang-up) is quiet and comes between batches; a crash loses nothing: the next start
goes on from the group's last commit, which is atomic with the batch's share leaving Redis.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Sequence

from streaming.runtime.children import die_with_parent
from streaming.runtime.signals import on_stop_signals
from streaming.schema.config import Config, ConfigError, redact_url

log = logging.getLogger("streaming.apps.online")
BLOCK_MS = 1_000
"""How long a group waits for the next batch before looking at the stop request again."""
WATCH_S = 0.5
"""How often the parent of every group looks at its children."""


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s online %(levelname)s %(message)s", stream=sys.stderr)
    p = argparse.ArgumentParser(prog="wm-online", description=__doc__.splitlines()[0])
    p.add_argument("--group", type=int, default=None, help="the group to fold (default: every group, as children)")
    args = p.parse_args(argv)
    try:
        cfg = Config.from_env(os.environ)
        if args.group is not None and not 0 <= args.group < cfg.online_groups:
            raise ConfigError(f"--group {args.group}: ONLINE_GROUPS={cfg.online_groups} numbers the groups from 0 to "
                              f"{cfg.online_groups - 1}")
    except ConfigError as exc:
        log.error("config error: %s", exc)
        return 2
    stop = on_stop_signals()
    if cfg.online_groups == 0:
        log.info("ONLINE_GROUPS=0: the job folds the online view itself; nothing to do here")
        stop.event.wait()
        return 0
    if args.group is None:
        return _every_group(cfg.online_groups, stop.event)
    return _fold(cfg, args.group, stop.event)


def _fold(cfg: Config, index: int, stop: threading.Event) -> int:
    # Imported here: the process that only waits (ONLINE_GROUPS=0) or only watches its children holds no pandas
    # or Arrow (about 80 MB of memory each).
    from streaming.rules.online.groups import Group
    from streaming.schema.keys import KeySchema
    from streaming.schema.params import params_for
    from streaming.store.online.runner import GroupRunner
    from streaming.store.redis_conn import connect

    try:
        client = connect(cfg.redis_url)
    except ConnectionError as exc:
        log.error("%s", exc)
        return 1
    group = Group(index, cfg.online_groups)
    runner = GroupRunner(client, KeySchema(cfg.namespace), group, params_for(cfg))
    log.info("folding group %d of %d of %s at %s", index, group.of, cfg.namespace, redact_url(cfg.redis_url))
    try:
        while not stop.is_set():
            runner.step(block_ms=BLOCK_MS)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    return 0


def _every_group(groups: int, stop: threading.Event) -> int:
    """Each group in a child process of its own (each a core's worth of folding); a stop stops them all, and the
    first to end on its own ends the others, with its exit code (a stack's rule: nothing runs half)."""
    children = [subprocess.Popen([sys.executable, "-m", "streaming.apps.online", "--group", str(g)],
                                 preexec_fn=die_with_parent(), start_new_session=True) for g in range(groups)]
    log.info("folding the online view in %d groups: pids %s", groups, " ".join(str(c.pid) for c in children))
    code = 0
    while not stop.is_set():
        ended = [c for c in children if c.poll() is not None]
        if ended:
            code = ended[0].returncode or 1  # a group has no reason to end on its own
            log.error("group %d ended (exit %s): stopping the others", children.index(ended[0]),
                      ended[0].returncode)
            break
        stop.wait(WATCH_S)
    for c in children:
        if c.poll() is None:
            c.terminate()
    for c in children:
        c.wait()
    return code


def run() -> None:
    raise SystemExit(main())


if __name__ == "__main__":
    run()
