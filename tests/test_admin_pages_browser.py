"""The admin's second edition in a real browser (headless Chromium): the Waiting page, a
lock's page with the timeline of a scripted history (the SVG's bars counted), Hot locks,
dark mode, and a staff user without the permission refused. With
``REDISLOCK_UPDATE_SCREENSHOTS=1`` the screenshots docs/observability.md shows are
rewritten (docs/img/admin-*.png); otherwise they go to the temp directory."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_redislock import Lock, history, lock_info
from django_redislock.connection import lock_client
from tests.support.browser import MISSING, available, headless_chromium, log_in
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parent.parent
IMG = (
    ROOT / "docs" / "img"
    if os.environ.get("REDISLOCK_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir())
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason=MISSING)]

A, B = "web-1:4242/MainThread", "worker-2:77/celery-3"


def _entry(minutes_ago: float, type_: str, holder: str, token: str, **fields: Any) -> str:
    """One packed stream entry (history.FIELDS) of lock ``report:sales``."""
    values = {
        "at": repr(time.time() - minutes_ago * 60),
        "e": type_,
        "n": "report:sales",
        "k": "lock",
        "f": "report",
        "h": holder,
        "o": holder,
        "t": token,
    }
    values.update({key: str(value) for key, value in fields.items()})
    return history.FIELD_SEPARATOR.join(values.get(name, "") for name in history.FIELDS)


#: Three holds (A's, B's after a 90 s wait, then lost; A's, force-released), a timeout of
#: B behind A, and the hold of now (this test's own lock, whose events are not recorded).
SCRIPT = [
    _entry(50, "acquired", A, "tokA1", fe=1, w=0.0),
    _entry(40, "released", A, "tokA1", fe=1, hd=600.0),
    _entry(35, "acquired", B, "tokB1", fe=2, w=90.0),
    _entry(30, "lost", B, "tokB1", fe=2, hd=300.0, r="expired"),
    _entry(25, "acquired", A, "tokA2", fe=3, w=0.0),
    _entry(12, "timed_out", A, "tokA2", w=60.0, o=B),
    _entry(10, "force_released", A, "tokA2", fe=3, r="by ops", o=""),
]


@pytest.fixture
def browser() -> Iterator[Any]:
    with headless_chromium("1280,900") as driver:
        yield driver


@pytest.fixture
def scene(settings: Any, real_backend: Any) -> Iterator[Lock]:
    """``report:sales`` held by this process with one waiter, and its scripted hour."""
    # On (the pages read the history) before any connection is made: a settings change
    # drops the lock clients, and the waiter's connection with them. Not recording
    # (history.enable() is not called): this lock's own events stay out of the script.
    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY": True}
    holder = Lock("report:sales", ttl=60, purpose="manage.py sales_report")
    assert holder.acquire()
    waiter = Lock("report:sales", ttl=60, purpose="reports.views.regenerate")
    thread = threading.Thread(
        target=lambda: waiter.acquire(timeout=60) and waiter.release(), name="regenerate-1"
    )
    thread.start()
    assert wait_until(lambda: (lock_info("report:sales") or holder).waiting == 1, 10)  # type: ignore[union-attr]
    client = lock_client("default")
    for entry in SCRIPT:
        client.xadd(history.stream_key(), {"d": entry})
    try:
        yield holder
    finally:
        holder.release()
        thread.join(30)
        history.disable()


def test_waiting_the_timeline_and_hot_locks_in_a_browser(
    live_server: Any, django_user_model: Any, browser: Any, scene: Lock
) -> None:
    from selenium.webdriver.common.by import By

    django_user_model.objects.create_superuser("admin", "admin@example.com", "secret-pw")
    log_in(browser, live_server.url, "admin", "secret-pw")
    browser.find_element(By.LINK_TEXT, "Held locks").click()
    browser.find_element(By.CSS_SELECTOR, "a.heldlock-waiting-link").click()
    assert browser.find_element(By.CSS_SELECTOR, "#content h1").text == "Waiting for locks"
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == 1
    row = rows[0].text
    assert "report:sales" in row and "reports.views.regenerate" in row
    assert "regenerate-1" in row and "manage.py sales_report" in row  # what blocks it
    browser.save_screenshot(str(IMG / "admin-waiting.png"))

    # The lock's page: its holder, its waiter, the timeline of the scripted hour.
    browser.find_element(By.LINK_TEXT, "report:sales").click()
    main = browser.find_element(By.ID, "content-main").text
    assert "manage.py sales_report" in main and "Waiting (1), longest first" in main
    svg = browser.find_element(By.CSS_SELECTOR, "svg.heldlock-timeline")
    assert svg.get_attribute("aria-label") == "Timeline: 3 holds by 2 holders"
    holds = svg.find_elements(By.CSS_SELECTOR, "rect.hold")
    waits = svg.find_elements(By.CSS_SELECTOR, "rect.wait")
    timeouts = svg.find_elements(By.CSS_SELECTOR, "rect.timeout")
    assert (len(holds), len(waits), len(timeouts)) == (3, 1, 1)
    marks = [m.get_attribute("class") for m in svg.find_elements(By.CSS_SELECTOR, "path.mark")]
    assert sorted(marks) == ["mark force_released", "mark lost"]
    # The fence shows on hover: each bar's <title>.
    titles = [h.find_element(By.TAG_NAME, "title").get_attribute("textContent") for h in holds]
    assert all("fence" in title for title in titles), titles
    widths = [float(h.get_attribute("width")) for h in holds]
    assert all(width > 1 for width in widths)  # minutes long: each its own bar
    recent = browser.find_element(By.ID, "heldlock-recent").text
    assert "force_released" in recent and "lost" in recent
    browser.save_screenshot(str(IMG / "admin-lock-timeline.png"))

    # Dark mode (the admin's theme toggle keeps its choice in localStorage).
    browser.execute_script("localStorage.setItem('theme', 'dark')")
    browser.refresh()
    assert browser.execute_script("return document.documentElement.dataset.theme") == "dark"
    fill = browser.execute_script(
        "return getComputedStyle(document.querySelector('svg.heldlock-timeline rect.hold')).fill"
    )
    background = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert fill and background and fill != background
    browser.save_screenshot(str(IMG / "admin-lock-timeline-dark.png"))
    browser.execute_script("localStorage.setItem('theme', 'auto')")

    # Hot locks: the family, its acquisitions, timeouts and losses over the hour.
    browser.find_element(By.LINK_TEXT, "Held locks").click()
    browser.find_element(By.CSS_SELECTOR, "a.heldlock-hot-link").click()
    assert browser.find_element(By.CSS_SELECTOR, "#content h1").text.startswith("Hot locks")
    hot = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(hot) == 1
    family = hot[0].find_element(By.CSS_SELECTOR, ".field-family").text
    cells = [c.text for c in hot[0].find_elements(By.TAG_NAME, "td")]
    assert family == "report" and cells[:2] == ["lock", "3"], cells  # kind, acquisitions
    browser.save_screenshot(str(IMG / "admin-hot-locks.png"))


def test_a_staff_user_without_the_permission_gets_403(
    live_server: Any, django_user_model: Any, browser: Any, scene: Lock
) -> None:
    from selenium.webdriver.common.by import By

    django_user_model.objects.create_user("staff", password="secret-pw", is_staff=True)
    log_in(browser, live_server.url, "staff", "secret-pw")
    for path in ("waiting/", "hot/", "report:sales/change/"):
        browser.get(f"{live_server.url}/admin/django_redislock/heldlock/{path}")
        text = browser.find_element(By.TAG_NAME, "body").text
        assert "403" in text and "report:sales" not in text, (path, text[:300])
