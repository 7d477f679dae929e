"""A soak worker process: ``python -m tests.soak.worker '<json config>'``.

It configures Django itself (alias ``lock`` for the single server, ``node0..`` for the
Redlock nodes), then runs ``threads`` threads and ``tasks`` asyncio tasks (in one event
loop thread) until ``deadline`` (a ``time.monotonic()`` reading, one clock for every
process of the machine). Each loops: pick a name, acquire with a random timeout, read the
name's fenced resource, write counter + 1 with the fence, hold a moment, release; every
operation and every error goes to the history file of that thread or task.

``broken=True`` is the deliberately broken lock: release is a raw ``DEL`` with no token
check (on every node for a Redlock), so a holder that lost its lock deletes the next one's;
a broken Semaphore worker asks for one permit more than the name's limit.

Semaphore holders hold together, so they do no fenced read-modify-write: what is checked
for them is the limit.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from django_redislock import wakeups
from tests.faults.harness import History, lock_validity_ns, now_ns
from tests.soak.checks import SEMAPHORE_LIMITS
from tests.soak.resource import NamedResource

#: release.lua less its token check (KEYS: key, metadata; ARGV: channel).
BROKEN_RELEASE = f"""
local deleted = redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[1], '{wakeups.FREED_OUT_OF_TURN}')
return deleted > 0 and 1 or 0
"""

#: Errors a fault may cause; anything else is an unexpected exception (a violation).
EXPECTED = ("LockBackendUnavailable", "LockNotOwned", "LockLost")


def setup_django(config: dict[str, Any]) -> None:
    import django
    from django.conf import settings

    caches = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": config["lock_url"]},
        "lock": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": config["lock_url"]},
    }
    for i, url in enumerate(config["node_urls"]):
        caches[f"node{i}"] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}
    settings.configure(
        INSTALLED_APPS=["django_redislock"],
        CACHES=caches,
        REDISLOCK={
            "TTL": config["ttl"],
            "SOCKET_TIMEOUT": 2.0,
            "REDLOCK_CONNECTIONS": [f"node{i}" for i in range(len(config["node_urls"]))],
        },
        USE_TZ=True,
    )
    django.setup()


class Actor:
    """One thread's or task's loop; sync and async share everything but the lock calls."""

    def __init__(self, config: dict[str, Any], ident: str) -> None:
        self.config = config
        self.ident = ident
        self.history = History(Path(config["history_dir"]) / f"{ident}.jsonl", ident)
        self.rng = random.Random()
        self.resources = {
            name: NamedResource(config["resource_url"], name) for name in config["names"]
        }

    def new_lock(self) -> Any:
        from django_redislock import Lock, Redlock, Semaphore

        config = self.config
        name = self.rng.choice(config["names"])
        watchdog = self.rng.random() < 0.5
        if config["kind"] == "redlock":
            return Redlock(name, ttl=config["ttl"], watchdog=watchdog, node_timeout=0.5)
        if config["kind"] == "semaphore":
            limit = SEMAPHORE_LIMITS[name] + (1 if config["broken"] else 0)
            return Semaphore(name, limit, connection="lock", ttl=config["ttl"], watchdog=watchdog)
        return Lock(name, connection="lock", ttl=config["ttl"], watchdog=watchdog)

    @property
    def exclusive(self) -> bool:
        """Whether its holders hold alone (and so do the fenced read-modify-write)."""
        return self.config["kind"] != "semaphore"

    @property
    def broken_release_on(self) -> bool:
        return self.config["broken"] and self.exclusive

    def timeout(self) -> float:
        return self.rng.uniform(0.2, 8.0)

    def error(self, op: str, invoke: int, lock: Any, exc: BaseException) -> None:
        kind = type(exc).__name__
        self.history.record(
            "error",
            invoke_ns=invoke,
            name=lock.name,
            during=op,
            error=kind,
            expected=kind in EXPECTED,
            message=str(exc)[:300],
        )

    def begin(self) -> tuple[Any, int, float]:
        """A new lock object, the acquire's invoke time, and its timeout."""
        self._acquire_invoke = now_ns()
        return self.new_lock(), self._acquire_invoke, self.timeout()

    def acquired(self, lock: Any, invoke: int, ok: bool, timeout: float) -> bool:
        self.history.record(
            "acquire",
            invoke_ns=invoke,
            ok=ok,
            timeout=timeout,
            token=lock.token,
            fence=lock.fence,
            name=lock.name,
            validity_ns=lock_validity_ns(lock, invoke) if ok else None,
        )
        return ok

    def critical_section(self, lock: Any) -> None:
        if not self.exclusive:
            return
        resource = self.resources[lock.name]
        invoke = now_ns()
        value = resource.read()
        accepted = resource.write(value + 1, lock.fence, self.ident)
        self.history.record(
            "write", invoke_ns=invoke, ok=accepted, fence=lock.fence, name=lock.name
        )

    def before_release(self, lock: Any) -> tuple[int, str | None, int | None]:
        # Renewals may have moved the validity on since the acquire: the last one counts.
        start = now_ns(), lock.token, lock_validity_ns(lock, self._acquire_invoke)
        # Written before the release is sent: a worker killed after sending it must not
        # look like a holder that still believed (the "release" line comes after).
        invoke, token, validity = start
        self.history.record(
            "releasing", invoke_ns=invoke, token=token, name=lock.name, validity_ns=validity
        )
        return start

    def released(self, lock: Any, start: tuple[int, str | None, int | None], outcome: str) -> None:
        invoke, token, validity = start
        self.history.record(
            "release",
            invoke_ns=invoke,
            ok=outcome == "released",
            token=token,
            name=lock.name,
            validity_ns=validity,
            outcome=outcome,
        )

    def broken_release(self, lock: Any) -> str:
        """The release script without its token check: deletes whoever holds the key
        now and wakes the waiters, on every node of a Redlock."""
        from django_redislock.connection import lock_client

        aliases = getattr(lock, "connections", None) or [lock.connection]
        keys = lock.keys
        deleted = sum(
            lock_client(alias).eval(BROKEN_RELEASE, 2, keys.key, keys.meta, keys.channel)
            for alias in aliases
        )
        lock.token = None
        return "released" if deleted else "nothing"

    def hold(self) -> float:
        return self.rng.uniform(0, 0.02)  # the critical section's length

    # -- sync ------------------------------------------------------------------------------
    def run(self) -> None:
        while time.monotonic() < self.config["deadline"]:
            lock, invoke, timeout = self.begin()
            try:
                ok = lock.acquire(timeout=timeout)
            except Exception as exc:  # not one of EXPECTED: a violation
                self.error("acquire", invoke, lock, exc)
                continue
            if not self.acquired(lock, invoke, ok, timeout):
                continue
            try:
                self.critical_section(lock)
                time.sleep(self.hold())
            finally:
                self.release(lock)
        self.history.close()

    def release(self, lock: Any) -> None:
        start = self.before_release(lock)
        if self.broken_release_on:
            outcome = self.broken_release(lock)
        else:
            try:
                lock.release()
                outcome = "released"
            except Exception as exc:
                self.error("release", start[0], lock, exc)
                outcome = type(exc).__name__
        self.released(lock, start, outcome)

    # -- async -----------------------------------------------------------------------------
    async def arun(self) -> None:
        while time.monotonic() < self.config["deadline"]:
            lock, invoke, timeout = self.begin()
            try:
                ok = await lock.aacquire(timeout=timeout)
            except Exception as exc:
                self.error("acquire", invoke, lock, exc)
                continue
            if not self.acquired(lock, invoke, ok, timeout):
                continue
            try:
                self.critical_section(lock)
                await asyncio.sleep(self.hold())
            finally:
                await self.arelease(lock)
        self.history.close()

    async def arelease(self, lock: Any) -> None:
        start = self.before_release(lock)
        if self.broken_release_on:
            outcome = self.broken_release(lock)
        else:
            try:
                await lock.arelease()
                outcome = "released"
            except Exception as exc:
                self.error("release", start[0], lock, exc)
                outcome = type(exc).__name__
        self.released(lock, start, outcome)


def main(config: dict[str, Any]) -> int:
    setup_django(config)
    worker = config["worker"]
    threads = [
        threading.Thread(target=Actor(config, f"{worker}-t{i}").run, name=f"soak-{i}")
        for i in range(config["threads"])
    ]
    actors = [Actor(config, f"{worker}-a{i}") for i in range(config["tasks"])]

    async def tasks() -> None:
        await asyncio.gather(*(actor.arun() for actor in actors))

    threads.append(threading.Thread(target=asyncio.run, args=(tasks(),), name="soak-loop"))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
