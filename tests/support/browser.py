"""Headless Chromium for the browser tests: the system binary and chromedriver."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
MISSING = (
    f"needs the system Chromium ({CHROMIUM}) and chromedriver ({CHROMEDRIVER}): "
    "apt-get install chromium chromium-driver"
)


def available() -> bool:
    return os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)


@contextmanager
def headless_chromium(window: str = "1280,800") -> Iterator[Any]:
    """A Selenium driver on a fresh profile, quit and cleaned up afterwards (skips if absent)."""
    if not available():
        pytest.skip(MISSING)
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="redislock-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        f"--window-size={window}",
        "--force-device-scale-factor=1",
    ]:
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def log_in(driver: Any, url: str, username: str, password: str) -> None:
    """Log in to the admin at ``url``; returns once the admin index is in (a page asked
    for sooner may be overtaken by the login's redirect)."""
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/admin/login/?next=/admin/")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    driver.find_element(By.ID, "user-tools")
