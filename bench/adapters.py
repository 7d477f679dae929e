"""One small adapter per lock library, all with the same interface.

Every adapter wraps one lock name and offers ``acquire(blocking, timeout) -> bool`` and
``release()`` (``timeout=None`` waits forever). Adapters are built from picklable
:class:`Target` descriptions, so the contended scenario can build them again inside
spawned worker processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import select
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis
import redis.asyncio

#: Compare-and-delete used by the raw baseline (the same script every library uses).
RELEASE_LUA = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


class SyncLock(Protocol):
    """What the scenarios drive: a lock on one name."""

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool: ...

    def release(self) -> None: ...


class AsyncLock(Protocol):
    """Async twin of :class:`SyncLock`."""

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool: ...

    async def release(self) -> None: ...


@dataclass(frozen=True)
class Target:
    """Where the peers connect: the single node, the Redlock nodes and Django's settings."""

    url: str
    redlock_urls: tuple[str, ...] = ()
    django_settings: dict[str, Any] = field(default_factory=dict)
    redlock_alias_prefix: str = "node"  # Django aliases of the Redlock nodes: node0, node1…


_CLIENTS: dict[str, redis.Redis] = {}


def client_for(url: str) -> redis.Redis:
    """Return this process's shared client (one connection pool) for ``url``."""
    client = _CLIENTS.get(url)
    if client is None:
        client = _CLIENTS[url] = redis.Redis.from_url(url)
    return client


# --------------------------------------------------------------------------- raw baseline


class RawLock:
    """Bare ``SET key token NX PX`` + ``EVALSHA`` compare-and-delete; spins when blocked."""

    def __init__(self, client: redis.Redis, name: str, ttl: float) -> None:
        self._client = client
        self._key = name
        self._px = int(ttl * 1000)
        self._token: bytes | None = None
        self._sha = client.script_load(RELEASE_LUA)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        token = os.urandom(16)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._client.set(self._key, token, nx=True, px=self._px):
                self._token = token
                return True
            if not blocking or (deadline is not None and time.monotonic() >= deadline):
                return False

    def release(self) -> None:
        if not self._client.evalsha(self._sha, 1, self._key, self._token):
            raise RuntimeError(f"raw lock {self._key!r} was not owned at release")
        self._token = None


class AsyncRawLock:
    """:class:`RawLock` on ``redis.asyncio``."""

    def __init__(self, client: redis.asyncio.Redis, name: str, ttl: float) -> None:
        self._client = client
        self._key = name
        self._px = int(ttl * 1000)
        self._token: bytes | None = None
        self._sha: str | None = None

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if self._sha is None:
            self._sha = await self._client.script_load(RELEASE_LUA)
        token = os.urandom(16)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if await self._client.set(self._key, token, nx=True, px=self._px):
                self._token = token
                return True
            if not blocking or (deadline is not None and time.monotonic() >= deadline):
                return False
            await asyncio.sleep(0)

    async def release(self) -> None:
        assert self._sha is not None
        if not await self._client.evalsha(self._sha, 1, self._key, self._token):
            raise RuntimeError(f"raw lock {self._key!r} was not owned at release")
        self._token = None

    async def aclose(self) -> None:
        """Close the client (it is bound to the running event loop)."""
        await self._client.aclose()


# --------------------------------------------------------------------------- peers


class RedisPyLock:
    """redis-py's ``redis.lock.Lock`` (sleep-polls every ``sleep`` seconds when blocked)."""

    def __init__(self, client: redis.Redis, name: str, ttl: float, sleep: float) -> None:
        self._lock = client.lock(name, timeout=ttl, sleep=sleep)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return bool(self._lock.acquire(blocking=blocking, blocking_timeout=timeout))

    def release(self) -> None:
        self._lock.release()


