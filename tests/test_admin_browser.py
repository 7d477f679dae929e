"""The Held locks admin page in a real browser: headless Chromium driven by Selenium.

Uses the system Chromium and chromedriver (Debian packages ``chromium`` and
``chromium-driver``; ``.ci/run`` installs them) and skips when they are missing.
A separate process holds the locks, as a worker would; the test logs in, opens
Held locks, sees them, force-releases one through the confirmation page and sees
it gone. With ``REDISLOCK_UPDATE_SCREENSHOTS=1`` it also rewrites the screenshot the README shows
(docs/img/admin-held-locks.png); otherwise screenshots go to the temp directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_redislock import lock_info
from tests.support.browser import MISSING, available, headless_chromium, log_in

ROOT = Path(__file__).resolve().parent.parent
# The README's screenshot is rewritten only on request, so a test run leaves the tree clean.
SCREENSHOT = (
    ROOT / "docs" / "img" / "admin-held-locks.png"
    if os.environ.get("REDISLOCK_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "admin-held-locks.png"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not available(), reason=MISSING),
]

# Run in a separate process: holds a few locks until its stdin closes.
HOLDER = textwrap.dedent(
    """
    import os, sys, threading
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.settings")
    import django
    django.setup()
    from django_redislock import Lock

    def take(name, **kwargs):
        lock = Lock(name, ttl=kwargs.pop("ttl", 300), **kwargs)
        assert lock.acquire(blocking=False), name
        return lock

    locks = [
        take("report:nightly-sales", purpose="manage.py nightly_sales", watchdog=True, ttl=60),
        take("invoice:2024-00042", purpose="billing.views.pay_invoice", ttl=30),
        take("sync:crm-contacts", purpose="crm.tasks.sync_contacts", ttl=900),
    ]
    def worker():
        locks.append(take("import:catalogue", purpose="catalogue.importer.run", ttl=120))
    t = threading.Thread(target=worker, name="ImportWorker-2")
    t.start(); t.join()
    print("ready", os.getpid(), flush=True)
    sys.stdin.read()
    """
)


# Holds two holders of a semaphore, or of a kind defined only in the tests (argv[1]), until
# its stdin closes.
PAIR_HOLDER = textwrap.dedent(
    """
    import os, sys
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.settings")
    import django
    django.setup()
    from django_redislock import registry
    from tests.support import pair_kind

    registry.register(pair_kind.KIND)
    if sys.argv[1] == "pair":
        locks = [pair_kind.PairLock("exports:pdf", ttl=300, purpose=f"export {i}") for i in (1, 2)]
    elif sys.argv[1] == "read":
        from django_redislock import ReadWriteLock
        rw = ReadWriteLock("exports:pdf", ttl=300)
        locks = [rw.read_lock(purpose=f"export {i}") for i in (1, 2)]
    else:
        from django_redislock import Semaphore
        locks = [Semaphore("exports:pdf", 3, ttl=300, purpose=f"export {i}") for i in (1, 2)]
    for lock in locks:
        assert lock.acquire(blocking=False)
    print("ready", os.getpid(), *(lock.token[:6] for lock in locks), flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture
def holder_process() -> Iterator[subprocess.Popen[str]]:
    yield from _holding(HOLDER)


def _holding(code: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """A process running ``code``, which prints "ready ..." once it holds its locks."""
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.support.settings"},
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert line.startswith("ready"), f"the holder process did not start: {line!r}"
        process.ready_line = line.split()  # type: ignore[attr-defined]
        yield process
    finally:
        if process.stdin:
            process.stdin.close()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()


@pytest.fixture
def browser() -> Iterator[object]:
    with headless_chromium("1280,800") as driver:
        yield driver


def _log_in(browser: Any, live_server: Any, django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("admin", "admin@example.com", "secret-pw")
    log_in(browser, live_server.url, "admin", "secret-pw")


def test_release_a_lock_held_by_another_process(
    live_server, django_user_model, holder_process, browser
):
    from selenium.webdriver.common.by import By

    holder_pid = holder_process.pid
    _log_in(browser, live_server, django_user_model)

    browser.find_element(By.LINK_TEXT, "Held locks").click()
    assert browser.find_element(By.CSS_SELECTOR, "#content h1").text == "Held locks"
    table = browser.find_element(By.ID, "result_list").text
    for name in ["report:nightly-sales", "invoice:2024-00042", "sync:crm-contacts"]:
        assert name in table
    assert f"pid {holder_pid}" in table and "ImportWorker-2" in table
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOT))

    # A phone-width window: the table scrolls inside its box, the page does not.
    browser.set_window_size(390, 844)
    browser.refresh()
    page_width = browser.execute_script("return document.documentElement.scrollWidth")
    assert page_width <= 400, f"the page is {page_width}px wide on a phone"
    browser.save_screenshot(str(Path(tempfile.gettempdir()) / "admin-held-locks-phone.png"))
    browser.set_window_size(1280, 800)
    # Dark mode (the admin's theme toggle stores its choice in localStorage).
    browser.execute_script("localStorage.setItem('theme', 'dark')")
    browser.refresh()
    assert browser.execute_script("return document.documentElement.dataset.theme") == "dark"
    browser.save_screenshot(str(Path(tempfile.gettempdir()) / "admin-held-locks-dark.png"))
    browser.execute_script("localStorage.setItem('theme', 'auto')")

    browser.find_element(By.LINK_TEXT, "sync:crm-contacts").click()
    assert "crm.tasks.sync_contacts" in browser.find_element(By.ID, "content-main").text
    browser.find_element(By.LINK_TEXT, "Force-release").click()
    assert "Are you sure" in browser.find_element(By.ID, "content").text
    browser.find_element(By.CSS_SELECTOR, "input[type=submit][value^='Yes']").click()

    messages = browser.find_element(By.CSS_SELECTOR, "ul.messagelist").text
    assert "“sync:crm-contacts” was force-released" in messages
    table = browser.find_element(By.ID, "result_list").text
    assert "sync:crm-contacts" not in table and "report:nightly-sales" in table
    assert lock_info("sync:crm-contacts") is None
    assert lock_info("report:nightly-sales") is not None


@pytest.mark.parametrize(
    ("kind", "holders", "one_left"),
    [("pair", "2 of 2", "1 of 2"), ("semaphore", "2 of 3", "1 of 3"), ("read", "2", "1")],
)
def test_each_holder_of_a_kind_shown_and_one_released(
    live_server, django_user_model, browser, monkeypatch, kind, holders, one_left
):
    """A semaphore's permits, a read-write lock's readers, and a kind defined only in the
    tests (docs/architecture.md's walkthrough): the admin shows each holder and releases
    one, leaving the other, with no change to it."""
    from selenium.webdriver.common.by import By

    from django_redislock import registry
    from tests.support import pair_kind

    monkeypatch.setattr(registry, "_kinds", dict(registry._kinds))
    registry.register(pair_kind.KIND)
    holding = _holding(PAIR_HOLDER, kind)
    process = next(holding)
    try:
        _, pid, _, second = process.ready_line
        _log_in(browser, live_server, django_user_model)
        browser.find_element(By.LINK_TEXT, "Held locks").click()
        row = browser.find_element(By.ID, "result_list").text
        assert "exports:pdf" in row and kind in row and holders in row and f"pid {pid}" in row
        browser.find_element(By.LINK_TEXT, "exports:pdf").click()
        page = browser.find_element(By.ID, "content-main").text
        assert "Holder 1 of 2" in page and "Holder 2 of 2" in page
        assert "export 1" in page and "export 2" in page
        browser.find_elements(By.LINK_TEXT, "Force-release this holder")[0].click()
        confirm = browser.find_element(By.ID, "content").text
        assert "Are you sure" in confirm and "export 1" in confirm and "export 2" not in confirm
        browser.find_element(By.CSS_SELECTOR, "input[type=submit][value^='Yes']").click()
        messages = browser.find_element(By.CSS_SELECTOR, "ul.messagelist").text
        assert "“exports:pdf” was force-released" in messages
        info = lock_info("exports:pdf")
        assert info is not None and [h.token[:6] for h in info.holders] == [second]
        assert one_left in browser.find_element(By.ID, "result_list").text
        if kind in ("semaphore", "read"):
            browser.save_screenshot(str(Path(tempfile.gettempdir()) / f"admin-{kind}.png"))
    finally:
        holding.close()
