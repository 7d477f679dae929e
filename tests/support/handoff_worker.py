"""A waiter process for the hand-off tests: ``python -m tests.support.handoff_worker``.

Arguments: URL NAME MODE TTL TIMEOUT. It acquires NAME (``acquire`` or, with MODE
``async``, ``aacquire``) with that TTL and timeout, then prints one JSON line: whether
acquire() returned True, the token, fence, ``lost``, the validity left, and whether Redis
held this token at that moment. It then releases what it holds and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys

from tests.support.workers import setup_django


def report(lock, ok: bool) -> dict[str, object]:  # type: ignore[no-untyped-def]
    from django_redislock.clock import now
    from django_redislock.connection import lock_client
    from django_redislock.holder import held_token

    value = lock_client(lock.connection).get(lock.key)
    return {
        "ok": ok,
        "token": lock.token,
        "fence": lock.fence,
        "lost": lock.lost if ok else None,
        "valid_left": None if lock.valid_until is None else lock.valid_until - now(),
        "held_in_redis": ok and value is not None and held_token(value.decode()) == lock.token,
    }


def main(url: str, name: str, mode: str, ttl: float, timeout: float) -> None:
    setup_django(url)
    from django_redislock import Lock, LockNotOwned

    lock = Lock(name, ttl=ttl)
    if mode == "async":
        ok = asyncio.run(lock.aacquire(timeout=timeout))
    else:
        ok = lock.acquire(timeout=timeout)
    print(json.dumps(report(lock, ok)), flush=True)
    if ok:
        with contextlib.suppress(LockNotOwned):
            lock.release()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