class PythonRedisLock:
    """python-redis-lock: ``BLPOP`` on a signal list while blocked (integer seconds only)."""

    def __init__(self, client: redis.Redis, name: str, ttl: float) -> None:
        import redis_lock

        self._expire = max(1, math.ceil(ttl))
        self._lock = redis_lock.Lock(client, name, expire=self._expire)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if not blocking:
            return bool(self._lock.acquire(blocking=False))
        if timeout is None:
            return bool(self._lock.acquire(blocking=True))
        # The library takes whole seconds, at least 1 and at most `expire`.
        seconds = min(self._expire, max(1, math.ceil(timeout)))
        return bool(self._lock.acquire(blocking=True, timeout=seconds))

    def release(self) -> None:
        self._lock.release()


class PotteryLock:
    """pottery's ``Redlock`` over one or more nodes (random sleep up to 0.2 s when blocked)."""

    def __init__(self, clients: list[redis.Redis], name: str, ttl: float) -> None:
        from pottery import Redlock

        self._lock = Redlock(key=name, masters=frozenset(clients), auto_release_time=ttl)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        wait = -1 if timeout is None else timeout
        return bool(self._lock.acquire(blocking=blocking, timeout=wait))

    def release(self) -> None:
        self._lock.release()


class SequentialRedlock:
    """The naive Redlock: ``SET NX PX`` on each node one after the other, a majority wins;
    compare-and-delete on each node one after the other. No fences, no clock-drift
    margin, no retry: the reference a parallel Redlock has to beat."""

    def __init__(self, clients: list[redis.Redis], name: str, ttl: float) -> None:
        self._locks = [RawLock(client, name, ttl) for client in clients]
        self._quorum = len(clients) // 2 + 1

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        granted = [lock for lock in self._locks if lock.acquire(blocking=False)]
        if len(granted) >= self._quorum:
            return True
        for lock in granted:
            lock.release()
        return False

    def release(self) -> None:
        for lock in self._locks:
            if lock._token is not None:
                lock.release()


class MajorityFloor:
    """What bounds any 5-node Redlock client here: raw's two commands (``SET NX PX``,
    ``EVALSHA`` compare-and-delete) written to every node at once on one connection each,
    waiting for a majority's replies (``poll``), the rest read when they come. No fences,
    no validity, no clean-up, no thread: the floor, not a lock to use."""

    def __init__(self, clients: list[redis.Redis], name: str, ttl: float) -> None:
        self._conns = [client.connection_pool.get_connection("SET") for client in clients]
        self._sha = clients[0].script_load(RELEASE_LUA)
        for client in clients[1:]:
            client.script_load(RELEASE_LUA)
        self._owed = [0] * len(clients)
        self._key, self._px = name, int(ttl * 1000)
        self._quorum = len(clients) // 2 + 1
        self._token = b""

    def _majority(self, *command: Any) -> list[Any]:
        packed = self._conns[0].pack_command(*command)
        for i, conn in enumerate(self._conns):
            conn.send_packed_command(packed, check_health=False)
            self._owed[i] += 1
        by_fd = {conn._sock.fileno(): i for i, conn in enumerate(self._conns)}
        replies: list[Any] = []
        while len(replies) < self._quorum:
            poller = select.poll()
            for fd, i in by_fd.items():
                if self._owed[i]:
                    poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll():
                i = by_fd[fd]
                reply = self._conns[i].read_response()
                self._owed[i] -= 1
                if self._owed[i] == 0:
                    replies.append(reply)
        return replies

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        self._token = os.urandom(16)
        replies = self._majority("SET", self._key, self._token, "NX", "PX", self._px)
        return sum(1 for reply in replies if reply) >= self._quorum

    def release(self) -> None:
        self._majority("EVALSHA", self._sha, 1, self._key, self._token)


# --------------------------------------------------------------------------- ours


_DJANGO_READY = False


