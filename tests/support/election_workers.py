"""Candidate processes for the election tests: ``python -m tests.support.election_workers``.

Each candidate appends one line per event to a shared log (one ``os.write`` on an
``O_APPEND`` file, so lines never interleave): ``elected T PID TERM``, ``tick T PID TERM``
(it acted as leader at T), ``lost T PID TERM`` (its loop saw ``is_leader`` turn False),
``on_lost T PID TERM`` (the callback). T is ``time.monotonic_ns()``, one clock for every
process of the machine.

Modes: ``election`` uses :class:`django_redislock.Election`; ``broken`` replaces the
renewal with a plain re-acquire (``SET key token PX ttl`` with no ownership check) and
believes it leads forever after: the checker must catch it.
"""

from __future__ import annotations

import os
import sys
import time

from tests.support.workers import setup_django

TICK_SECONDS = 0.005


class Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def write(self, event: str, stamp: int, term: int | None) -> None:
        os.write(self.fd, f"{event} {stamp} {os.getpid()} {term}\n".encode())


def run_election(name: str, ttl: float, log: Log) -> None:
    from django_redislock import Election

    def lost(election: Election) -> None:
        log.write("on_lost", time.monotonic_ns(), election.fence)

    election = Election(name, ttl=ttl, on_lost=lost)
    while True:
        election.campaign()
        log.write("elected", time.monotonic_ns(), election.fence)
        while True:
            # The time is taken BEFORE the check: if is_leader holds after it, this
            # process led at that time too (a term is one unbroken interval).
            stamp = time.monotonic_ns()
            if not election.is_leader:
                break
            log.write("tick", stamp, election.fence)
            time.sleep(TICK_SECONDS)
        log.write("lost", time.monotonic_ns(), election.fence)
        election.resign()


def run_broken(name: str, ttl: float, log: Log) -> None:
    from django_redislock import Lock
    from django_redislock.connection import lock_client

    lock = Lock(name, ttl=ttl, watchdog=False, fencing=True)
    lock.acquire()
    log.write("elected", time.monotonic_ns(), lock.fence)
    client = lock_client("default")
    renewed = time.monotonic()
    while True:
        if time.monotonic() - renewed >= ttl / 3:
            client.set(lock.key, lock.token, px=int(ttl * 1000))  # the bug: no ownership check
            renewed = time.monotonic()
        log.write("tick", time.monotonic_ns(), lock.fence)
        time.sleep(TICK_SECONDS)


def main(argv: list[str]) -> None:
    url, name, ttl, mode, path = argv
    setup_django(url)
    log = Log(path)
    (run_broken if mode == "broken" else run_election)(name, float(ttl), log)


if __name__ == "__main__":
    main(sys.argv[1:])
