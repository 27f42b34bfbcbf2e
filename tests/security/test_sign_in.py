"""Sign-in and roles (decision 0022) for real: ``wm-dashboard`` signs people in against a real OpenID Connect
provider (``oidc-provider-mock``, a process of its own on loopback), driven in Chromium.

A signed-out browser gets the sign-in page and nothing else, whatever path it asks for; a viewer (claims without
the operator domain or group) sees every page and Lab control read-only; an operator, by the email's domain or by
a group, changes the delay, which lands in Redis. The launcher keeps the secrets off its command line, in a file
only its user reads, gone when it stops. And under AppTest: a press that reaches the server from someone who is
no operator (any more) saves nothing.
"""

from __future__ import annotations

import json
import re
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis

from dashboard.testing import page_test
from dashboard.text import JOINER
from streaming.apps.redis_server import free_port
from streaming.schema.keys import KeySchema
from streaming.store.annotation_store import read_annotations
from streaming.store.control_store import read_control
from tests.procs import Proc
from tests.ui.test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS

CLIENT_SECRET = "client-" + uuid.uuid4().hex
COOKIE_SECRET = "cookie-" + uuid.uuid4().hex
USERS = {  # the provider's users: the claims it puts in their ID tokens
    "vera": {"email": "vera@example.org", "email_verified": True, "groups": ["analysts"]},  # a viewer
    "gina": {"email": "gina@example.org", "email_verified": True, "groups": ["analysts", "ops"]},  # by her group
    "omar": {"email": "omar@ops.example.com", "email_verified": True},  # by his email's domain
    "eve": {"email": "eve@ops.example.com", "email_verified": False, "groups": ["devops"]},  # unverified: a viewer
}
READ_ONLY = "Read-only: changing the Lab control settings needs the operator role"
IDLE = '[data-test-script-state="notRunning"]'
BUTTONS = ("Apply scenario and rate", "Start", "Stop", "Apply delay (restarts the query, history kept)")


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    users = [arg for sub, claims in USERS.items() for arg in ("--user-claims", json.dumps({"sub": sub, **claims}))]
    proc = Proc.python("oidc", ["oidc_provider_mock", "--port", str(port), *users], {},
                       tmp_path_factory.mktemp("oidc"))
    try:
        proc.wait_for(r"Uvicorn running on", timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def sign_in_env(provider: str, port: int, redis_url: str, ns: str) -> dict[str, str]:
    return {"REDIS_URL": redis_url, "PIPELINE_NAMESPACE": ns,
            "DASHBOARD_OIDC_METADATA_URL": f"{provider}/.well-known/openid-configuration",
            "DASHBOARD_OIDC_CLIENT_ID": "wm-dashboard", "DASHBOARD_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "DASHBOARD_COOKIE_SECRET": COOKIE_SECRET, "DASHBOARD_REDIRECT_URI": f"http://127.0.0.1:{port}/oauth2callback",
            "DASHBOARD_OPERATORS_DOMAIN": "ops.example.com", "DASHBOARD_OPERATORS_GROUP": "ops"}


def launch(env: dict[str, str], port: int, log_dir: Path) -> Proc:
    proc = Proc.python("dashboard", ["dashboard.serve", "--server.port", str(port), "--server.address", "127.0.0.1",
                                     "--server.headless", "true", "--browser.gatherUsageStats", "false"], env, log_dir)
    proc.wait_for(r"You can now view", timeout=60)
    return proc


@pytest.fixture(scope="module")
def served(provider: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    port, ns = free_port(), f"signin-{uuid.uuid4().hex[:8]}"
    proc = launch(sign_in_env(provider, port, redis_url, ns), port, tmp_path_factory.mktemp("signin"))
    try:
        yield {"url": f"http://127.0.0.1:{port}", "keys": KeySchema(ns), "redis_url": redis_url}
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `apt-get install chromium` (.ci/run does)"
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def expect(locator):  # noqa: ANN001, ANN201 - playwright's; imported where Chromium is used
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def fresh_page(browser: object):  # noqa: ANN201 - a playwright Page
    """A browser context of its own (no cookie of another test), kept to loopback: the provider's form names a
    stylesheet on the internet, which it does not need."""
    context = browser.new_context(viewport={"width": 1280, "height": 1400})  # type: ignore[attr-defined]
    context.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/])"), lambda route: route.abort())
    return context.new_page()


def signed_in_as(sub: str) -> str:
    """The sidebar's words for ``sub`` signed in (the email as the pages show any name: no autolink)."""
    return "Signed in as " + str(USERS[sub]["email"]).replace("@", "@" + JOINER)