def ours_skip_reason() -> str | None:
    """Why ``django_redislock`` cannot be benchmarked yet, or None when it can."""
    try:
        pass
    except Exception as exc:  # the library may not exist yet, or may be half-written
        return f"`import django_redislock` failed ({type(exc).__name__}: {exc})"
    return ours_feature("Lock")


def ours_feature(attr: str) -> str | None:
    """Why ``django_redislock.<attr>`` is not usable yet, or None when it is."""
    try:
        import django_redislock

        getattr(django_redislock, attr)
    except Exception as exc:  # lazy attributes may raise ImportError, not AttributeError
        return f"`django_redislock.{attr}` is not available yet ({type(exc).__name__}: {exc})"
    return None


def setup_django(settings_dict: dict[str, Any]) -> None:
    """Configure Django once in this process (bench main or a spawned worker)."""
    global _DJANGO_READY
    if _DJANGO_READY:
        return
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(**settings_dict)
    django.setup()
    _DJANGO_READY = True


def django_settings(
    url: str,
    redlock_urls: tuple[str, ...] = (),
    proxy_urls: tuple[str, ...] = (),
    inspect_url: str | None = None,
) -> dict[str, Any]:
    """Settings for ``settings.configure``.

    Alias "default" is the single node, "node<i>" the Redlock nodes, "pnode<i>" the same
    nodes behind the delay proxies and "inspect" the inspection scenario's server.
    """
    caches: dict[str, Any] = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url},
    }
    aliases = []
    for prefix, urls in (("node", redlock_urls), ("pnode", proxy_urls)):
        for index, node_url in enumerate(urls):
            alias = f"{prefix}{index}"
            if prefix == "node":
                aliases.append(alias)
            caches[alias] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": node_url}
    if inspect_url:
        caches["inspect"] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": inspect_url}
    return {
        "INSTALLED_APPS": ["django_redislock"],
        "CACHES": caches,
        "USE_TZ": True,
        "REDISLOCK": {"CONNECTION": "default", "REDLOCK_CONNECTIONS": aliases},
    }


def _ours(target: Target, name: str, ttl: float, redlock: bool) -> Any:
    """A ``django_redislock.Lock``, or a ``Redlock`` over the target's ``<prefix><i>`` aliases."""
    setup_django(target.django_settings)
    import django_redislock

    if redlock:
        prefix = target.redlock_alias_prefix
        aliases = [f"{prefix}{i}" for i in range(len(target.redlock_urls))]
        return django_redislock.Redlock(name, connections=aliases, ttl=ttl)
    return django_redislock.Lock(name, ttl=ttl)


async def time_async_cycles(lock: AsyncLock, key: str, cycles: int, warmup: int) -> float:
    """µs per uncontended ``acquire`` + ``release`` of ``lock``, after ``warmup`` cycles."""
    for _ in range(warmup):
        await lock.acquire(blocking=False)
        await lock.release()
    start = time.perf_counter_ns()
    for _ in range(cycles):
        if not await lock.acquire(blocking=False):
            raise RuntimeError(f"{key}: uncontended acquire failed")
        await lock.release()
    return (time.perf_counter_ns() - start) / cycles / 1000


class OursLock:
    """``django_redislock.Lock`` (or ``Redlock`` over the ``node<i>`` aliases)."""

    def __init__(self, target: Target, name: str, ttl: float, redlock: bool = False) -> None:
        self._lock = _ours(target, name, ttl, redlock)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return bool(self._lock.acquire(blocking=blocking, timeout=timeout))

    def release(self) -> None:
        self._lock.release()


class SemaphoreLock:
    """``django_redislock.Semaphore`` with limit 1 (the mutex's rows, as a semaphore)."""

    def __init__(self, target: Target, name: str, ttl: float) -> None:
        setup_django(target.django_settings)
        import django_redislock

        self._lock = django_redislock.Semaphore(name, 1, ttl=ttl)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return bool(self._lock.acquire(blocking=blocking, timeout=timeout))

    def release(self) -> None:
        self._lock.release()


