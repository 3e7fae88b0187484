"""The store view in a real headless Chromium, served by ``seawall web --store``: it shows the
store (hostile text as text, no script run), acts on a run after asking, and follows the store
while it is open."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from seawall.saga._operations import operate
from seawall.saga._stores import open_store

pytest_plugins = ("web_fixtures", "store_fixtures")

pytestmark = pytest.mark.slow

# Seconds for a page to load or change: far more than it takes; only a failure waits this long.
WAIT = 60.0


def wait_for(driver: Any, condition: Any, message: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT).until(lambda d: condition(d), message)


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def no_alert(driver: Any) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert  # noqa: B018 - the property raises when there is none
    except NoAlertPresentException:
        return True
    return False


def status_of(url: str, run_id: str) -> str:
    store = open_store(url, create=False)
    try:
        loaded = store.load(run_id)
        assert loaded is not None
        return loaded.run.status
    finally:
        store.close()


@pytest.fixture
def acting_page(store_file: str, seawall_web_process: Any) -> Iterator[str]:
    with seawall_web_process("--store", store_file, "--allow-actions") as url:
        yield url


def test_the_overview_shows_the_store_and_runs_no_script_from_it(
    chromium: Any, acting_page: str, hostile: str, artefacts: pathlib.Path
) -> None:
    from selenium.webdriver.common.by import By

    chromium.get_log("browser")
    chromium.get(acting_page)
    wait_for(chromium, lambda d: d.find_elements(By.ID, "counts"), "no counts")
    counts = chromium.find_element(By.CSS_SELECTOR, "#counts table")
    headers = [th.text for th in counts.find_elements(By.TAG_NAME, "th")]
    assert headers == ["saga", "NEEDS_ATTENTION", "RETRYING", "RUNNING", "SUCCEEDED", "overdue"]
    stuck = chromium.find_element(By.ID, "stuck")
    links = {a.text for a in stuck.find_elements(By.CSS_SELECTOR, "tbody a")}
    assert links == {"parked", "hostile", "waiting", "held"}
    # The hostile error is shown as the text it is, and nothing of it ran.
    cells = [td.text for td in stuck.find_elements(By.TAG_NAME, "td")]
    assert f"Permanent: {hostile}" in cells
    assert no_alert(chromium)
    assert chromium.execute_script("return document.querySelectorAll('main img').length") == 0
    assert console_errors(chromium) == []
    chromium.save_screenshot(str(artefacts / "store-overview.png"))


def test_an_action_asks_first_and_then_applies(
    chromium: Any, acting_page: str, store_file: str, artefacts: pathlib.Path
) -> None:
    from selenium.webdriver.common.by import By

    chromium.get(acting_page)
    link = wait_for(
        chromium,
        lambda d: d.find_element(By.CSS_SELECTOR, "#stuck a[href='/run?id=parked']"),
        "no link to the parked run",
    )
    link.click()
    wait_for(
        chromium,
        lambda d: d.find_element(By.ID, "run-status").text == "NEEDS_ATTENTION",
        "the run's page never showed",
    )
    body = chromium.find_element(By.TAG_NAME, "main").text
    assert "card declined" in body and "give_up" in body
    # Asked, and told no: nothing happens.
    chromium.find_element(By.ID, "action-cancel").click()
    alert = wait_for(chromium, lambda d: d.switch_to.alert, "no question before cancelling")
    assert "without compensating" in alert.text
    alert.dismiss()
    assert status_of(store_file, "parked") == "NEEDS_ATTENTION"
    # Asked, and told yes: the retry is applied, and the page says so.
    chromium.find_element(By.ID, "action-retry").click()
    alert = wait_for(chromium, lambda d: d.switch_to.alert, "no question before retrying")
    alert.accept()
    wait_for(
        chromium,
        lambda d: (
            d.find_elements(By.ID, "notice")
            and d.find_element(By.ID, "run-status").text == "RETRYING"
        ),
        "the retry was not shown as applied",
    )
    assert status_of(store_file, "parked") == "RETRYING"
    chromium.save_screenshot(str(artefacts / "store-run.png"))


def test_the_overview_follows_the_store(chromium: Any, acting_page: str, store_file: str) -> None:
    from selenium.webdriver.common.by import By

    chromium.get(acting_page)
    wait_for(chromium, lambda d: d.find_elements(By.ID, "latest"), "no latest runs")

    def waiting_status(d: Any) -> str:
        from selenium.common.exceptions import WebDriverException

        try:
            for row in d.find_elements(By.CSS_SELECTOR, "#latest tbody tr"):
                cells = row.find_elements(By.TAG_NAME, "td")
                if cells and cells[0].text == "waiting":
                    return str(cells[2].text)
        except WebDriverException:
            # The page reloaded meanwhile: a stale element, or (Chromium) "Node with given id
            # does not belong to the document", which is not a StaleElementReferenceException.
            pass
        return ""

    assert waiting_status(chromium) == "RETRYING"
    store = open_store(store_file, create=False)
    try:
        operate(store, "waiting", "cancel")  # another operator, or a worker
    finally:
        store.close()
    # No reload from here: the page reloads itself while it is shown.
    wait_for(chromium, lambda d: waiting_status(d) == "FAILED", "the page never followed")


def test_read_only_offers_no_action(
    chromium: Any, store_file: str, seawall_web_process: Any
) -> None:
    from selenium.webdriver.common.by import By

    with seawall_web_process("--store", store_file) as url:
        chromium.get(url + "run?id=parked")
        wait_for(
            chromium,
            lambda d: d.find_element(By.ID, "run-status").text == "NEEDS_ATTENTION",
            "the run's page never showed",
        )
        assert chromium.find_elements(By.CSS_SELECTOR, "form.action") == []
        assert "read-only" in chromium.find_element(By.TAG_NAME, "header").text
