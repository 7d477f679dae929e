"""What a soak actor locks: one object per kind, behind one small surface.

A subject is made fresh for each round (a new Election candidate campaigns for one term).
``parts()`` are the lock objects whose ``name``, ``token``, ``fence`` and
``valid_until`` the history records: one for most kinds, one per name for a MultiLock,
the term's lease for an Election.

Each kind has a deliberately broken variant (``broken=True``) that the checkers must
catch, each with one protection switched off:

- Lock, Redlock: release is a raw ``DEL`` with no token check (on every node of a Redlock),
  so a holder that lost its lock deletes the next one's;
- Semaphore: asks for one permit more than the name's limit;
- ReadWriteLock: readers ignore writers (the acquire script less its writer checks), so
  they go in beside a writer and ahead of waiting writers;
- MultiLock: takes the first part, tries the others without caring whether it got them,
  and releases only the first part;
- Election: resigns by a raw ``DEL`` of the lease and of the term counter.
"""

from __future__ import annotations

import random
from importlib import resources
from typing import Any

from django_redislock import wakeups
from tests.soak.checks import SEMAPHORE_LIMITS

#: release.lua less its token check (KEYS: key, metadata[, fence]; ARGV: channel).
BROKEN_RELEASE = f"""
local deleted = redis.call('DEL', unpack(KEYS))
redis.call('PUBLISH', ARGV[1], '{wakeups.FREED_OUT_OF_TURN}')
return deleted > 0 and 1 or 0
"""

#: Kinds whose holders hold alone (and so do the fenced read-modify-write).
EXCLUSIVE = ("lock", "redlock", "multilock", "election")


def raw_delete(lock: Any, *keys: str) -> bool:
    """``BROKEN_RELEASE`` on ``keys`` of every server of ``lock``: whoever holds them."""
    from django_redislock.connection import lock_client

    aliases = getattr(lock, "connections", None) or [lock.connection]
    deleted = sum(
        lock_client(alias).eval(BROKEN_RELEASE, len(keys), *keys, lock.keys.channel)
        for alias in aliases
    )
    lock.token = None
    return bool(deleted)


def break_rwlock_readers() -> None:
    """Switch off writer exclusion and writer preference for this process's readers."""
    from django_redislock import scripts
    from django_redislock.kinds import rwlock

    source = resources.files(scripts).joinpath("rwlock_acquire.lua").read_text("utf-8")
    start = source.index("if mode == 'r' then")
    end = source.index("else", start)
    broken = source[:start] + "if mode == 'r' then\n" + source[end:]
    rwlock.RWLOCK_ACQUIRE = scripts.Script("rwlock_acquire_broken", source=broken)


class Subject:
    """One lock of the plain kinds (Lock, Redlock, Semaphore, a read-write lock's side)."""

    #: "read" or "write" for a side of a read-write lock.
    mode: str | None = None
    #: The MultiLock's names together, on the lines of its parts.
    multi: str | None = None

    def __init__(self, lock: Any, *, exclusive: bool, broken_release: bool) -> None:
        self.lock = lock
        self.exclusive = exclusive
        self.broken_release = broken_release

    @property
    def name(self) -> str:
        return self.lock.name

    def names(self) -> list[str]:
        """The names a round of this subject asks for."""
        return [self.lock.name]

    def parts(self) -> list[Any]:
        return [self.lock]

    def acquire(self, timeout: float) -> bool:
        return self.lock.acquire(timeout=timeout)

    async def aacquire(self, timeout: float) -> bool:
        return await self.lock.aacquire(timeout=timeout)

    def release(self) -> str:
        """The outcome: "released" (or "nothing" for a broken release that found none)."""
        if self.broken_release:
            keys = self.lock.keys
            return "released" if raw_delete(self.lock, keys.key, keys.meta) else "nothing"
        self.lock.release()
        return "released"

    async def arelease(self) -> str:
        if self.broken_release:
            return self.release()
        await self.lock.arelease()
        return "released"