class ReadWriteSide:
    """One side (``read_lock()`` or ``write_lock()``) of ``django_redislock.ReadWriteLock``."""

    def __init__(self, target: Target, name: str, ttl: float, side: str) -> None:
        setup_django(target.django_settings)
        import django_redislock

        rw = django_redislock.ReadWriteLock(name, ttl=ttl)
        self._lock = rw.read_lock() if side == "read" else rw.write_lock()

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return bool(self._lock.acquire(blocking=blocking, timeout=timeout))

    def release(self) -> None:
        self._lock.release()


class MultiLockPair:
    """``django_redislock.MultiLock`` over two names (``<name>:a``, ``<name>:b``)."""

    def __init__(self, target: Target, name: str, ttl: float) -> None:
        setup_django(target.django_settings)
        import django_redislock

        self._lock = django_redislock.MultiLock([f"{name}:a", f"{name}:b"], ttl=ttl)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return bool(self._lock.acquire(blocking=blocking, timeout=timeout))

    def release(self) -> None:
        self._lock.release()


class ReentryLock:
    """A re-entry of a reentrant ``Lock`` its thread already holds: counted, no round trip."""

    def __init__(self, target: Target, name: str, ttl: float) -> None:
        setup_django(target.django_settings)
        import django_redislock

        # The first entry, held while the row runs (a round's re-entries join it).
        self._outer = django_redislock.Lock(name, ttl=ttl, reentrant=True)
        if not self._outer.acquire(blocking=False):
            raise RuntimeError(f"{name}: the first entry could not be taken")
        self._lock = django_redislock.Lock(name, ttl=ttl, reentrant=True)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return bool(self._lock.acquire(blocking=blocking, timeout=timeout))

    def release(self) -> None:
        self._lock.release()


class SignalledOursLock(OursLock):
    """Ours with a no-op receiver connected to lock_acquired and lock_released.

    The receivers listen to a subclass of ``Lock`` only, so the plain "ours" rows
    still run with nothing connected for their sender.
    """

    def __init__(self, target: Target, name: str, ttl: float) -> None:
        setup_django(target.django_settings)
        import django_redislock
        from django_redislock import signals

        cls = _signalled_lock_class(django_redislock.Lock, signals)
        self._lock = cls(name, ttl=ttl)


class ObservedOursLock(OursLock):
    """Ours with the metrics (``"metrics"``), the traces (``"tracing"``) or the history
    (``"history"``: its flusher thread sends the events every 100 ms) on.

    Each subscribes to the process-wide event stream, so they are switched on only while
    this lock's cycles are timed (:func:`observing`): the other rows of the same process
    run with nothing subscribed. Tracing records every span with the SDK and a batch
    processor whose exporter drops them, so the cost is ours and the SDK's, not an
    exporter's."""

    def __init__(self, target: Target, name: str, ttl: float, what: str) -> None:
        super().__init__(target, name, ttl)
        self._what = what

    def begin(self) -> None:
        if self._what == "history":
            from django_redislock import history

            history.enable()
        elif self._what == "metrics":
            from django_redislock.contrib import prometheus

            prometheus.enable()
        else:
            _install_tracer_provider()
            from django_redislock.contrib import otel

            otel.enable()

    def end(self) -> None:
        if self._what == "history":
            from django_redislock import history

            history.disable()
        elif self._what == "metrics":
            from django_redislock.contrib import prometheus

            prometheus.disable()
        else:
            from django_redislock.contrib import otel

            otel.disable()


def _install_tracer_provider() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)


@contextlib.contextmanager
def observing(lock: Any) -> Iterator[None]:
    """Switch on what ``lock`` measures with (``begin`` / ``end``), if anything."""
    begin = getattr(lock, "begin", None)
    if begin is None:
        yield
        return
    begin()
    try:
        yield
    finally:
        lock.end()


