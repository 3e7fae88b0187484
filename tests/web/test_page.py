"""The demo page in a real headless Chromium: it loads cleanly and offline, steps through a
seeded backoff, and redraws the storm histogram when the jitter changes."""

from __future__ import annotations

import itertools
import json
import pathlib
import random
import urllib.request
from typing import Any

import pytest

import seawall

# The fixtures (a conftest.py here would shadow the `conftest` other tests import).
pytest_plugins = ("web_fixtures",)

pytestmark = pytest.mark.slow

# Seconds for the page to fetch and draw, and for an endpoint to answer: far more than they take
# (a few seconds at most at load 10 on two cores, under coverage); only a failure waits this long.
WAIT = 60.0


def api(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2 * WAIT) as response:
        return json.load(response)


def wait_for(driver: Any, condition: Any, message: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT).until(lambda d: condition(d), message)


def set_field(driver: Any, form: str, name: str, value: str) -> None:
    """Type *value* into a field as a person would (or pick it, for a select)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    field = driver.find_element(By.CSS_SELECTOR, f"#{form} [name={name}]")
    if field.tag_name == "select":
        Select(field).select_by_value(value)
    else:
        field.clear()
        field.send_keys(value)


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def open_page(driver: Any, url: str) -> None:
    driver.get(url)
    wait_for(
        driver,
        lambda d: (
            d.find_element("id", "backoff-position").text.startswith("attempt 1 /")
            and d.find_elements("css selector", "#storm-charts figure")
        ),
        "the page never drew its first views",
    )


def test_page_loads_offline_without_console_errors(
    chromium: Any, page_url: str, artefacts: pathlib.Path
) -> None:
    chromium.get_log("browser")  # drop what earlier pages logged
    open_page(chromium, page_url)
    wait_for(
        chromium,
        lambda d: len(d.find_elements("css selector", "#experiment-name option")) == 4,
        "the experiment list never loaded",
    )
    assert console_errors(chromium) == []
    # Everything the page loaded came from the seawall process itself: no CDN, no font host.
    loaded = chromium.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert loaded, "the page loaded no script or stylesheet"
    assert all(name.startswith(page_url) for name in loaded), loaded
    # Every control has a label a screen reader can announce.
    unlabelled = chromium.execute_script(
        "return [...document.querySelectorAll('input, select')]"
        ".filter(e => !e.labels || e.labels.length === 0).map(e => e.name)"
    )
    assert unlabelled == []
    chromium.save_screenshot(str(artefacts / "page-wide.png"))
    # A narrow screen (a phone): nothing sticks out sideways.
    chromium.set_window_size(390, 844)
    try:
        wait_for(
            chromium,
            lambda d: d.execute_script(
                "return document.documentElement.scrollWidth <= window.innerWidth"
            ),
            "the page scrolls sideways on a narrow screen",
        )
        chromium.save_screenshot(str(artefacts / "page-narrow.png"))
    finally:
        chromium.set_window_size(1200, 900)


def test_stepping_through_the_backoff_shows_the_seeded_waits(
    chromium: Any, page_url: str, artefacts: pathlib.Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    open_page(chromium, page_url)
    params = {"seed": "7", "jitter": "decorrelated", "base": "0.2", "cap": "5", "failures": "4"}
    for name, value in params.items():
        set_field(chromium, "backoff-form", name, value)
    expected = api(page_url + "api/backoff?" + "&".join(f"{k}={v}" for k, v in params.items()))
    steps = expected["steps"]
    assert [s["outcome"] for s in steps] == ["failed"] * 4 + ["succeeded"]

    def position(d: Any) -> str:
        return str(d.find_element(By.ID, "backoff-position").text)

    wait_for(chromium, lambda d: position(d) == f"attempt 1 / {len(steps)}", "no new trace")
    # The first wait must be the new trace's before stepping (the page debounces its fetches).
    wait_for(
        chromium,
        lambda d: (
            d.find_element(By.ID, "step-wait").get_attribute("data-wait") == repr(steps[0]["wait"])
        ),
        "the page shows another trace's first wait",
    )
    shown: list[float | None] = []
    following = chromium.find_element(By.ID, "backoff-next")
    for i in range(len(steps)):
        wait_for(chromium, lambda d, i=i: position(d).startswith(f"attempt {i + 1} /"), "stuck")
        text = chromium.find_element(By.ID, "step-wait").get_attribute("data-wait")
        shown.append(float(text) if text else None)
        if i == 1:
            chromium.save_screenshot(str(artefacts / "backoff-step-2.png"))
        if i < len(steps) - 1:
            if i % 2:  # by keyboard every other step: the arrow keys work on the buttons
                following.send_keys(Keys.ARROW_RIGHT)
            else:
                following.click()
    assert following.get_attribute("disabled") is not None  # the last attempt: no next
    assert chromium.find_element(By.ID, "step-reason").text == "it succeeded"
    # The page shows the endpoint's waits, and they are seawall's own seeded backoff.
    assert shown == [s["wait"] for s in steps]
    backoff = seawall.Backoff(base=0.2, cap=5.0, jitter="decorrelated")
    assert shown[:-1] == list(itertools.islice(backoff.delays(random.Random(7)), 4))
    assert shown[-1] is None
    # Back one step: previous works too.
    chromium.find_element(By.ID, "backoff-prev").click()
    wait_for(chromium, lambda d: position(d).startswith(f"attempt {len(steps) - 1} /"), "no back")


def test_a_permanent_error_stops_the_trace_and_says_why(chromium: Any, page_url: str) -> None:
    from selenium.webdriver.common.by import By

    open_page(chromium, page_url)
    set_field(chromium, "backoff-form", "permanent_at", "2")
    wait_for(
        chromium,
        lambda d: d.find_element(By.ID, "backoff-position").text == "attempt 1 / 2",
        "the trace did not stop at the permanent error",
    )
    chromium.find_element(By.ID, "backoff-next").click()
    wait_for(
        chromium,
        lambda d: "not retried" in d.find_element(By.ID, "step-reason").text,
        "no reason shown for the stop",
    )
    assert "Rejected" in chromium.find_element(By.ID, "step-outcome").text


def histogram(driver: Any, jitter: str) -> list[int]:
    """The bar heights drawn for *jitter*, read in one script (the page may be redrawing)."""
    counts = driver.execute_script(
        "return [...document.querySelectorAll("
        f"'#storm-charts figure[data-jitter={jitter}] rect')].map(r => +r.dataset.count)"
    )
    return [int(c) for c in counts]


def test_changing_the_jitter_changes_the_histogram(
    chromium: Any, page_url: str, artefacts: pathlib.Path
) -> None:
    open_page(chromium, page_url)
    set_field(chromium, "storm-form", "clients", "500")
    full = api(page_url + "api/storm?clients=500&jitter=full")
    equal = api(page_url + "api/storm?clients=500&jitter=equal")
    wait_for(chromium, lambda d: histogram(d, "full") == full["series"][1]["counts"], "no redraw")
    none_before = histogram(chromium, "none")
    assert none_before == full["series"][0]["counts"]
    assert max(none_before) == 500  # without jitter every client retries at the same instant

    set_field(chromium, "storm-form", "jitter", "equal")
    wait_for(chromium, lambda d: histogram(d, "equal"), "the histogram was not redrawn")
    assert histogram(chromium, "full") == []
    shown = histogram(chromium, "equal")
    assert shown == equal["series"][1]["counts"]
    assert shown != full["series"][1]["counts"]
    assert sum(shown) == sum(none_before)  # the same retries, spread differently
    chromium.save_screenshot(str(artefacts / "storm-equal.png"))


def test_an_experiment_and_the_saga_log_render(
    chromium: Any, page_url: str, artefacts: pathlib.Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(chromium, page_url)
    wait_for(
        chromium,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#experiment-name option")) == 4,
        "the experiment list never loaded",
    )
    Select(chromium.find_element(By.ID, "experiment-name")).select_by_value("hedge")
    chromium.find_element(By.ID, "experiment-run").click()
    data = api(page_url + "api/experiments/hedge")
    wait_for(
        chromium,
        lambda d: (
            len(d.find_elements(By.CSS_SELECTOR, "#experiment-output tbody tr"))
            == len(data["table"]["rows"])
        ),
        "the hedging experiment's table never appeared",
    )
    first = chromium.find_element(By.CSS_SELECTOR, "#experiment-output tbody tr td").text
    assert first == data["table"]["rows"][0][0]
    chromium.find_element(By.ID, "saga-run").click()
    wait_for(
        chromium,
        lambda d: "COMPENSATED" in d.find_element(By.ID, "saga-output").text,
        "the saga log never showed the compensated run",
    )
    chromium.find_element(By.ID, "experiments").screenshot(str(artefacts / "experiment-hedge.png"))
    assert console_errors(chromium) == []


def bar_heights(driver: Any, jitter: str) -> list[float]:
    heights = driver.execute_script(
        "return [...document.querySelectorAll("
        f"'#storm-charts figure[data-jitter={jitter}] rect')].map(r => +r.getAttribute('height'))"
    )
    return [float(h) for h in heights]


def test_all_three_jitters_are_drawn_like_with_like(
    chromium: Any, page_url: str, artefacts: pathlib.Path
) -> None:
    open_page(chromium, page_url)
    set_field(chromium, "storm-form", "jitter", "all")
    data = api(page_url + "api/storm?jitter=all")
    series = {s["jitter"]: s for s in data["series"]}
    wait_for(
        chromium,
        lambda d: histogram(d, "decorrelated") == series["decorrelated"]["counts"],
        "the three jitters were never drawn",
    )
    chromium.set_window_size(1280, 900)
    try:
        chromium.execute_script("document.getElementById('storm').scrollIntoView()")
        chromium.save_screenshot(str(artefacts / "storm-all.png"))
        # The same bins and the same scale for every kind: the spike without jitter is the
        # tallest bar on the page, and each jittered view's tallest is far below it.
        spike = max(bar_heights(chromium, "none"))
        for kind in ("full", "equal", "decorrelated"):
            assert max(bar_heights(chromium, kind)) < spike / 1.5, kind
        # Decorrelated jitter's tail beyond the bins is counted beside them, not drawn.
        note = chromium.execute_script(
            "const t = document.querySelector("
            "'#storm-charts figure[data-jitter=decorrelated] text.overflow');"
            "return t && [t.dataset.count, t.textContent];"
        )
        assert note is not None
        assert int(note[0]) == series["decorrelated"]["overflow"] > 0
        assert "later" in note[1]
    finally:
        chromium.set_window_size(1200, 900)


def test_the_saga_log_fits_a_1280_pixel_window(
    chromium: Any, page_url: str, artefacts: pathlib.Path
) -> None:
    from selenium.webdriver.common.by import By

    chromium.set_window_size(1280, 900)
    try:
        open_page(chromium, page_url)
        chromium.find_element(By.ID, "saga-run").click()
        wait_for(
            chromium,
            lambda d: d.find_elements(By.CSS_SELECTOR, "#saga-output table.history tbody tr"),
            "the saga's history never appeared",
        )
        widths = chromium.execute_script(
            "return [...document.querySelectorAll('#saga-output pre, #saga-output .table-wrap')]"
            ".map(e => [e.scrollWidth, e.clientWidth])"
        )
        assert len(widths) == 3
        # Nothing of the log is cut off: no block is wider than the space it is shown in.
        assert all(scroll <= client for scroll, client in widths), widths
        history = api(page_url + "api/saga")["history"]
        shown = chromium.execute_script(
            "return [...document.querySelectorAll('#saga-output table.history tbody tr')]"
            ".map(tr => [...tr.cells].map(td => td.textContent))"
        )
        assert shown == history["rows"]
        chromium.execute_script(
            "document.querySelector('#saga-output table.history').scrollIntoView()"
        )
        chromium.save_screenshot(str(artefacts / "saga-1280.png"))
    finally:
        chromium.set_window_size(1200, 900)
