"""A monkey-patched worker: ``python tests/support/green_worker.py LIBRARY SCENARIO OUT ...``.

LIBRARY is ``gevent``, ``eventlet`` or ``none``. The patch comes first, before anything
else is imported, as ``gunicorn -k gevent`` and ``celery worker --pool gevent`` do in
production. After it, ``threading.Thread`` is a greenlet, so the scenarios below start
"threads" and run on greenlets (``none`` runs them on real threads). Each writes a JSON
report to OUT. ``REDISLOCK_TEST_REDIS_URL`` names the server.
"""

import sys

LIBRARY = sys.argv[1]
if LIBRARY == "gevent":
    from gevent import monkey

    monkey.patch_all()
elif LIBRARY == "eventlet":
    import eventlet

    eventlet.monkey_patch()
elif LIBRARY != "none":
    raise SystemExit(f"LIBRARY must be gevent, eventlet or none, not {LIBRARY!r}")

import json  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


def patched() -> bool:
    """Whether ``threading`` was replaced by the green library (the test checks it)."""
    if LIBRARY == "gevent":
        return bool(monkey.is_module_patched("threading"))
    if LIBRARY == "eventlet":
        return bool(eventlet.patcher.is_monkey_patched("thread"))
    return False


def run_all(target: Any, count: int) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def contend(name: str, greenlets: int, iterations: int, locked: bool, go: str) -> dict[str, Any]:
    """``greenlets`` x ``iterations`` critical sections on one name, 1 ms each."""
    from django_redis import get_redis_connection

    from django_redislock import Lock

    sections: list[tuple[float, float]] = []

    def work(_index: int) -> None:
        for _ in range(iterations):
            if locked:
                with Lock(name, ttl=10, timeout=60):
                    sections.append(section())
            else:
                sections.append(section())

    def section() -> tuple[float, float]:
        start = time.monotonic()  # system-wide on Linux: comparable across processes
        time.sleep(0.001)  # a cooperative yield inside the section, as real work has
        return start, time.monotonic()

    # Every process starts together: one "go" item each, pushed by the test.
    redis = get_redis_connection("default")
    redis.rpush(f"{go}:ready", os.getpid())
    redis.blpop([go], timeout=60)
    run_all(work, greenlets)
    return {"sections": sections}


def watchdog() -> dict[str, Any]:
    """A lock held across a long cooperative sleep; then one starved by a CPU-bound greenlet."""
    from django_redis import get_redis_connection

    from django_redislock import Lock, LockLost, LockNotOwned

    redis = get_redis_connection("default")
    report: dict[str, Any] = {}
    ttl = 0.6
    renewed = Lock("green-renewed", ttl=ttl, watchdog=True)
    unwatched = Lock("green-unwatched", ttl=ttl, watchdog=False)  # the checker's control
    assert renewed.acquire(blocking=False) and unwatched.acquire(blocking=False)
    time.sleep(3 * ttl)  # cooperative: the watchdog greenlet runs meanwhile
    for key, lock in (("sleep", renewed), ("unwatched", unwatched)):
        report[f"{key}_lost"] = lock.lost
        report[f"{key}_pttl"] = redis.pttl(lock.keys.key)
    renewed.release()

    calls: list[float] = []
    called = threading.Event()

    def on_lost(_lock: Any) -> None:
        calls.append(time.monotonic())
        called.set()

    starved = Lock("green-starved", ttl=ttl, watchdog=True, on_lost=on_lost)
    assert starved.acquire(blocking=False)
    acquired = starved.acquired_monotonic
    seen: dict[str, float] = {}

    def hog(_index: int) -> None:
        # CPU-bound, never yields: the watchdog cannot renew. It asks lock.lost, as long
        # work should before it acts on the lock's protection.
        end = time.monotonic() + 2.5 * ttl
        while time.monotonic() < end:
            if "lost" not in seen and starved.lost:
                seen["lost"] = time.monotonic()

    valid_until = starved.valid_until
    run_all(hog, 1)
    report["valid_for"] = valid_until - acquired if valid_until is not None else None
    report["starved_lost"] = starved.lost
    report["lost_seen_after"] = seen["lost"] - acquired if "lost" in seen else None
    try:
        starved.check()
        report["check"] = "passed"
    except LockLost:
        report["check"] = "LockLost"
    report["starved_pttl"] = redis.pttl(starved.keys.key)
    report["on_lost_called"] = called.wait(10)
    try:
        starved.release()
        report["release"] = "released"
    except LockNotOwned:
        report["release"] = "LockNotOwned"
    time.sleep(ttl)  # a watchdog that would call on_lost again has had its turns
    report["on_lost_calls"] = len(calls)
    report["ttl"] = ttl
    return report


def main() -> None:
    scenario, out = sys.argv[2], Path(sys.argv[3])
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.support.workers import setup_django

    setup_django(os.environ["REDISLOCK_TEST_REDIS_URL"])
    if scenario == "contend":
        name, greenlets, iterations, locked, go = sys.argv[4:9]
        report = contend(name, int(greenlets), int(iterations), locked == "locked", go)
    elif scenario == "watchdog":
        report = watchdog()
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    report.update(library=LIBRARY, patched=patched(), pid=os.getpid())
    out.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