def sign_in(page, url: str, sub: str) -> None:  # noqa: ANN001 - a playwright Page
    """Through the real flow: the dashboard's button, the provider's form (the subject typed, as a person
    would), back to the dashboard signed in."""
    page.goto(url + "/")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_placeholder("sub").fill(sub)
    page.get_by_role("button", name="Authorize", exact=True).click()
    page.get_by_text(signed_in_as(sub)).wait_for(timeout=60_000)


def settled(page) -> None:  # noqa: ANN001 - a playwright Page
    page.wait_for_selector(IDLE, timeout=60_000)



@pytest.mark.browser
def test_a_signed_out_browser_gets_the_sign_in_page_alone_at_any_path(served: dict, browser: object) -> None:
    page = fresh_page(browser)
    for path in ("/", "/ops", "/control", "/alerts", "/watermark", "/health", "/no-such-page"):
        page.goto(served["url"] + path)
        page.get_by_role("button", name="Sign in").wait_for(timeout=60_000)
        settled(page)
        heads = page.locator("h1").all_inner_texts()
        assert heads == ["Watermark dashboard"], (path, heads)
        assert page.locator('[data-testid="stSidebarNav"]').count() == 0, path
        text = page.locator('[data-testid="stMain"]').inner_text()
        for word in ("Live ops", "Lab control", "Watermark delay", "Pipeline health", "Redis", "Apply"):
            assert word not in text, (path, word)
    page.context.close()


@pytest.mark.browser
@pytest.mark.parametrize("sub", ["vera", "eve"])
def test_a_viewer_sees_every_page_and_lab_control_read_only(served: dict, browser: object, sub: str) -> None:
    page = fresh_page(browser)
    sign_in(page, served["url"], sub)
    page.get_by_role("heading", name="Live ops").wait_for(timeout=60_000)
    assert page.get_by_text(f"{signed_in_as(sub)} · viewer").count() == 1
    nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
    for title in ("Live ops", "Alerts", "Watermark", "Lag", "Events", "Pipeline health", "Watermark lab",
                  "Choosing the delay", "Lab control"):
        assert title in nav, (title, nav)
    for path, heading in (("/alerts", "Alerts"), ("/health", "Pipeline health"), ("/control", "Lab control")):
        page.goto(served["url"] + path)
        page.get_by_role("heading", name=heading).wait_for(timeout=60_000)
        if path == "/alerts":  # no form to mark what happened: an operator's
            page.get_by_text("Read-only: adding an annotation needs the operator role").wait_for(timeout=60_000)
            assert page.get_by_role("button", name="Add annotation").count() == 0
    page.get_by_text(READ_ONLY).wait_for(timeout=60_000)
    settled(page)
    for name in BUTTONS:
        expect(page.get_by_role("button", name=name, exact=True)).to_be_disabled(timeout=30_000)
    expect(page.get_by_label("Delay (e.g. 20s, 2m)", exact=True)).to_be_disabled(timeout=30_000)
    page.get_by_role("button", name=BUTTONS[-1]).click(force=True)  # what a click on it can do: nothing
    settled(page)
    client = redis.Redis.from_url(served["redis_url"])
    assert client.exists(served["keys"].control) == 0, "a viewer's page must not write the control hash"
    client.close()
    page.context.close()


@pytest.mark.browser
@pytest.mark.parametrize(("sub", "delay", "delay_ms"), [("gina", "45s", 45_000), ("omar", "2m", 120_000)])
def test_an_operator_changes_the_delay_and_signs_out(served: dict, browser: object, sub: str, delay: str,
                                                     delay_ms: int) -> None:
    page = fresh_page(browser)
    sign_in(page, served["url"], sub)
    assert page.get_by_text(f"{signed_in_as(sub)} · operator").count() == 1
    page.goto(served["url"] + "/control")
    page.get_by_role("heading", name="Lab control").wait_for(timeout=60_000)
    settled(page)
    for name in BUTTONS:
        expect(page.get_by_role("button", name=name, exact=True)).to_be_enabled(timeout=30_000)
    assert page.get_by_text(READ_ONLY).count() == 0
    field = page.get_by_label("Delay (e.g. 20s, 2m)", exact=True)
    field.fill(delay)
    field.press("Enter")
    settled(page)
    page.get_by_role("button", name=BUTTONS[-1]).click()
    page.get_by_text(re.compile(r"Saved as rev \d+\.")).wait_for(timeout=60_000)
    client = redis.Redis.from_url(served["redis_url"])
    control = read_control(client, served["keys"])
    client.close()
    assert control is not None and control.delay_ms == delay_ms
    page.goto(served["url"] + "/alerts")  # and marks what happened, for every time chart
    page.get_by_role("textbox", name="What happened").fill(f"deploy by {sub}")
    page.get_by_role("button", name="Add annotation").click()
    page.get_by_text(f"Added: deploy “deploy by {sub}”").wait_for(timeout=60_000)
    client = redis.Redis.from_url(served["redis_url"])
    notes = read_annotations(client, served["keys"], 0, 2**62)
    client.close()
    assert f"deploy by {sub}" in [a.text for a in notes]
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("button", name="End session").click()  # the provider's own sign-out (RP-initiated), then back
    page.get_by_role("button", name="Sign in").wait_for(timeout=60_000)
    page.goto(served["url"] + "/control")
    page.get_by_role("button", name="Sign in").wait_for(timeout=60_000)
    settled(page)
    assert page.get_by_role("heading", name="Lab control").count() == 0
    page.context.close()


