"""Releasing inside atomic() waits for the commit; a rollback releases at once."""

from __future__ import annotations

import multiprocessing

import pytest
from django.db import transaction

from django_redislock import Lock
from tests.support.fencing_workers import atomic_incrementer, create_database, read_row

WORKERS = 4
ITERATIONS = 40


def run_incrementers(url, db_path, release_after_commit):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(WORKERS) as pool:
        results = pool.starmap(
            atomic_incrementer, [(url, db_path, ITERATIONS, release_after_commit)] * WORKERS
        )
    done = sum(d for d, _ in results)
    errors = sum(e for _, e in results)
    return done, errors, read_row(db_path)[0]


def test_counter_is_exact_when_release_waits_for_commit(real_backend, tmp_path):
    db_path = str(tmp_path / "tx.sqlite3")
    create_database(db_path)
    done, errors, balance = run_incrementers(real_backend.url, db_path, True)
    assert (done, errors, balance) == (WORKERS * ITERATIONS, 0, WORKERS * ITERATIONS)


def test_release_before_commit_shows_the_hazard(real_backend, tmp_path):
    """Protection off: the next holder reads uncommitted-away data and fails or loses updates."""
    db_path = str(tmp_path / "tx.sqlite3")
    create_database(db_path)
    _, errors, balance = run_incrementers(real_backend.url, db_path, False)
    assert errors > 0 or balance < WORKERS * ITERATIONS


@pytest.mark.django_db(transaction=True)
def test_release_waits_for_commit(lock_backend):
    with transaction.atomic():
        with Lock("tx-commit") as lock:
            pass
        assert lock.locked()  # still held: the transaction is open
        assert lock.token is not None
    assert not lock.locked()
    assert lock.token is None


@pytest.mark.django_db(transaction=True)
def test_rollback_releases_at_once(lock_backend):
    with pytest.raises(RuntimeError), transaction.atomic():
        with Lock("tx-rollback") as lock:
            pass
        assert lock.locked()
        raise RuntimeError("roll back")
    assert not lock.locked()


@pytest.mark.django_db(transaction=True)
def test_savepoint_rollback_releases_at_once(lock_backend):
    with transaction.atomic():
        try:
            with transaction.atomic():
                with Lock("tx-savepoint") as lock:
                    pass
                raise RuntimeError("inner rollback")
        except RuntimeError:
            pass
        assert not lock.locked()  # released when the savepoint rolled back


@pytest.mark.django_db
def test_testcase_transaction_does_not_defer(lock_backend):
    """The atomic block Django's TestCase opens around a test never commits: ignore it."""
    with Lock("in-testcase") as lock:
        pass
    assert not lock.locked()


@pytest.mark.django_db(transaction=True)
def test_setting_turns_deferral_off(lock_backend, settings):
    settings.REDISLOCK = {**settings.REDISLOCK, "RELEASE_AFTER_COMMIT": False}
    with transaction.atomic():
        with Lock("tx-off") as lock:
            pass
        assert not lock.locked()


@pytest.mark.urls("tests.support.urls_decorators")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("deferred", [True, False])
def test_atomic_requests_view_releases_after_commit(lock_backend, client, settings, deferred):
    """With ATOMIC_REQUESTS the view runs in atomic(): lock_view releases after the commit."""
    from django.db import connection

    from django_redislock.signals import lock_released

    settings.REDISLOCK = {**settings.REDISLOCK, "RELEASE_AFTER_COMMIT": deferred}
    seen = []

    def record(sender, lock, **kwargs):
        seen.append(connection.in_atomic_block)

    lock_released.connect(record, dispatch_uid="atomic-requests")
    old = connection.settings_dict["ATOMIC_REQUESTS"]
    connection.settings_dict["ATOMIC_REQUESTS"] = True
    try:
        response = client.get("/page/atomic/")
    finally:
        connection.settings_dict["ATOMIC_REQUESTS"] = old
        lock_released.disconnect(dispatch_uid="atomic-requests")
    assert response.status_code == 200
    # Deferred: released from on_commit, outside the transaction; else inside it.
    assert seen == [not deferred]
    assert not Lock("page:atomic").locked()


@pytest.mark.django_db
def test_the_twins_agree_async_with_has_no_transaction_to_wait_for():
    """__exit__ defers to the commit; __aexit__ cannot meet an open transaction: Django
    refuses atomic() inside an event loop. The async twin releases at once."""
    import asyncio

    from django.core.exceptions import SynchronousOnlyOperation

    async def main() -> None:
        with pytest.raises(SynchronousOnlyOperation), transaction.atomic():
            pass
        async with Lock("twins", ttl=5) as lock:
            assert await lock.alocked()
        assert not await lock.alocked()

    asyncio.run(main())


def test_the_twins_log_the_same_messages(caplog):
    import asyncio

    caplog.set_level("DEBUG", logger="django_redislock")
    holder = Lock("twins-log", ttl=5)
    holder.acquire()
    assert not Lock("twins-log", ttl=5).acquire(timeout=0.01)
    sync_messages = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    caplog.clear()

    async def main() -> None:
        assert not await Lock("twins-log", ttl=5).aacquire(timeout=0.01)

    asyncio.run(main())
    async_messages = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    holder.release()
    assert sync_messages == async_messages == ["gave up on 'twins-log'"]
