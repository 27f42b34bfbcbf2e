"""``wm-dashboard``: the dashboard (``streamlit run dashboard/app.py``), signing people in when configured (decision
0022); what the Procfiles run.

    wm-dashboard [streamlit run's options, e.g. --server.port 8501 --server.address 127.0.0.1]

With ``DASHBOARD_OIDC_METADATA_URL``, ``DASHBOARD_OIDC_CLIENT_ID``, ``DASHBOARD_OIDC_CLIENT_SECRET``,
``DASHBOARD_COOKIE_SECRET`` and ``DASHBOARD_REDIRECT_URI`` set, it writes Streamlit's ``[auth]`` secrets to a file of
its own (mode 0600 in a fresh private directory) and runs Streamlit as its child pointed at it (``secrets.files``): no
secret is on a command line or in the work tree. It passes a stop (SIGTERM, SIGINT, SIGHUP) on to Streamlit, waits
for it and removes the file; a SIGKILL leaves the file behind but not Streamlit, which the kernel stops
(``die_with_parent``). Without them it becomes Streamlit itself, open as for a local demo, and every page says so.
An invalid setting stops it at start, naming the variable.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dashboard.access import AccessError, Operators, SignIn, domain_rule_problem
from streaming.runtime.children import die_with_parent
from streaming.runtime.signals import on_stop_signals
from streaming.schema.config import Config

APP = Path(__file__).resolve().parent / "app.py"


@contextmanager
def secrets_file(sign_in: SignIn | None) -> Iterator[Path | None]:
    """A file holding ``sign_in``'s ``[auth]`` secrets, readable by this user only, gone on leaving."""
    if sign_in is None:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="wm-dashboard-"))  # mode 0700
    try:
        path = folder / "secrets.toml"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(sign_in.secrets_toml())
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def describe(sign_in: SignIn | None, operators: Operators, secrets: Path | None) -> str:
    if sign_in is None:
        return ("sign-in: off (no DASHBOARD_OIDC_*): the dashboard is open to anyone who reaches it"
                + ("; DASHBOARD_OPERATORS_* is set, so nobody can use Lab control" if operators.configured else ""))
    rule = [*(f"email domain {d}" for d in sorted(operators.domains)),
            *(f"group {g}" for g in sorted(operators.groups))]
    return (f"sign-in: OpenID Connect, {sign_in.metadata_url} (client {sign_in.client_id}); operators: "
            f"{' or '.join(rule) if rule else 'none (set DASHBOARD_OPERATORS_DOMAIN or _GROUP)'}; "
            f"[auth] secrets in {secrets} (mode 0600, removed at exit)")


def provider_problem(metadata_url: str, timeout_s: float = 10.0) -> str | None:
    """Why the provider at ``metadata_url`` cannot serve the email-domain rule (:func:`domain_rule_problem`);
    None when it can, or when its discovery document cannot be read now (said; sign-in will say more)."""
    try:
        with urllib.request.urlopen(metadata_url, timeout=timeout_s) as reply:  # noqa: S310 - checked https/loopback
            metadata = json.loads(reply.read(1_000_000))
    except (OSError, ValueError) as exc:
        print(f"wm-dashboard: cannot read {metadata_url} to check the provider vouches for emails ({exc}); each "
              "ID token is still checked for email_verified at sign-in", flush=True)
        return None
    return domain_rule_problem(metadata) if isinstance(metadata, dict) else None


def supervise(command: list[str]) -> int:
    """Run ``command`` in a session of its own, pass it the first stop signal this process gets, and return its
    exit code (0 when it ended on that request)."""
    stop = on_stop_signals((signal.SIGTERM, signal.SIGINT, signal.SIGHUP))  # before the child: none is missed
    child = subprocess.Popen(command, start_new_session=True, preexec_fn=die_with_parent())

    def forward() -> None:
        stop.event.wait()
        child.send_signal(stop.first or signal.SIGTERM)

    threading.Thread(target=forward, name="forward-stop", daemon=True).start()
    code = child.wait()
    if stop.event.is_set() and code in (0, -(stop.first or 0)):
        return 0
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        sign_in, operators = Config.sign_in_from(os.environ), Config.operators_from(os.environ)
    except AccessError as exc:
        print(f"wm-dashboard: {exc}", file=sys.stderr)
        sys.exit(2)
    if sign_in is not None and operators.domains:
        problem = provider_problem(sign_in.metadata_url)
        if problem is not None:
            print(f"wm-dashboard: {problem}", file=sys.stderr)
            sys.exit(2)
    streamlit = [sys.executable, "-m", "streamlit", "run", str(APP)]
    if sign_in is None:  # nothing to remove at the end: become Streamlit, as `exec streamlit run` did
        print(describe(sign_in, operators, None), flush=True)
        os.execv(sys.executable, [*streamlit, *args])
    with secrets_file(sign_in) as secrets:
        print(describe(sign_in, operators, secrets), flush=True)
        code = supervise([*streamlit, "--secrets.files", str(secrets), *args])
    sys.exit(code)


if __name__ == "__main__":
    main()
