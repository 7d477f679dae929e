"""The Grafana dashboard's picture in docs/observability.md: made here, in a real browser,
from the dashboard JSON and a scrape of a workload run with the metrics on.

With ``REDISLOCK_UPDATE_SCREENSHOTS=1`` it rewrites docs/img/grafana-dashboard.png;
otherwise the picture goes to the temp directory and the tree stays clean.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest

from django_redislock import Lock, LockNotOwned, Semaphore, force_release
from tests.support.browser import MISSING, available, headless_chromium
from tests.support.dashboard_picture import evaluate, render
from tests.support.polling import wait_until
from tests.test_prometheus import DASHBOARD, _samples, metrics  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parent.parent
PICTURE = (
    ROOT / "docs" / "img" / "grafana-dashboard.png"
    if os.environ.get("REDISLOCK_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "grafana-dashboard.png"
)


def workload() -> None:
    """Invoices contended by four threads, reports timing out, a sync lost, a semaphore."""

    def invoices(worker: int) -> None:
        for round_no in range(15):
            with Lock(f"invoice:{round_no % 3}", ttl=5, timeout=10):
                threading.Event().wait(0.002 * (1 + worker % 2))

    threads = [threading.Thread(target=invoices, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    report = Lock("report:nightly", ttl=5)
    assert report.acquire()
    for _ in range(3):
        assert not Lock("report:nightly", ttl=5, timeout=0.05).acquire()
    report.release()
    with Semaphore("export:csv", 2, ttl=5):
        pass
    sync = Lock("sync:crm", ttl=1, watchdog=True)
    assert sync.acquire()
    force_release("sync:crm")
    assert wait_until(lambda: sync.lost)
    with pytest.raises(LockNotOwned):
        sync.release()


@pytest.mark.usefixtures("metrics")
def test_the_evaluator_matches_the_scrape() -> None:
    workload()
    samples = _samples(generate_latest(REGISTRY).decode())
    by_result = evaluate(
        'sum by (result) (rate(redislock_acquisitions_total{kind=~"$kind"}[$__rate_interval]))',
        samples,
    )
    assert by_result[("timeout",)] >= 3
    contended = evaluate(
        "sum by (family) (rate(redislock_contentions_total[$__rate_interval]))", samples
    )
    assert contended[("invoice",)] >= 1
    p99 = evaluate(
        "histogram_quantile(0.99, sum by (family, le) (rate(redislock_wait_seconds_bucket"
        '{result="timeout"}[$__rate_interval])))',
        samples,
    )
    assert 0.05 <= p99[("report",)] <= 0.25  # every timed-out wait was about 50 ms


@pytest.mark.slow
@pytest.mark.skipif(not available(), reason=MISSING)
@pytest.mark.usefixtures("metrics")
def test_the_dashboard_picture(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    workload()
    page = tmp_path / "dashboard.html"
    page.write_text(render(DASHBOARD, _samples(generate_latest(REGISTRY).decode())))
    with headless_chromium("1400,900") as browser:
        browser.get(page.as_uri())
        titles = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "section h2")]
        assert "Acquisitions by result" in titles and "Held and waiting now" in titles
        text: Any = browser.find_element(By.TAG_NAME, "main").text
        assert "invoice" in text and "timeout" in text
        PICTURE.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(PICTURE))
    assert PICTURE.stat().st_size > 10_000
