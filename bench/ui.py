"""How long the operator page (/ui) takes to show ``--hosts`` hosts in headless Chromium.

Fills a SQLite database with the hosts (each the fake driver's five cards), serves the
API from it (one process) and times, in Debian's chromium driven by Selenium, from
asking for /ui to the page having drawn every host (its first load: the HTML, the
script, and the API reads it makes), then one redraw.

    .venv/bin/python bench/ui.py [--hosts 100] [--loads 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from acceleron.api.app import create_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.fixtures
from tests.fixtures.server import serve

from load import fake_hosts

HOSTS = "return document.querySelectorAll('#tree .host').length;"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()
    conf, db = fake_hosts(args.hosts, "bench-ui-")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    service = Service(executable_path=shutil.which("chromedriver") or "chromedriver")
    browser = webdriver.Chrome(options=options, service=service)
    loads = []
    try:
        with serve(create_app(conf, db)) as url:
            for _ in range(args.loads):
                started = time.perf_counter()
                browser.get(f"{url}/ui")
                while browser.execute_script(HOSTS) < args.hosts:
                    time.sleep(0.01)
                loads.append(time.perf_counter() - started)
    finally:
        browser.quit()
    print(
        f"hosts {args.hosts}: first draw median {statistics.median(loads):.2f} s, "
        f"min {min(loads):.2f} s, max {max(loads):.2f} s over {len(loads)} loads"
    )


if __name__ == "__main__":
    main()