class MultiSubject(Subject):
    """A MultiLock over 2-3 of the plain Lock names (shared with the Lock workers)."""

    def __init__(self, lock: Any, *, broken: bool) -> None:
        super().__init__(lock, exclusive=True, broken_release=False)
        self.broken = broken
        self.multi = lock.name

    def names(self) -> list[str]:
        return [part.name for part in self.lock.parts]

    def parts(self) -> list[Any]:
        return list(self.lock.parts)

    def acquire(self, timeout: float) -> bool:
        if not self.broken:
            return self.lock.acquire(timeout=timeout)
        first, *others = self.lock.parts
        if not first.acquire(timeout=timeout):
            return False
        for part in others:
            part.acquire(blocking=False)  # broken: whether it got them or not
        return True

    async def aacquire(self, timeout: float) -> bool:
        if not self.broken:
            return await self.lock.aacquire(timeout=timeout)
        first, *others = self.lock.parts
        if not await first.aacquire(timeout=timeout):
            return False
        for part in others:
            await part.aacquire(blocking=False)
        return True

    def release(self) -> str:
        if self.broken:
            self.lock.parts[0].release()  # broken: the other parts stay held
            return "released"
        self.lock.release()
        return "released"

    async def arelease(self) -> str:
        if self.broken:
            await self.lock.parts[0].arelease()
            return "released"
        await self.lock.arelease()
        return "released"


class Candidate(Subject):
    """An Election candidate: each round campaigns for a term and resigns it."""

    def __init__(self, election: Any, *, broken: bool) -> None:
        super().__init__(election, exclusive=True, broken_release=broken)

    def parts(self) -> list[Any]:
        return [self.lock._lock]  # this term's lease: its fence is the term

    def acquire(self, timeout: float) -> bool:
        return self.lock.campaign(timeout=timeout)

    async def aacquire(self, timeout: float) -> bool:
        return await self.lock.acampaign(timeout=timeout)

    def release(self) -> str:
        if self.broken_release:
            lease = self.lock._lock
            keys = lease.keys
            return "released" if raw_delete(lease, keys.key, keys.meta, keys.fence) else "nothing"
        self.lock.resign()
        return "released"

    async def arelease(self) -> str:
        if self.broken_release:
            return self.release()
        await self.lock.aresign()
        return "released"


def new_subject(config: dict[str, Any], rng: random.Random, ident: str) -> Subject:
    """A fresh subject of the worker's kind on one of its names, watchdog or not at random."""
    from django_redislock import Election, Lock, MultiLock, ReadWriteLock, Redlock, Semaphore

    kind, broken, ttl = config["kind"], config["broken"], config["ttl"]
    name = rng.choice(config["names"])
    watchdog = rng.random() < 0.5
    if kind == "redlock":
        lock = Redlock(name, ttl=ttl, watchdog=watchdog, node_timeout=0.5)
        return Subject(lock, exclusive=True, broken_release=broken)
    if kind == "semaphore":
        limit = SEMAPHORE_LIMITS.get(name, 2) + (1 if broken else 0)  # 2: a warm-up name
        lock = Semaphore(name, limit, connection="lock", ttl=ttl, watchdog=watchdog)
        return Subject(lock, exclusive=False, broken_release=False)
    if kind == "rwlock":
        rw = ReadWriteLock(name, connection="lock", ttl=ttl, watchdog=watchdog)
        writer = rng.random() < 0.3
        subject = Subject(
            rw.write_lock() if writer else rw.read_lock(), exclusive=writer, broken_release=False
        )
        subject.mode = "write" if writer else "read"
        return subject
    if kind == "multilock":
        names = rng.sample(config["names"], rng.choice((2, 3)))
        lock = MultiLock(names, connection="lock", ttl=ttl, watchdog=watchdog)
        return MultiSubject(lock, broken=broken)
    if kind == "election":
        election = Election(name, connection="lock", ttl=ttl, identity=ident)
        return Candidate(election, broken=broken)
    return Subject(
        Lock(name, connection="lock", ttl=ttl, watchdog=watchdog),
        exclusive=True,
        broken_release=broken,
    )


def holding(tokens: dict[str, str | None]) -> list[str]:
    """The names (plain Lock names) whose key holds ``tokens[name]`` now (a raw read)."""
    from django_redislock.connection import lock_client
    from django_redislock.registry import kind

    client = lock_client("lock")
    out = []
    for name, token in tokens.items():
        value = client.get(kind().keys(name).key)  # token RS fence RS holder, or the token
        if isinstance(value, bytes):
            value = value.decode()
        if value is not None and token == value.partition("\x1e")[0]:
            out.append(name)
    return out
