"""The operator page (/ui): served by the API with nothing from elsewhere, and driven in a
real headless Chromium (Debian's chromium and chromium-driver, through Selenium): the
tree renders, a claim made from the CLI appears, programming progress moves, and in
Keystone mode it asks for a token.

Set ACCELERON_UI_SCREENSHOTS to a directory to keep screenshots of the main views (the
ones in docs/ui/ were made so)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from keystonemiddleware.fixture import AuthTokenFixture

from acceleron.cli.main import main
from acceleron.db.session import Database
from tests.fixtures.allinone import AllInOne, all_in_one
from tests.fixtures.host import Host, bind, call, profile, upload
from tests.fixtures.keystone import keystone_client, token
from tests.fixtures.waiting import wait_for

REGION0_TYPE = "ce48969398f05f33946d560708be108a"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(
    not (CHROMIUM and DRIVER), reason="Debian's chromium and chromium-driver are not installed"
)


def test_the_page_is_served_with_nothing_from_elsewhere(live_api: str) -> None:
    page = requests.get(f"{live_api}/ui", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sorted(sources) == ["/ui/ui.css", "/ui/ui.js"]
    for source in sources:
        answer = requests.get(f"{live_api}{source}", timeout=30)
        assert answer.status_code == 200
        assert "http://" not in answer.text and "https://" not in answer.text
    assert requests.get(f"{live_api}/ui/../app.py", timeout=30).status_code == 404
    assert requests.get(f"{live_api}/ui/other.js", timeout=30).status_code == 404


@pytest.fixture
def browser() -> Iterator[Any]:
    if not (CHROMIUM and DRIVER):
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,1400",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(browser: Any, name: str) -> None:
    directory = os.environ.get("ACCELERON_UI_SCREENSHOTS")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(directory) / f"{name}.png"))


def text(browser: Any, css: str) -> str:
    """The text the element shows ('' when there is none), read in one script: the page
    redraws every two seconds, so an element found earlier may be gone by now."""
    script = "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';"
    return str(browser.execute_script(script, css))


def attribute(browser: Any, css: str, name: str) -> str | None:
    script = (
        "const e = document.querySelector(arguments[0]);"
        "return e && e.hasAttribute(arguments[1]) ? e.getAttribute(arguments[1]) : null;"
    )
    found = browser.execute_script(script, css, name)
    return None if found is None else str(found)


@pytest.mark.slow  # a browser: make test's, not make check's
@needs_chromium
def test_the_tree_renders_and_programming_progress_moves(
    live_api: str, tmp_path: Path, browser: Any
) -> None:
    host = Host(live_api, tmp_path)
    host.report()
    browser.get(f"{live_api}/ui")
    wait_for(lambda: attribute(browser, "body", "data-loaded") == "yes")
    wait_for(lambda: text(browser, f'.host[data-host="{host.name}"]') != "")
    tree = text(browser, f'.host[data-host="{host.name}"]')
    assert "FPGA PAC_ARRIA10" in tree and "healthy enabled" in tree
    usage = text(browser, f'.host[data-host="{host.name}"] [data-usage="QAT vf_pool"]')
    assert usage.split()[-1] == "0/4"  # the pool's usage bar: none of its 4 VFs used
    assert text(browser, f'#sync tr[data-host="{host.name}"]').startswith(host.name)

    function = uuid.uuid4().hex
    upload(host.url, REGION0_TYPE, function, REGION0_TYPE)
    group = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "trait:CUSTOM_PROGRAMMABLE": "required",
        "accel:function_id": function,
    }
    arq = bind(host, profile(host.url, [group]), host.region()["rp_uuid"])
    row = f'#arqs tr[data-uuid="{arq}"]'
    wait_for(lambda: text(browser, f"{row} .state") == "BindStarted")
    # The agent's task, its progress reported as an agent does: the page follows it.
    (task,) = host.agent.client.claim_tasks(host.name, 0)
    for percent in (30, 70):
        host.agent.client.update_task(
            task["uuid"], state="running", phase="fetch", progress=percent
        )
        wait_for(functools.partial(_shows, browser, f"{row} progress", "value", str(percent)))
        assert text(browser, f"{row} .phase") == "fetch"
    screenshot(browser, "programming")
    result = {"bitstream_id": None, "function_uuid": function}
    host.agent.client.update_task(
        task["uuid"], state="done", phase="report", progress=100, result=result
    )
    wait_for(lambda: text(browser, f"{row} .state") == "Bound")

    # Given back: the region shows it is being cleaned, until the agent has cleaned it.
    call(host.url, "DELETE", f"/v2/accelerator_requests/{arq}")
    region = f'.deployable[data-uuid="{host.region()["uuid"]}"]'
    wait_for(lambda: text(browser, f"{region} .cleaning") == "cleaning 2")
    screenshot(browser, "cleaning")
    host.run_tasks(lambda: host.region()["cleaning"] == 0)
    wait_for(lambda: text(browser, f"{region} .cleaning") == "")


@pytest.fixture(scope="module")
def aio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AllInOne]:
    if not (CHROMIUM and DRIVER):
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    with all_in_one(tmp_path_factory.mktemp("ui-aio")) as server:
        yield server


@needs_chromium
@pytest.mark.slow
def test_a_claim_made_from_the_cli_appears(
    aio: AllInOne, browser: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"dp-{uuid.uuid4().hex[:8]}"
    made = requests.post(
        f"{aio.url}/v2/device_profiles",
        timeout=30,
        json=[{"name": name, "groups": [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}]}],
    )
    assert made.status_code < 300, made.text
    browser.get(f"{aio.url}/ui")
    wait_for(lambda: attribute(browser, "body", "data-loaded") == "yes")
    assert text(browser, f'.host[data-host="{aio.host}"]') != ""
    consumer = str(uuid.uuid4())
    assert main(["--os-url", aio.url, "claim", "--profile", name, "--consumer", consumer]) == 0
    capsys.readouterr()
    wait_for(lambda: aio_row(browser, consumer) == "Bound", seconds=30)
    # A bind may change what the host reports (its generation moves, the sync follows):
    # the page shows the host waiting until the sync's pass, then in sync again.
    wait_for(lambda: "in sync" in text(browser, f'#sync tr[data-host="{aio.host}"]'))
    # The chart counts binds from the page's own refresh of the counters, not from the
    # fetch that showed the request bound: it may come a refresh later.
    wait_for(lambda: int(attribute(browser, "#binds", "data-total") or 0) >= 1, seconds=30)
    screenshot(browser, "overview")
    assert main(["--os-url", aio.url, "release", "--consumer", consumer]) == 0


def aio_row(browser: Any, consumer: str) -> str:
    """The state the page shows for the consumer's request ('' while not shown)."""
    script = (
        "for (const row of document.querySelectorAll('#arqs tbody tr')) {"
        "  const cells = row.querySelectorAll('td');"
        "  if (cells.length && cells[4].innerText === arguments[0]) return cells[1].innerText;"
        "} return '';"
    )
    return str(browser.execute_script(script, consumer[:8]))


@needs_chromium
def test_keystone_mode_asks_for_a_token(
    tmp_path: Path, sqlite_db: Database, tokens: AuthTokenFixture, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    from tests.fixtures.server import serve

    with serve(keystone_client(tmp_path, sqlite_db).app) as url:  # type: ignore[arg-type]
        browser.get(f"{url}/ui")
        wait_for(lambda: attribute(browser, "#login", "hidden") is None)
        assert attribute(browser, "#main", "hidden") is not None
        screenshot(browser, "token")
        field = browser.find_element(By.ID, "token")
        field.send_keys(token(tokens, "admin", "manager", "member", "reader")["X-Auth-Token"])
        browser.find_element(By.CSS_SELECTOR, "#login button").click()
        wait_for(lambda: attribute(browser, "body", "data-loaded") == "yes")
        assert attribute(browser, "#login", "hidden") is not None


def _shows(browser: Any, selector: str, attribute_name: str, value: str) -> bool:
    return bool(attribute(browser, selector, attribute_name) == value)
