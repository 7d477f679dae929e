"""The demo site, run for real: ``demo_site/run.py`` in a child process, pages over HTTP.

The module's fixture starts the demo exactly as ``make demo`` does (migrations, the admin
user, background workers holding locks, ``runserver``) on a free port, pointed with
``REDIS_URL`` at a private server this test started (not the suite's default server,
which is flushed before every test). Pages are fetched over HTTP with a cookie jar (CSRF
and all); commands run as ``python demo_site/manage.py ...`` child processes. One test
walks the site in headless Chromium: home, the locked view's 423 page, and a
force-release in the admin.
"""

from __future__ import annotations

import html as html_module
import http.cookiejar
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from django_redislock.testing import RedisServer
from django_redislock.testing.servers import _free_port
from tests.support.browser import headless_chromium

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "demo_site" / "run.py"
MANAGE = ROOT / "demo_site" / "manage.py"
PASSWORD = "demo-test-password"
#: Screenshots go to a temporary directory, or to docs/img/ (what the README shows) with
#: REDISLOCK_UPDATE_SCREENSHOTS=1.
IMG = (
    ROOT / "docs" / "img"
    if os.environ.get("REDISLOCK_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "redislock-demo-screenshots"
)

pytestmark = pytest.mark.slow


def _demo_env(var_dir: str, redis_url: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "REDIS_URL", "REDLOCK_URLS", "PORT")
    }
    env.update(
        DEMO_VAR_DIR=var_dir,
        DEMO_ADMIN_PASSWORD=PASSWORD,
        DEMO_REPORT_SECONDS="3",
        PYTHONUNBUFFERED="1",
    )
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


