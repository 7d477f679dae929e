"""Worker processes of the read-write lock tests (multiprocessing, spawn): each configures
Django itself with :func:`tests.support.workers.setup_django`."""

from __future__ import annotations

import time
from typing import Any

from tests.support.workers import setup_django

#: (entered, left, fence, asked): a hold on the system-wide monotonic clock; ``asked``
#: when its acquire was called.
Section = tuple[float, float, int, float]


def read_stream(
    redis_url: str, name: str, hold: float, run_for: float, stop: Any, start: Any,
    prefer_writers: bool = True,
) -> list[Section]:  # fmt: skip
    """Read ``name`` over and over (``hold`` s each, at once again) until ``stop`` is set
    or ``run_for`` s passed. ``prefer_writers=False``: readers that do not see waiting
    writers (the protection switched off, to show the checker catches starvation)."""
    setup_django(redis_url)
    from django_redislock import ReadWriteLock

    rw = ReadWriteLock(name, ttl=10, timeout=60)
    start.wait()
    end = time.monotonic() + run_for
    sections = []
    if not prefer_writers:
        return _blind_stream(name, hold, end, stop)
    while not stop.is_set() and time.monotonic() < end:
        reader = rw.read_lock()
        asked = time.monotonic()
        with reader:
            entered = time.monotonic()
            time.sleep(hold)
            sections.append((entered, time.monotonic(), reader.fence or 0, asked))
    return sections


def _blind_stream(name: str, hold: float, end: float, stop: Any) -> list[Section]:
    """Blind readers that take their next hold before giving back the last: the stream
    never runs dry by chance (a loaded machine), so only writer preference lets a writer in."""
    sections: list[Section] = []
    previous = None
    while not stop.is_set() and time.monotonic() < end:
        reader = _ignoring_writers(name)
        asked = time.monotonic()
        reader.acquire()
        entered = time.monotonic()
        if previous is not None:
            previous.release()
        time.sleep(hold)
        sections.append((entered, time.monotonic(), reader.fence or 0, asked))
        previous = reader
    if previous is not None:
        previous.release()
    return sections


def write_some(
    redis_url: str, name: str, writes: int, hold: float, pause: float, start: Any
) -> list[Section]:
    """Write ``name`` ``writes`` times (``hold`` s each, ``pause`` s between)."""
    setup_django(redis_url)
    from django_redislock import ReadWriteLock

    rw = ReadWriteLock(name, ttl=10, timeout=60)
    start.wait()
    time.sleep(pause)  # the readers' stream is flowing
    sections = []
    for _ in range(writes):
        writer = rw.write_lock()
        asked = time.monotonic()
        with writer:
            entered = time.monotonic()
            time.sleep(hold)
            sections.append((entered, time.monotonic(), writer.fence or 0, asked))
        time.sleep(pause)
    return sections


def _ignoring_writers(name: str) -> Any:
    from django_redislock.kinds.rwlock import Read
    from django_redislock.rwlock import ReadLock

    class Blind(Read):
        __slots__ = ()

        def __init__(self, keys: Any, **options: Any) -> None:
            super().__init__(keys, **options)
            self.queue = f"{keys.key}:nobody"  # an empty line: no writer is ever seen waiting

    class BlindReadLock(ReadLock):
        operations = Blind

    return BlindReadLock(name, ttl=10, timeout=60)