@pytest.mark.browser
def test_the_launcher_keeps_the_secrets_off_its_command_line_and_removes_them(provider: str, redis_url: str,
                                                                             tmp_path: Path) -> None:
    port = free_port()
    proc = launch(sign_in_env(provider, port, redis_url, "signin-launcher"), port, tmp_path)
    try:
        said = proc.wait_for(r"\[auth\] secrets in ", timeout=1)
        secrets = Path(re.search(r"secrets in (\S+) ", said).group(1))  # type: ignore[union-attr]
        assert secrets.read_text().count(CLIENT_SECRET) == 1
        assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
        assert stat.S_IMODE(secrets.parent.stat().st_mode) == 0o700
        family = [psutil.Process(proc.popen.pid), *psutil.Process(proc.popen.pid).children(recursive=True)]
        lines = [" ".join(p.cmdline()) for p in family]
        assert any("dashboard.serve" in line for line in lines), lines
        assert not [line for line in lines if CLIENT_SECRET in line or COOKIE_SECRET in line]
        assert CLIENT_SECRET not in proc.tail(1000) and COOKIE_SECRET not in proc.tail(1000)
    finally:
        assert proc.stop() == 0
    assert not secrets.parent.exists(), "the secrets must not outlive the dashboard"


# --------------------------------------------------------------------------- the server asks again (AppTest)

AUTH = {"auth": {"redirect_uri": "http://127.0.0.1:8501/oauth2callback", "cookie_secret": COOKIE_SECRET,
                 "client_id": "wm-dashboard", "client_secret": CLIENT_SECRET,
                 "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration"}}


def test_a_press_from_someone_no_longer_an_operator_saves_nothing(redis_url: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ns = f"signin-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", ns)
    monkeypatch.setenv("DASHBOARD_OPERATORS_GROUP", "ops")
    at = page_test("control", run=False)
    at.secrets.update(AUTH)
    at.user = {"is_logged_in": True, "email": "gina@example.org", "groups": ["ops"]}
    at.run()
    assert not at.exception and not at.button(key="lab_apply_delay").disabled
    at.text_input(key="lab_delay").input("45s").run()
    monkeypatch.setenv("DASHBOARD_OPERATORS_GROUP", "sre")  # the rule changed under an open page
    at.button(key="lab_apply_delay").click().run()
    assert any(w.value.startswith("Not saved: changing the Lab control settings needs the operator role")
               for w in at.warning), [w.value for w in at.warning]
    client = redis.Redis.from_url(redis_url)
    assert read_control(client, KeySchema(ns)) is None
    client.close()
    assert at.button(key="lab_apply_delay").disabled  # and the page now shows it read-only


def test_without_sign_in_every_page_says_it_is_open(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", f"open-{uuid.uuid4().hex[:8]}")
    for page in ("ops", "control"):
        at = page_test(page)
        notes = [c.value for c in at.sidebar.caption if "Open to anyone who reaches this address" in c.value]
        assert len(notes) == 1 and "change what it offers to change" in notes[0], page
        assert [b.key for b in at.sidebar.button if b.key == "sign_out"] == []


def test_sign_in_asked_for_but_not_handed_to_streamlit_shows_nothing(redis_url: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``streamlit run dashboard/app.py`` by hand, with the sign-in settings in its environment: shut, not open."""
    from streamlit.testing.v1 import AppTest

    from tests.paths import APP

    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DASHBOARD_OIDC_CLIENT_ID", "wm-dashboard")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "Sign-in is configured (`DASHBOARD_OIDC_*`) but this dashboard was started without it, so it shows nothing: "
        "start it with `wm-dashboard` (the Procfile does), which hands Streamlit the `[auth]` secrets."]
    assert not at.title and not at.sidebar.caption and not at.main.button
