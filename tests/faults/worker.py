"""A fault-suite worker process: ``python -m tests.faults.worker '<json config>'``.

It configures Django itself (one cache alias per lock URL: one URL is a ``Lock``,
three or more a ``Redlock``), then per iteration: acquire, read the protected
resources, write counter + 1 with its fence, release — appending every operation to
the history file. ``pause_at`` makes it SIGSTOP *itself* at one point, so the
controller knows exactly where it froze; the controller SIGCONTs it later:

* ``after_acquire`` — right after the acquire returned;
* ``before_write`` — after reading the resources, before writing them;
* ``during_renewal`` — in the watchdog thread, just before a renewal is sent;
* ``before_release`` — after the write, before the release.

``naive=True`` is the unprotected baseline: release and renewal become raw ``DEL`` /
``PEXPIRE`` without a token check, and the holder records no validity (it believes it
holds the lock until it releases).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

from tests.faults.harness import History, lock_validity_ns, now_ns, open_resources


def setup_django(urls: list[str], **redislock: Any) -> list[str]:
    import django
    from django.conf import settings

    aliases = [f"node{i}" for i in range(len(urls))]
    caches = {
        alias: {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}
        for alias, url in zip(aliases, urls, strict=True)
    }
    caches["default"] = caches[aliases[0]]
    config: dict[str, Any] = {"TTL": 5.0, **redislock}
    if len(urls) > 1:
        config["REDLOCK_CONNECTIONS"] = aliases
    settings.configure(
        INSTALLED_APPS=["django_redislock"], CACHES=caches, REDISLOCK=config, USE_TZ=True
    )
    django.setup()
    return aliases


def pause_self(history: History, point: str) -> None:
    history.record("pause", invoke_ns=now_ns(), point=point)
    os.kill(os.getpid(), signal.SIGSTOP)
    history.record("resume", invoke_ns=now_ns(), point=point)


def main(config: dict[str, Any]) -> int:
    urls = config["urls"]
    aliases = setup_django(urls, SOCKET_TIMEOUT=config.get("socket_timeout", 2.0))
    from django_redislock import Lock, LockNotOwned, Redlock
    from django_redislock.connection import lock_client

    history = History(config["history"], config["worker"])
    resources = open_resources(
        config.get("sqlite"), config.get("redis_resource"), enforce=config["enforce"]
    )
    naive = config.get("naive", False)
    point = config.get("pause_at")
    ttl = config["ttl"]
    redlock = len(urls) > 1
    renewed = threading.Event()
    lock_cls: Any = Redlock if redlock else Lock

    if point == "during_renewal":
        # The watchdog renews through the lock's transport (a batch of extend operations).
        from django_redislock.transports.quorum import Quorum
        from django_redislock.transports.single import SingleNode

        transport_cls: Any = Quorum if redlock else SingleNode
        original = transport_cls.call_many
        state = {"paused": False}

        def naive_renewal(alias: str, op: Any) -> Any:
            key, ttl_ms = op.keys[0], op.args[1]  # no token check: resets whoever holds it
            try:
                return bool(lock_client(alias).pexpire(key, ttl_ms))
            except Exception as exc:
                return exc

        def call_many(self: Any, ops: Any) -> list[Any]:
            if not state["paused"]:
                state["paused"] = True
                pause_self(history, point)
            if naive and not redlock:
                results = [naive_renewal(self.alias, op) for op in ops]
            else:
                results = original(self, ops)
            for op, result in zip(ops, results, strict=True):
                history.record("renew", invoke_ns=now_ns(), ok=result is True, token=op.args[0])
            renewed.set()
            return results

        transport_cls.call_many = call_many

    kwargs: dict[str, Any] = {"ttl": ttl, "watchdog": config.get("watchdog", False)}
    if redlock:
        kwargs["connections"] = aliases
    for _ in range(config.get("iterations", 1)):
        lock = lock_cls(config["name"], **kwargs)
        acquire_invoke = now_ns()
        ok = lock.acquire(timeout=config.get("timeout", 10))
        history.record(
            "acquire",
            invoke_ns=acquire_invoke,
            ok=ok,
            token=lock.token,
            fence=lock.fence,
            validity_ns=None if naive else lock_validity_ns(lock, acquire_invoke),
        )
        if not ok:
            continue
        fence = lock.fence
        if point == "after_acquire":
            pause_self(history, point)
        if point == "during_renewal":
            renewed.wait(60)
        values = []
        for resource in resources:
            invoke = now_ns()
            values.append(resource.read())
            history.record("read", invoke_ns=invoke, ok=True, value=values[-1])
        if point == "before_write":
            pause_self(history, point)
        for resource, value in zip(resources, values, strict=True):
            invoke = now_ns()
            accepted = resource.write(value + 1, fence, config["worker"])
            history.record(
                "write",
                invoke_ns=invoke,
                ok=accepted,
                fence=fence,
                resource=type(resource).__name__,
            )
        if config.get("hold"):
            time.sleep(config["hold"])  # the critical section's length, not a synchronisation
        if point == "before_release":
            pause_self(history, point)
        invoke = now_ns()
        # Renewals may have moved the validity on: the last one counts.
        validity = None if naive else lock_validity_ns(lock, acquire_invoke)
        token = lock.token
        if naive and not redlock:  # no token check: deletes whoever holds it now
            released = bool(lock_client(lock.connection).delete(lock.key))
            lock.token = None
            outcome = "deleted" if released else "nothing"
        else:
            try:
                lock.release()
                released, outcome = True, "released"
            except LockNotOwned:
                released, outcome = False, "not owned"
        history.record(
            "release",
            invoke_ns=invoke,
            ok=released,
            token=token,
            validity_ns=validity,
            outcome=outcome,
        )
    history.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