#: The peers that switch something process-wide on while they run (scenario 1 and 2 rows).
OBSERVED_PEERS = ("ours-metrics", "ours-tracing", "ours-history")


_SIGNALLED: list[type] = []


def _noop_receiver(sender: Any, **kwargs: Any) -> None:
    return None


def _signalled_lock_class(base: type, signals: Any) -> type:
    if not _SIGNALLED:
        cls = type("SignalledLock", (base,), {})
        signals.lock_acquired.connect(_noop_receiver, sender=cls)
        signals.lock_released.connect(_noop_receiver, sender=cls)
        _SIGNALLED.append(cls)
    return _SIGNALLED[0]


class AsyncOursLock:
    """``django_redislock.Lock`` (or ``Redlock``) through ``aacquire`` / ``arelease``."""

    def __init__(self, target: Target, name: str, ttl: float, redlock: bool = False) -> None:
        self._lock = _ours(target, name, ttl, redlock)

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return bool(await self._lock.aacquire(blocking=blocking, timeout=timeout))

    async def release(self) -> None:
        await self._lock.arelease()


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Peer:
    """A library under test: its label and how to build a lock on one name."""

    key: str
    label: str
    build: Callable[[Target, str, float], SyncLock]
    skip: Callable[[], str | None] = lambda: None
    #: Its holders exclude each other (not a read lock or a re-entry): it has contended
    #: (scenario 2) and memory (scenario 6) rows, not only scenario 1's.
    exclusive: bool = True


def _optional(module: str) -> Callable[[], str | None]:
    def check() -> str | None:
        try:
            __import__(module)
        except Exception as exc:
            return f"`import {module}` failed ({type(exc).__name__}: {exc})"
        return None

    return check


SYNC_PEERS: dict[str, Peer] = {
    peer.key: peer
    for peer in [
        Peer("raw", "raw SET NX + EVALSHA", lambda t, n, ttl: RawLock(client_for(t.url), n, ttl)),
        Peer(
            "redis-py-0.1",
            "redis-py Lock sleep=0.1",
            lambda t, n, ttl: RedisPyLock(client_for(t.url), n, ttl, 0.1),
        ),
        Peer(
            "redis-py-0.001",
            "redis-py Lock sleep=0.001",
            lambda t, n, ttl: RedisPyLock(client_for(t.url), n, ttl, 0.001),
        ),
        Peer(
            "python-redis-lock",
            "python-redis-lock",
            lambda t, n, ttl: PythonRedisLock(client_for(t.url), n, ttl),
            _optional("redis_lock"),
        ),
        Peer(
            "pottery",
            "pottery Redlock (1 node)",
            lambda t, n, ttl: PotteryLock([client_for(t.url)], n, ttl),
            _optional("pottery"),
        ),
        Peer(
            "ours", "django-redislock Lock", lambda t, n, ttl: OursLock(t, n, ttl), ours_skip_reason
        ),
        Peer(
            "ours-signals",
            "django-redislock Lock, 2 signal receivers",
            lambda t, n, ttl: SignalledOursLock(t, n, ttl),
            ours_skip_reason,
        ),
        Peer(
            "ours-metrics",
            "django-redislock Lock, METRICS on",
            lambda t, n, ttl: ObservedOursLock(t, n, ttl, "metrics"),
            lambda: ours_skip_reason() or _optional("prometheus_client")(),
        ),
        Peer(
            "ours-tracing",
            "django-redislock Lock, TRACING on (SDK, spans dropped)",
            lambda t, n, ttl: ObservedOursLock(t, n, ttl, "tracing"),
            lambda: ours_skip_reason() or _optional("opentelemetry.sdk.trace")(),
        ),
        Peer(
            "ours-history",
            "django-redislock Lock, HISTORY on",
            lambda t, n, ttl: ObservedOursLock(t, n, ttl, "history"),
            ours_skip_reason,
        ),
        Peer(
            "ours-semaphore",
            "django-redislock Semaphore, limit 1",
            lambda t, n, ttl: SemaphoreLock(t, n, ttl),
            ours_skip_reason,
        ),
        Peer(
            "ours-read",
            "django-redislock ReadWriteLock, read_lock()",
            lambda t, n, ttl: ReadWriteSide(t, n, ttl, "read"),
            ours_skip_reason,
            exclusive=False,
        ),
        Peer(
            "ours-write",
            "django-redislock ReadWriteLock, write_lock()",
            lambda t, n, ttl: ReadWriteSide(t, n, ttl, "write"),
            ours_skip_reason,
        ),
        Peer(
            "ours-multilock",
            "django-redislock MultiLock, 2 names",
            lambda t, n, ttl: MultiLockPair(t, n, ttl),
            ours_skip_reason,
            exclusive=False,  # two names of its own: not the contended rows' one name
        ),
        Peer(
            "ours-reentry",
            "django-redislock Lock(reentrant=True), a re-entry (no round trip)",
            lambda t, n, ttl: ReentryLock(t, n, ttl),
            ours_skip_reason,
            exclusive=False,
        ),
    ]
}