@dataclass
class Demo:
    url: str
    env: dict[str, str]
    process: subprocess.Popen[str]
    server: RedisServer | None
    output: list[str]

    def manage(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(MANAGE), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _start_demo(env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[str], str, list[str]]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(RUN), "--port", str(port), *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            if "django-redislock demo: http://" in line:
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    process.reader = reader  # type: ignore[attr-defined]
    if not ready.wait(90) or process.poll() is not None:
        _stop_demo(process)
        pytest.fail("the demo did not start:\n" + "".join(output))
    return process, f"http://127.0.0.1:{port}", output


def _stop_demo(process: subprocess.Popen[str]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        status = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        status = process.wait()
    process.reader.join(10)  # type: ignore[attr-defined]
    if process.stdout is not None:
        process.stdout.close()
    return status


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    var_dir = tempfile.mkdtemp(prefix="redislock-demo-test-")
    server = RedisServer(unixsocket=False).start()
    env = _demo_env(var_dir, server.url)
    process, url, output = _start_demo(env)
    try:
        yield Demo(url, env, process, server, output)
    finally:
        _stop_demo(process)
        server.close()
        shutil.rmtree(var_dir, ignore_errors=True)


class Browser:
    """urllib with a cookie jar: enough for Django's CSRF and sessions."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def csrf(self) -> str:
        return next(c.value for c in self.jar if c.name == "csrftoken")

    def request(self, path: str, data: dict[str, str] | None = None) -> tuple[int, Any, str]:
        body = None
        headers = {}
        if data is not None:
            body = urllib.parse.urlencode({"csrfmiddlewaretoken": self.csrf(), **data}).encode()
            headers["Referer"] = self.base + path
        req = urllib.request.Request(self.base + path, data=body, headers=headers)
        try:
            with self.opener.open(req, timeout=120) as response:
                return response.status, response.headers, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read().decode()

    def get(self, path: str) -> str:
        status, _, text = self.request(path)
        assert status == 200, f"GET {path}: {status}\n{text[:2000]}"
        return text

    def post(self, path: str, data: dict[str, str] | None = None) -> tuple[int, Any, str]:
        return self.request(path, data or {})


def _text(html: str) -> str:
    return html_module.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def _eventually(check: Any, timeout: float = 20.0, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(interval)


# -- pages ----------------------------------------------------------------------------------


def test_home_page_links_every_demo_and_shows_the_workers_locks(demo: Demo) -> None:
    browser = Browser(demo.url)
    for link in [
        "/report/",
        "/fencing/",
        "/command/",
        "/contention/",
        "/semaphore/",
        "/rwlock/",
        "/admin/django_redislock/heldlock/",
    ]:
        assert f'href="{link}"' in browser.get("/")
    names = ["report:nightly-sales", "import:catalogue", "sync:crm-contacts", "backup:media"]
    page = _eventually(
        lambda: (t := _text(browser.get("/"))) and all(n in t for n in names) and t, 60, 0.5
    )
    assert page, "the background workers' locks never all showed up"
    assert re.search(r"(valkey|redis) \d+\.\d+", page)
    assert "ImportWorker-2" in page  # the owner's thread name


def test_every_page_renders(demo: Demo) -> None:
    browser = Browser(demo.url)
    for path, title in [
        ("/report/", "Regenerate the sales report"),
        ("/fencing/", "frozen past its TTL"),
        ("/command/", "locked management command"),
        ("/contention/", "Four processes, one lock"),
        ("/election/", "Three candidates, one leader"),
        ("/semaphore/", "Eight workers, three permits"),
        ("/rwlock/", "Many readers, one rebuild"),
        ("/celery/", "One report task, enqueued five times, one run"),
        ("/admin/login/", "Log in"),
    ]:
        assert title in browser.get(path), path
    status, _, _ = browser.request("/report/sales/regenerate/")
    assert status == 405  # POST only


def test_regenerate_twice_gives_the_423_page_with_retry_after(demo: Demo) -> None:
    first, second = Browser(demo.url), Browser(demo.url)
    first.get("/report/")
    second.get("/report/")
    assert demo.server is not None
    client = demo.server.client()
    results: list[tuple[int, Any, str]] = []
    worker = threading.Thread(
        target=lambda: results.append(first.post("/report/sales/regenerate/")), daemon=True
    )
    worker.start()
    assert _eventually(lambda: client.exists("redislock:{report:sales}"), 10, 0.02)

    status, headers, body = second.post("/report/sales/regenerate/")
    assert status == 423
    retry_after = int(headers["Retry-After"])
    assert 1 <= retry_after <= 10  # the holder's TTL left: 10 s, renewed by the watchdog
    text = _text(body)
    assert "Locked: this report is being regenerated right now" in text
    assert f"Retry-After: {retry_after}" in text
    assert "demo_site.demo.views.regenerate_report" in text  # the holder's purpose
    assert "renewed by a watchdog" in text

    worker.join(30)
    assert results and results[0][0] == 200  # redirected back to the report
    assert "regenerated in" in results[0][2]
    assert not client.exists("redislock:{report:sales}")
    client.close()


def test_freeze_demo_rejects_the_stale_write(demo: Demo) -> None:
    browser = Browser(demo.url)
    browser.get("/fencing/")
    status, _, page = browser.post("/fencing/run/")
    assert status == 200 and "Run " in page
    run = re.search(r"Run ([0-9a-f]{12})", page)
    assert run, page
    text = _eventually(
        lambda: (
            (t := _text(browser.get(f"/fencing/?run={run.group(1)}"))) and "finished" in t and t
        ),
        60,
        0.5,
    )
    assert text, "the freeze demo did not finish"
    assert "SIGSTOP worker A" in text and "SIGCONT worker A" in text
    assert re.search(r"worker B \(pid \d+\) wrote balance \d+ with fence \d+", text)
    assert "write REJECTED by the fence" in text
    assert "LockLost" in text  # leaving the with block after the lock expired under it
    assert "+50 survived (100 + 50). Without the fence" in text
    assert "balance 150" in text


def test_command_page_runs_rebuild_reports_twice_and_the_second_skips(demo: Demo) -> None:
    browser = Browser(demo.url)
    browser.get("/command/")
    status, _, page = browser.post("/command/")
    assert status == 200
    text = _text(page)
    assert (
        "first run: exit status 0" in text
        and "second run, started while the first one runs: exit status 0" in text
    )
    assert "reports rebuilt." in text
    assert "Skipped: Lock 'rebuild_reports' is held by" in text


def test_contention_page_shows_no_overlap(demo: Demo) -> None:
    browser = Browser(demo.url)
    browser.get("/contention/")
    status, _, page = browser.post("/contention/")
    assert status == 200
    assert re.search(r"overlaps\s+0", page), page
    assert "hand-off p50" in page and "hand-off p99" in page


# -- commands ---------------------------------------------------------------------------------


def test_rebuild_reports_skips_when_a_run_is_going_on(demo: Demo) -> None:
    with subprocess.Popen(
        [sys.executable, str(MANAGE), "rebuild_reports", "--seconds", "3"],
        env=demo.env,
        stdout=subprocess.PIPE,
        text=True,
    ) as first:
        assert first.stdout is not None
        assert "rebuilding" in first.stdout.readline()
        second = demo.manage("rebuild_reports", "--seconds", "0")
        assert second.returncode == 0
        assert "Skipped: Lock 'rebuild_reports' is held by" in second.stderr
        assert first.wait(30) == 0
    alone = demo.manage("rebuild_reports", "--seconds", "0")
    assert alone.returncode == 0 and "reports rebuilt" in alone.stdout


def test_lock_contention_command(demo: Demo) -> None:
    done = demo.manage("lock_contention", "--workers", "3", "--seconds", "1.5", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["overlaps"] == 0
    assert set(summary["per_worker"]) == {"1", "2", "3"}
    assert summary["acquisitions"] > 10
    assert summary["switches"] > 0 and summary["handoff_p50_ms"] is not None

    table = demo.manage("lock_contention", "--workers", "2", "--seconds", "1")
    assert table.returncode == 0, table.stderr
    assert "[##############################]" in table.stdout  # the progress bar, finished
    assert re.search(r"overlaps\s+0", table.stdout)
    assert "OK: no two workers ever held the lock at once." in table.stdout


def test_contention_summary_counts_overlaps_and_handoffs() -> None:
    from demo_site.demo.management.commands.lock_contention import percentile, summarize

    summary = summarize(
        {
            1: [(0.0, 0.0, 1.0), (2.0, 2.5, 3.0)],
            2: [(0.0, 1.001, 2.0), (2.9, 2.9, 3.5)],  # the last one overlaps worker 1's
        }
    )
    assert summary["acquisitions"] == 4 and summary["per_worker"] == {1: 2, 2: 2}
    assert summary["overlaps"] == 1
    assert summary["switches"] == 3
    assert summary["handoff_p50_ms"] == pytest.approx(1.0)
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0 and percentile([1.0, 2.0], 0.99) == 2.0


def test_demo_uses_an_embedded_server_and_stops_it() -> None:
    var_dir = tempfile.mkdtemp(prefix="redislock-demo-embedded-")
    try:
        process, url, output = _start_demo(_demo_env(var_dir, None), "--workers", "0")
        state = json.loads((Path(var_dir) / "servers.json").read_text())
        pid = int(re.search(r"pid (\d+)", state["label"]).group(1))
        try:
            assert "embedded" in _text(Browser(url).get("/"))
            banner = "".join(output)
            assert f"password '{PASSWORD}'" in banner and "user 'admin'" in banner
            os.kill(pid, 0)  # the embedded server runs
        finally:
            assert _stop_demo(process) == 0
        with pytest.raises(ProcessLookupError):
            _eventually(lambda: os.kill(pid, 0) is not None, 5)
            os.kill(pid, 0)
        assert not (Path(var_dir) / "servers.json").exists()
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)


# -- one walk in a real browser ----------------------------------------------------------------


@pytest.fixture
def chromium() -> Iterator[Any]:
    with headless_chromium("1200,900") as driver:
        yield driver


def test_browser_walk_home_locked_view_admin_release(demo: Demo, chromium: Any) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium
    IMG.mkdir(parents=True, exist_ok=True)
    driver.get(demo.url + "/")
    WebDriverWait(driver, 60).until(
        lambda d: "report:nightly-sales" in d.find_element(By.ID, "held-locks").text
    )
    assert "Distributed locks on Redis" in driver.find_element(By.TAG_NAME, "h1").text
    driver.save_screenshot(str(IMG / "demo-home.png"))

    # The locked view: a first request (fetch, in the background) holds the lock, then the
    # button's request finds it held.
    driver.find_element(By.LINK_TEXT, "A locked view").click()
    assert "Regenerate the sales report" in driver.find_element(By.TAG_NAME, "h1").text
    driver.execute_script(
        "const form = document.getElementById('regenerate-form');"
        "window.firstRequest = fetch(form.action, {method: 'POST', body: new FormData(form)});"
    )
    assert demo.server is not None
    client = demo.server.client()
    assert _eventually(lambda: client.exists("redislock:{report:sales}"), 10, 0.02)
    driver.find_element(By.ID, "regenerate").click()  # the form opens a new tab
    WebDriverWait(driver, 10).until(lambda d: len(d.window_handles) == 2)
    driver.switch_to.window(driver.window_handles[1])
    assert driver.find_element(By.CLASS_NAME, "status").text == "423"
    holder = driver.find_element(By.ID, "lock-holder").text
    assert "Retry-After:" in holder and "renewed by a watchdog" in holder
    driver.save_screenshot(str(IMG / "demo-423.png"))
    client.close()

    # The admin: log in, Held locks, force-release one of the workers' locks.
    driver.get(demo.url + "/admin/login/?next=/admin/")
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    held = driver.find_elements(By.LINK_TEXT, "Held locks")
    if not held:
        pytest.skip("the admin has no Held locks page (django_redislock.admin not ready)")
    held[0].click()
    table = driver.find_element(By.ID, "result_list").text
    assert "sync:crm-contacts" in table and "report:nightly-sales" in table
    held_page = driver.current_url
    said = []
    # The demo's worker releases and takes the lock again every 2 minutes or so: when that
    # falls between the confirmation page and the click, the admin rightly refuses ("changed
    # hands") and the walk asks again.
    for _ in range(3):
        driver.get(held_page)
        driver.find_element(By.LINK_TEXT, "sync:crm-contacts").click()
        driver.find_element(By.LINK_TEXT, "Force-release").click()
        assert "Are you sure" in driver.find_element(By.ID, "content").text
        driver.find_element(By.CSS_SELECTOR, "input[type=submit][value^='Yes']").click()
        # The click submits a form: until the next page is in, an element found may belong
        # to the page being left (make test once read a stale one).
        said.append(
            WebDriverWait(driver, 10, ignored_exceptions=(StaleElementReferenceException,)).until(
                lambda d: "“sync:crm-contacts”" in (t := _messages(d)) and t
            )
        )
        if "changed hands" not in said[-1]:
            break
    assert "“sync:crm-contacts” was force-released" in said[-1], said


def _messages(driver: Any) -> str:
    """The admin's messages on the page shown, "" while there are none."""
    from selenium.webdriver.common.by import By

    return " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, "ul.messagelist"))


def test_election_page_kill_the_leader_and_another_takes_over(demo: Demo, chromium: Any) -> None:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium

    def leader() -> tuple[str, int] | None:
        # The status part is refreshed in place every second: read both fields at once.
        try:
            name = driver.find_element(By.ID, "leader-name").text
            term = int(driver.find_element(By.ID, "leader-term").text)
        except (WebDriverException, ValueError):
            return None
        return name, term

    def text(element_id: str) -> str | None:
        try:
            return str(driver.find_element(By.ID, element_id).text)
        except WebDriverException:  # the part was replaced between the find and the read
            return None

    driver.get(demo.url + "/election/")
    assert "Three candidates, one leader" in driver.find_element(By.TAG_NAME, "h1").text
    first = WebDriverWait(driver, 60).until(lambda d: leader())
    # Three candidates: one leads, two wait.
    WebDriverWait(driver, 30).until(
        lambda d: (
            (found := text("candidates")) is not None
            and found.count("waiting") == 2
            and "leader" in found
        )
    )
    # The status refreshes in place: a mark set on this page survives new figures.
    driver.execute_script("window.sameDocument = true;")
    refreshes = "return Number(document.getElementById('leader').dataset.refreshes || 0);"
    WebDriverWait(driver, 10).until(lambda d: d.execute_script(refreshes) >= 2)
    assert driver.execute_script("return window.sameDocument === true;")
    # One click, no retry: the button is never replaced by the refresh.
    driver.find_element(By.ID, "kill-leader").click()
    second = WebDriverWait(driver, 60).until(
        lambda d: (found := leader()) is not None and found[0] != first[0] and found
    )
    assert second[1] > first[1]  # a new term
    WebDriverWait(driver, 30).until(lambda d: "killed" in d.find_element(By.ID, "candidates").text)
    events = driver.find_element(By.ID, "election-events").text
    assert f"elected, term {second[1]}" in events
    IMG.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(IMG / "demo-election.png"))


def test_semaphore_page_eight_workers_three_permits_a_holder_killed(demo: Demo) -> None:
    browser = Browser(demo.url)
    browser.get("/semaphore/")

    def status() -> dict[str, Any]:
        return json.loads(browser.get("/semaphore/status.json"))

    browser.post("/semaphore/start/")
    busy = _eventually(
        lambda: (s := status())["workers"] == 8 and len(s["permits"]) == 3 and s["line"] and s,
        60, 0.2,
    )  # fmt: skip
    assert busy, "the eight workers never filled the three permits with others in line"
    assert busy["limit"] == 3
    fences = [p["fence"] for p in busy["permits"]]
    assert fences == sorted(fences)  # longest-held first
    browser.post("/semaphore/kill/")
    killed = _eventually(lambda: (s := status())["killed"] and s, 10, 0.1)
    assert killed and len(killed["killed"]) == 1
    victim = killed["killed"][0]
    # Its permit stays taken until its lease runs out; then another worker gets it.
    taken = [p for p in killed["permits"] if p["label"] == victim]
    assert taken and taken[0]["killed"] and taken[0]["ttl"] <= 4.0
    back = _eventually(
        lambda: (s := status()) and all(p["label"] != victim for p in s["permits"])
        and len(s["permits"]) == 3 and s,
        15, 0.2,
    )  # fmt: skip
    assert back, "the killed holder's permit never came back"
    assert back["workers"] == 7
    page = browser.get("/semaphore/")
    assert "Permits in use" in page and "In line" in page


def test_rwlock_page_readers_together_the_writer_alone_and_not_starved(demo: Demo) -> None:
    browser = Browser(demo.url)
    browser.get("/rwlock/")

    def status() -> dict[str, Any]:
        return json.loads(browser.get("/rwlock/status.json"))

    browser.post("/rwlock/start/")
    reading = _eventually(
        lambda: (s := status())["workers"] == 6 and s["mode"] == "read"
        and len(s["holders"]) >= 2 and s,
        60, 0.1,
    )  # fmt: skip
    assert reading, "the five readers were never seen inside together"
    writing = _eventually(lambda: (s := status())["mode"] == "write" and s, 30, 0.05)
    assert writing and [h["label"] for h in writing["holders"]] == ["writer-6"]  # alone
    rebuilt = _eventually(lambda: (s := status())["writer_waits"] and s, 30, 0.2)
    assert rebuilt
    # The readers never stop, yet the writer got in: well within a place's life (2.5 s).
    assert max(rebuilt["writer_waits"]) < 2.5, rebuilt["writer_waits"]
    page = browser.get("/rwlock/")
    assert "Held for" in page and "The writer's rebuilds" in page


def test_celery_page_five_enqueues_one_run(demo: Demo, chromium: Any) -> None:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium

    def summary() -> str | None:
        try:  # the page reloads itself while the tasks run
            return str(driver.find_element(By.ID, "celery-summary").text)
        except WebDriverException:
            return None

    driver.get(demo.url + "/celery/")
    driver.find_element(By.ID, "enqueue").click()
    found = WebDriverWait(driver, 90).until(lambda d: (s := summary()) and "ran" in s and s)
    assert found == "1 ran, 4 skipped"
    rows = driver.find_element(By.ID, "celery-tasks").text
    assert rows.count("skipped: another run holds the lock") == 4 and "ran (fence" in rows
    IMG.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(IMG / "demo-celery.png"))
