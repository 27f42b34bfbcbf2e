"""Who may do what on the dashboard (decision 0022), as tables: the role rule on claims a provider could send, and
the sign-in settings with the error each mistake gets. No Streamlit, no browser."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboard.access import OPERATOR, VIEWER, AccessError, Operators, SignIn, role, toml_string
from streaming.schema.config import Config, ConfigError

DOMAIN = Operators(domains=frozenset({"ops.example.com"}))
GROUP = Operators(groups=frozenset({"ops"}))
BOTH = Operators(domains=frozenset({"ops.example.com", "example.net"}), groups=frozenset({"ops", "sre"}))
NONE = Operators()


@pytest.mark.parametrize(("claims", "operators", "sign_in", "want"), [
    # sign-in off: open, as a local demo; a rule nobody can meet unsigned leaves everyone a viewer
    (None, NONE, False, OPERATOR),
    (None, GROUP, False, VIEWER),
    ({"email": "a@ops.example.com"}, DOMAIN, False, VIEWER),
    # sign-in on, no rule: nobody is an operator
    ({"email": "a@ops.example.com", "groups": ["ops"]}, NONE, True, VIEWER),
    (None, BOTH, True, VIEWER),  # not signed in
    # the email's domain, exactly, in any case; only one the provider says is verified, exactly true
    ({"email": "a@ops.example.com", "email_verified": True}, DOMAIN, True, OPERATOR),
    ({"email": "A@OPS.Example.COM", "email_verified": True}, DOMAIN, True, OPERATOR),
    ({"email": "a@ops.example.com"}, DOMAIN, True, VIEWER),  # no email_verified: nobody vouches for it
    ({"email": "a@ops.example.com", "email_verified": False}, DOMAIN, True, VIEWER),
    ({"email": "a@ops.example.com", "email_verified": "false"}, DOMAIN, True, VIEWER),
    ({"email": "a@ops.example.com", "email_verified": "False"}, DOMAIN, True, VIEWER),
    ({"email": "a@ops.example.com", "email_verified": "true"}, DOMAIN, True, VIEWER),  # a string is not true
    ({"email": "a@ops.example.com", "email_verified": 1}, DOMAIN, True, VIEWER),
    ({"email": "a@example.com", "email_verified": True}, DOMAIN, True, VIEWER),  # the parent domain
    ({"email": "a@eu.ops.example.com", "email_verified": True}, DOMAIN, True, VIEWER),  # a subdomain
    ({"email": "a@evilops.example.com", "email_verified": True}, DOMAIN, True, VIEWER),  # a suffix
    ({"email": "a@ops.example.com.evil.io", "email_verified": True}, DOMAIN, True, VIEWER),  # a prefix
    ({"email": "ops.example.com", "email_verified": True}, DOMAIN, True, VIEWER),  # no local part
    ({"email": "a@b@ops.example.com", "email_verified": True}, DOMAIN, True, VIEWER),
    ({"email": ["a@ops.example.com"], "email_verified": True}, DOMAIN, True, VIEWER),  # not a string
    ({"sub": "a@ops.example.com", "email_verified": True}, DOMAIN, True, VIEWER),  # the subject is not the email
    ({"email": "a@example.net", "email_verified": True}, BOTH, True, OPERATOR),
    # a group in the groups claim, exactly
    ({"groups": ["dev", "ops"]}, GROUP, True, OPERATOR),
    ({"groups": "ops"}, GROUP, True, OPERATOR),  # one group as a string
    ({"groups": ["Ops", "ops-readers", "devops"]}, GROUP, True, VIEWER),
    ({"groups": []}, GROUP, True, VIEWER),
    ({"groups": [["ops"]]}, GROUP, True, VIEWER),
    ({"groups": {"ops": True}}, GROUP, True, VIEWER),
    ({"group": ["ops"], "roles": ["ops"]}, GROUP, True, VIEWER),  # other claims do not count
    ({"email": "a@ops.example.com", "groups": ["dev"]}, GROUP, True, VIEWER),  # a domain, but only groups count
    ({"email": "a@example.org", "groups": ["sre"]}, BOTH, True, OPERATOR),  # either rule
    ({"email": "a@ops.example.com", "email_verified": False, "groups": ["ops"]}, BOTH, True, OPERATOR),
])
def test_role(claims: dict | None, operators: Operators, sign_in: bool, want: str) -> None:
    assert role(claims, operators, sign_in) == want


@pytest.mark.parametrize(("env", "want"), [
    ({}, NONE),
    ({"DASHBOARD_OPERATORS_DOMAIN": " Ops.Example.com "}, DOMAIN),
    ({"DASHBOARD_OPERATORS_GROUP": "ops"}, GROUP),
    ({"DASHBOARD_OPERATORS_DOMAIN": "ops.example.com, example.net", "DASHBOARD_OPERATORS_GROUP": "ops,sre"}, BOTH),
])
def test_operators_from_env(env: dict[str, str], want: Operators) -> None:
    assert Operators.from_env(env) == want


@pytest.mark.parametrize(("env", "error"), [
    ({"DASHBOARD_OPERATORS_DOMAIN": "@example.com"},
     "DASHBOARD_OPERATORS_DOMAIN: '@example.com' is not an email domain like example.com"),
    ({"DASHBOARD_OPERATORS_DOMAIN": "example"}, "DASHBOARD_OPERATORS_DOMAIN: 'example' is not an email domain like "
                                                "example.com"),
    ({"DASHBOARD_OPERATORS_GROUP": "ops,,sre"},
     "DASHBOARD_OPERATORS_GROUP='ops,,sre' has an empty name; use a comma-separated list"),
])
def test_an_invalid_operator_rule_names_the_variable(env: dict[str, str], error: str) -> None:
    with pytest.raises(AccessError) as err:
        Operators.from_env(env)
    assert str(err.value) == error


FULL = {"DASHBOARD_OIDC_METADATA_URL": "https://id.example.com/.well-known/openid-configuration",
        "DASHBOARD_OIDC_CLIENT_ID": "wm-dashboard", "DASHBOARD_OIDC_CLIENT_SECRET": 's3"cr\\et',
        "DASHBOARD_COOKIE_SECRET": "c" * 32, "DASHBOARD_REDIRECT_URI": "https://wm.example.com/oauth2callback"}


def test_the_sign_in_settings_are_the_configurations_and_its_secrets_stay_out_of_its_repr() -> None:
    """One configuration (issue 64): ``Config.from_env`` reads the dashboard's sign-in and operator rule too, a bad
    one is a configuration error, and neither secret shows where a Config or its sign-in is printed or logged."""
    cfg = Config.from_env({**FULL, "DASHBOARD_OPERATORS_GROUP": "ops"})
    assert cfg.sign_in == SignIn.from_env(FULL) and cfg.operators == Operators(groups=frozenset({"ops"}))
    assert Config.from_env({}).sign_in is None and not Config.from_env({}).operators.configured
    shown = repr(cfg) + repr(cfg.sign_in) + str(cfg.sign_in)
    assert FULL["DASHBOARD_OIDC_CLIENT_SECRET"] not in shown and FULL["DASHBOARD_COOKIE_SECRET"] not in shown
    with pytest.raises(ConfigError, match="DASHBOARD_OPERATORS_DOMAIN"):
        Config.from_env({"DASHBOARD_OPERATORS_DOMAIN": "not a domain"})


def test_sign_in_is_off_without_settings_and_on_with_all_of_them() -> None:
    assert SignIn.from_env({}) is None
    assert SignIn.from_env({"DASHBOARD_OIDC_CLIENT_ID": " "}) is None
    got = SignIn.from_env(FULL)
    assert got == SignIn(FULL["DASHBOARD_OIDC_METADATA_URL"], "wm-dashboard", 's3"cr\\et', "c" * 32,
                         FULL["DASHBOARD_REDIRECT_URI"], "openid email profile")
    assert SignIn.from_env({**FULL, "DASHBOARD_OIDC_SCOPE": "openid  email groups"}).scope == "openid email groups"


def test_the_secrets_streamlit_reads_are_the_settings() -> None:
    sign_in = SignIn.from_env({**FULL, "DASHBOARD_OIDC_SCOPE": "openid groups"})
    assert sign_in is not None
    assert tomllib.loads(sign_in.secrets_toml()) == {"auth": {
        "redirect_uri": FULL["DASHBOARD_REDIRECT_URI"], "cookie_secret": "c" * 32, "client_id": "wm-dashboard",
        "client_secret": 's3"cr\\et', "server_metadata_url": FULL["DASHBOARD_OIDC_METADATA_URL"],
        "client_kwargs": {"scope": "openid groups"}}}


@given(st.text())
def test_any_value_is_one_toml_string(value: str) -> None:
    assert tomllib.loads(f"v = {toml_string(value)}\nw = 1") == {"v": value, "w": 1}


@pytest.mark.parametrize(("env", "error"), [
    ({"DASHBOARD_OIDC_CLIENT_ID": "x"}, "sign-in needs all of DASHBOARD_OIDC_METADATA_URL, DASHBOARD_OIDC_CLIENT_ID, "
     "DASHBOARD_OIDC_CLIENT_SECRET, DASHBOARD_COOKIE_SECRET, DASHBOARD_REDIRECT_URI; missing: "
     "DASHBOARD_OIDC_METADATA_URL, DASHBOARD_OIDC_CLIENT_SECRET, DASHBOARD_COOKIE_SECRET, DASHBOARD_REDIRECT_URI"),
    ({**FULL, "DASHBOARD_COOKIE_SECRET": ""}, "sign-in needs all of DASHBOARD_OIDC_METADATA_URL, "
     "DASHBOARD_OIDC_CLIENT_ID, DASHBOARD_OIDC_CLIENT_SECRET, DASHBOARD_COOKIE_SECRET, DASHBOARD_REDIRECT_URI; "
     "missing: DASHBOARD_COOKIE_SECRET"),
    ({"DASHBOARD_OIDC_SCOPE": "openid"}, "DASHBOARD_OIDC_SCOPE is set but sign-in is not: set "
     "DASHBOARD_OIDC_METADATA_URL, DASHBOARD_OIDC_CLIENT_ID, DASHBOARD_OIDC_CLIENT_SECRET, DASHBOARD_COOKIE_SECRET, "
     "DASHBOARD_REDIRECT_URI"),
    ({**FULL, "DASHBOARD_OIDC_METADATA_URL": "id.example.com"},
     "DASHBOARD_OIDC_METADATA_URL='id.example.com' must be an http:// or https:// URL"),
    ({**FULL, "DASHBOARD_REDIRECT_URI": "https://wm.example.com/"},
     "DASHBOARD_REDIRECT_URI='https://wm.example.com/' must end with /oauth2callback (Streamlit's callback): the "
     "dashboard's address as people open it, then /oauth2callback"),
    ({**FULL, "DASHBOARD_REDIRECT_URI": "http://wm.example.com/oauth2callback"},
     "DASHBOARD_REDIRECT_URI='http://wm.example.com/oauth2callback' is plain http:// beyond this machine: the "
     "provider would send the sign-in code in clear; use https:// (http:// only for localhost or 127.0.0.1)"),
    ({**FULL, "DASHBOARD_COOKIE_SECRET": "short"},
     "DASHBOARD_COOKIE_SECRET must be at least 32 characters (e.g. `openssl rand -hex 32`)"),
    ({**FULL, "DASHBOARD_OIDC_SCOPE": "email groups"}, "DASHBOARD_OIDC_SCOPE='email groups' must include openid"),
])
def test_an_invalid_sign_in_names_the_variable(env: dict[str, str], error: str) -> None:
    with pytest.raises(AccessError) as err:
        SignIn.from_env(env)
    assert str(err.value) == error


@pytest.mark.parametrize("redirect", ["http://localhost:8501/oauth2callback", "http://127.0.0.1:8501/oauth2callback",
                                      "http://[::1]:8501/oauth2callback", "https://wm.example.com/oauth2callback"])
def test_plain_http_redirects_are_for_this_machine_only(redirect: str) -> None:
    assert SignIn.from_env({**FULL, "DASHBOARD_REDIRECT_URI": redirect}) is not None


@pytest.mark.parametrize(("claims", "refused"), [
    (["sub", "email", "groups"], True),  # says it sends no email_verified: the domain rule would trust any email
    (["sub", "email", "email_verified"], False),
    (None, False),  # says nothing: each ID token is checked at sign-in
])
def test_a_provider_that_vouches_for_no_email_is_refused_at_start(claims: list[str] | None, refused: bool,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 63, item 5: with ``DASHBOARD_OPERATORS_DOMAIN``, ``wm-dashboard`` reads the provider's discovery
    document (a real HTTP server here) and stops, naming the variable, if it lists claims without
    ``email_verified``."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from dashboard import serve

    body = json.dumps({"issuer": "x", **({"claims_supported": claims} if claims is not None else {})}).encode()

    class Discovery(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Discovery)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(serve, "supervise", lambda command: 0)  # what would run Streamlit
        for k, v in {**FULL, "DASHBOARD_OPERATORS_DOMAIN": "ops.example.com",
                     "DASHBOARD_OIDC_METADATA_URL": f"http://127.0.0.1:{server.server_port}/.well-known/x"}.items():
            monkeypatch.setenv(k, v)
        with pytest.raises(SystemExit) as stopped:
            serve.main([])
    finally:
        server.shutdown()
    assert stopped.value.code == (2 if refused else 0)
    said = capsys.readouterr().err
    assert ("DASHBOARD_OPERATORS_DOMAIN needs a provider that vouches for emails" in said) is refused


def test_the_launcher_refuses_a_plain_http_redirect_beyond_this_machine() -> None:
    """The refusal where it matters: ``wm-dashboard`` itself stops at start (exit 2), naming the variable, before
    Streamlit serves anything."""
    import os
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DASHBOARD_")}, **FULL,
           "DASHBOARD_REDIRECT_URI": "http://wm.example.com/oauth2callback"}
    done = subprocess.run([sys.executable, "-c", "from dashboard.serve import main; main()"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "DASHBOARD_REDIRECT_URI='http://wm.example.com/oauth2callback' is plain http:// beyond this machine" \
        in done.stderr