def redlock_peers() -> dict[str, Peer]:
    """Peers over the five Redlock nodes (scenario 3)."""

    def ours_redlock_skip() -> str | None:
        return ours_skip_reason() or ours_feature("Redlock")

    return {
        "raw-node0": Peer(
            "raw-node0",
            "raw SET NX + EVALSHA, node 0 alone (one round trip each)",
            lambda t, n, ttl: RawLock(client_for(t.redlock_urls[0]), n, ttl),
        ),
        "sequential-5": Peer(
            "sequential-5",
            "sequential reference (5 nodes, one after the other)",
            lambda t, n, ttl: SequentialRedlock([client_for(u) for u in t.redlock_urls], n, ttl),
        ),
        "floor-5": Peer(
            "floor-5",
            "majority floor (raw's commands to 5 nodes at once, wait for 3; not a lock)",
            lambda t, n, ttl: MajorityFloor([client_for(u) for u in t.redlock_urls], n, ttl),
        ),
        "pottery-5": Peer(
            "pottery-5",
            "pottery Redlock (5 nodes)",
            lambda t, n, ttl: PotteryLock([client_for(u) for u in t.redlock_urls], n, ttl),
            _optional("pottery"),
        ),
        "ours-redlock-5": Peer(
            "ours-redlock-5",
            "django-redislock Redlock (5 nodes)",
            lambda t, n, ttl: OursLock(t, n, ttl, redlock=True),
            ours_redlock_skip,
        ),
    }


@dataclass(frozen=True)
class AsyncPeer:
    """An async library under test."""

    key: str
    label: str
    build: Callable[[Target, str, float], AsyncLock]
    skip: Callable[[], str | None] = lambda: None


def _async_raw(target: Target, name: str, ttl: float) -> AsyncLock:
    return AsyncRawLock(redis.asyncio.Redis.from_url(target.url), name, ttl)


ASYNC_PEERS: dict[str, AsyncPeer] = {
    "raw-async": AsyncPeer("raw-async", "raw (redis.asyncio)", _async_raw),
    "ours-async": AsyncPeer(
        "ours-async",
        "django-redislock aacquire/arelease",
        lambda t, n, ttl: AsyncOursLock(t, n, ttl),
        ours_skip_reason,
    ),
}


def redlock_async_peers() -> dict[str, AsyncPeer]:
    """Async peers over the five Redlock nodes (scenario 3)."""
    return {
        "ours-redlock-5-async": AsyncPeer(
            "ours-redlock-5-async",
            "django-redislock Redlock, aacquire/arelease (5 nodes)",
            lambda t, n, ttl: AsyncOursLock(t, n, ttl, redlock=True),
            lambda: ours_skip_reason() or ours_feature("Redlock"),
        ),
    }
