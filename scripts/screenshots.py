"""Screenshots of a running dashboard, as its users see it: every page at 1280x800 (a laptop; what is above the
fold) and the wall at 1920x1080 (a TV), into ``docs/live-*.png``.

    ./run.sh &                      # or a fleet: SERVERS=300 REGIONS=6 RATE=6000 ./run.sh
    .venv/bin/python scripts/screenshots.py [--url http://127.0.0.1:8501] [--out docs] [--prefix live-]

Take them with the fleet running, not after it stopped: the README's pictures are what an operator sees during a
game night, with the alerts that mean something then. Debian's chromium drives it (``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PAGES = (("/", "ops"), ("/alerts", "alerts"), ("/watermark", "watermark"), ("/lag", "lag"), ("/events", "events"),
         ("/health", "health"), ("/lab", "lab"), ("/delay", "delay"), ("/control", "control"))
TABS = (("Servers", "ops-servers"), ("Over time", "ops-over-time"), ("Windows", "ops-windows"))
CHROMIUM = "/usr/bin/chromium"
SETTLED = '[data-test-script-state="notRunning"]'


def settle(page) -> None:  # noqa: ANN001 - playwright's Page
    """Wait for the page's script to finish, and the refresh after it (charts drawn from the first read). A page
    whose refresh takes longer than its interval (a busy machine, 300 servers) is never idle: after 90 s it is
    shot as it stands, and said so."""
    from playwright.sync_api import TimeoutError as NotSettled

    try:
        page.wait_for_selector(SETTLED, timeout=90_000)
        page.wait_for_timeout(3_000)  # a screenshot tool, not a test: let the browser draw what the run sent
        page.wait_for_selector(SETTLED, timeout=90_000)
    except NotSettled:
        print(f"{page.url}: still running after 90 s, shot as it stands", file=sys.stderr)


def main() -> int:
    from playwright.sync_api import sync_playwright

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8501")
    p.add_argument("--out", default="docs")
    p.add_argument("--prefix", default="live-")
    args = p.parse_args()
    out = Path(args.out)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(args.url + "/alerts")  # a first visit warms Streamlit's scripts in this browser
        settle(page)
        for path, name in PAGES:
            page.goto(args.url + path)
            settle(page)
            page.screenshot(path=str(out / f"{args.prefix}{name}.png"))
            if name == "ops":
                for tab, tab_name in TABS:
                    page.get_by_role("tab", name=tab).click()
                    settle(page)
                    page.screenshot(path=str(out / f"{args.prefix}{tab_name}.png"))
        page.set_viewport_size({"width": 1920, "height": 1080})
        page.goto(args.url + "/wall")
        page.wait_for_selector(".wall-total-n", timeout=90_000)
        settle(page)
        page.screenshot(path=str(out / f"{args.prefix}wall.png"))
        browser.close()
    print(f"{len(PAGES) + len(TABS) + 1} screenshots in {out}/{args.prefix}*.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
