"""A soak worker process: ``python -m tests.soak.worker '<json config>'``.

It configures Django itself (alias ``lock`` for the single server, ``node0..`` for the
Redlock nodes), then runs ``threads`` threads and ``tasks`` asyncio tasks (in one event
loop thread) until ``deadline`` (a ``time.monotonic()`` reading, one clock for every
process of the machine). Each loops: make a subject of the worker's kind
(:mod:`tests.soak.subjects`) on one of its names, acquire with a random timeout; if its
holders hold alone (a Lock, a Redlock, a MultiLock's parts, a writer, a leader), read each
name's fenced resource and write counter + 1 with the fence; hold a moment; release.
Every operation and every error goes to the history file of that thread or task, one
line per name (a MultiLock's parts each have theirs, with ``multi``).

A MultiLock is also checked from the Redis side: right after its acquire, which parts'
keys hold its tokens (``parts`` lines, ``missing``); after its release, which still do
(``leftover`` lines, ``held``): at once after a release that returned, one TTL (and a
half second) after one that raised, by when a part it could not release must be gone.

``broken=True`` runs each kind's deliberately broken variant (see :mod:`tests.soak.subjects`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.faults.harness import History, lock_validity_ns, now_ns
from tests.soak.resource import NamedResource
from tests.soak.subjects import MultiSubject, Subject, break_rwlock_readers, holding, new_subject

#: Errors a fault may cause; anything else is an unexpected exception (a violation).
EXPECTED = ("LockBackendUnavailable", "LockNotOwned", "LockLost")
#: How long after a failed MultiLock release its parts must be gone, past the TTL.
LEFTOVER_SLACK = 0.5
#: Unrecorded rounds each actor runs on names of its own before its first recorded one.
WARMUP_ROUNDS = 4
#: After an error, an actor pauses this long before its next round (as an application
#: would), so a server that is down is not asked thousands of times a second.
ERROR_PAUSE = 0.05


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
        #: MultiLock releases to check later: (due, release invoke, multi, name -> token).
        self.pending: list[tuple[float, int, str, dict[str, str | None]]] = []

    def timeout(self) -> float:
        return self.rng.uniform(0.2, 8.0)

    def hold(self) -> float:
        """The critical section's length: a leader's term lasts longer, and so do broken
        readers' holds (a stream of readers that never leaves the name unread, the one a
        waiting writer's place is there to get through)."""
        kind = self.config["kind"]
        longer = kind == "election" or (kind == "rwlock" and self.config["broken"])
        return self.rng.uniform(0, 0.3 if longer else 0.02)

    def record(self, op: str, subject: Subject, **fields: Any) -> None:
        self.history.record(op, mode=subject.mode, multi=subject.multi, **fields)

    def error(self, op: str, invoke: int, subject: Subject, exc: BaseException) -> None:
        kind = type(exc).__name__
        self.record(
            "error",
            subject,
            invoke_ns=invoke,
            name=subject.name,
            during=op,
            error=kind,
            expected=kind in EXPECTED,
            message=str(exc)[:300],
        )

    def warmup_subjects(self) -> list[Subject]:
        """Subjects on names only this actor uses, so that its first recorded acquire does
        not also pay for connecting and loading scripts (on a loaded machine, fifteen
        processes starting at once took over a second: a writer that had not yet reached
        Redis was judged as one that had waited, and the readers that went first as
        starving it)."""
        config = {**self.config, "names": [f"warmup-{self.ident}-{i}" for i in range(3)]}
        return [new_subject(config, self.rng, self.ident) for _ in range(WARMUP_ROUNDS)]

    def begin(self) -> tuple[Subject, int, float]:
        """A new subject, the acquire's invoke time, and its timeout."""
        self._acquire_invoke = now_ns()
        return new_subject(self.config, self.rng, self.ident), self._acquire_invoke, self.timeout()

    def acquired(self, subject: Subject, invoke: int, ok: bool, timeout: float) -> bool:
        complete = now_ns()
        if not ok:
            for name in subject.names():
                self.record(
                    "acquire", subject, invoke_ns=invoke, complete_ns=complete, ok=False,
                    timeout=timeout, name=name,
                )  # fmt: skip
            return False
        for part in subject.parts():
            self.record(
                "acquire",
                subject,
                invoke_ns=invoke,
                complete_ns=complete,
                ok=True,
                timeout=timeout,
                token=part.token,
                fence=part.fence,
                name=part.name,
                validity_ns=lock_validity_ns(part, invoke),
            )
        if isinstance(subject, MultiSubject):
            self.check_parts(subject)
        return True

    def check_parts(self, subject: MultiSubject) -> None:
        invoke = now_ns()
        try:
            held = holding(subject.lock.tokens)
        except Exception:  # Redis down: nothing to say
            return
        missing = [name for name in subject.names() if name not in held]
        self.record("parts", subject, invoke_ns=invoke, missing=missing)

    def critical_section(self, subject: Subject) -> None:
        if not subject.exclusive:
            return
        for part in subject.parts():
            if part.fence is None:  # a broken MultiLock's part it never got
                continue
            resource = self.resources[part.name]
            invoke = now_ns()
            value = resource.fenced_read(part.fence)
            # A read refused as stale: a newer holder has read, this one writes nothing.
            accepted = value is not None and resource.write(value + 1, part.fence, self.ident)
            self.record(
                "write", subject, invoke_ns=invoke, ok=accepted, fence=part.fence, name=part.name
            )

    def before_release(self, subject: Subject) -> list[tuple[int, str | None, int | None]]:
        """Per part: when the release began, its token, its validity then."""
        starts = []
        for part in subject.parts():
            # Renewals may have moved the validity on since the acquire: the last one counts.
            start = now_ns(), part.token, lock_validity_ns(part, self._acquire_invoke)
            # Written before the release is sent: a worker killed after sending it must not
            # look like a holder that still believed (the "release" line comes after).
            invoke, token, validity = start
            self.record(
                "releasing", subject, invoke_ns=invoke, token=token, name=part.name,
                validity_ns=validity,
            )  # fmt: skip
            starts.append(start)
        return starts

    def released(
        self, subject: Subject, starts: list[tuple[int, str | None, int | None]], outcome: str
    ) -> None:
        for part, (invoke, token, validity) in zip(subject.parts(), starts, strict=True):
            self.record(
                "release",
                subject,
                invoke_ns=invoke,
                ok=outcome == "released",
                token=token,
                name=part.name,
                validity_ns=validity,
                outcome=outcome,
            )
        if isinstance(subject, MultiSubject):
            later = 0.0 if outcome == "released" else self.config["ttl"] + LEFTOVER_SLACK
            parts = zip(subject.parts(), starts, strict=True)
            tokens = {part.name: token for part, (_, token, _) in parts}
            self.pending.append((time.monotonic() + later, starts[0][0], subject.multi, tokens))
        self.check_leftovers()

    def check_leftovers(self, wait: bool = False) -> None:
        """Check the MultiLock releases that are due (``wait``: every one, when due)."""
        due, self.pending = self.pending, []
        for when, invoke, multi, tokens in due:
            if when > time.monotonic() and not wait:
                self.pending.append((when, invoke, multi, tokens))
                continue
            time.sleep(max(0.0, when - time.monotonic()))  # only at the end of the run
            try:
                held = holding(tokens)
            except Exception:  # Redis down: nothing to say
                continue
            self.history.record("leftover", invoke_ns=invoke, multi=multi, held=held)

    def release_outcome(self, subject: Subject, starts: list[Any], exc: BaseException) -> str:
        self.error("release", starts[0][0], subject, exc)
        return type(exc).__name__

    # -- sync ------------------------------------------------------------------------------
    def run(self) -> None:
        for subject in self.warmup_subjects():
            with contextlib.suppress(Exception):  # a fault may already be on
                if subject.acquire(1.0):
                    subject.release()
        while time.monotonic() < self.config["deadline"]:
            subject, invoke, timeout = self.begin()
            try:
                ok = subject.acquire(timeout)
            except Exception as exc:  # not one of EXPECTED: a violation
                self.error("acquire", invoke, subject, exc)
                time.sleep(ERROR_PAUSE)
                continue
            if not self.acquired(subject, invoke, ok, timeout):
                continue
            try:
                self.critical_section(subject)
                time.sleep(self.hold())
            finally:
                self.release(subject)
        self.check_leftovers(wait=True)
        self.history.close()

    def release(self, subject: Subject) -> None:
        starts = self.before_release(subject)
        try:
            outcome = subject.release()
        except Exception as exc:
            outcome = self.release_outcome(subject, starts, exc)
        self.released(subject, starts, outcome)

    # -- async -----------------------------------------------------------------------------
    async def arun(self) -> None:
        for subject in self.warmup_subjects():
            with contextlib.suppress(Exception):
                if await subject.aacquire(1.0):
                    await subject.arelease()
        while time.monotonic() < self.config["deadline"]:
            subject, invoke, timeout = self.begin()
            try:
                ok = await subject.aacquire(timeout)
            except Exception as exc:
                self.error("acquire", invoke, subject, exc)
                await asyncio.sleep(ERROR_PAUSE)
                continue
            if not self.acquired(subject, invoke, ok, timeout):
                continue
            try:
                self.critical_section(subject)
                await asyncio.sleep(self.hold())
            finally:
                await self.arelease(subject)
        self.check_leftovers(wait=True)
        self.history.close()

    async def arelease(self, subject: Subject) -> None:
        starts = self.before_release(subject)
        try:
            outcome = await subject.arelease()
        except Exception as exc:
            outcome = self.release_outcome(subject, starts, exc)
        self.released(subject, starts, outcome)


def main(config: dict[str, Any]) -> int:
    setup_django(config)
    if config["broken"] and config["kind"] == "rwlock":
        break_rwlock_readers()
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
