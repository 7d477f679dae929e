"""Redis clients for lock commands, built from the project's django-redis settings.

The lock does not send its commands through django-redis's own client: that
client may retry a command after a lost reply (redis-py's default ``Retry``),
which can turn "acquired" into "not acquired" while the key holds our token, or
hang for many seconds against a frozen server. So we build a process-wide pool
per alias from the same connection settings (host, port, db, password, TLS,
socket path, fakeredis server...) with retries off and our own socket timeouts.

Names listed in ``REDISLOCK["CONNECTIONS"]`` describe a server of their own
(:mod:`django_redislock.configured`): a plain server, a Redis Cluster or a
Sentinel-managed primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import random
import threading
import weakref
from collections.abc import Callable
from functools import cache
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.sentinel
from django.core.signals import setting_changed
from django.dispatch import receiver
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from . import leases
from .conf import get_config
from .configured import ASYNC, SYNC, build_configured, configured
from .exceptions import LockConfigurationError

_lock = threading.Lock()
_sync_clients: dict[str, redis.Redis] = {}
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
    weakref.WeakKeyDictionary()
)


def django_redis_client(alias: str) -> redis.Redis:
    """The django-redis client of cache ``alias`` (primary), or a clear error."""
    from django.conf import settings
    from django.core.cache import caches

    if alias not in getattr(settings, "CACHES", {}):
        raise LockConfigurationError(
            f"Lock connection {alias!r} is not a cache alias in settings.CACHES "
            f"(set REDISLOCK['CONNECTION'] or pass connection=...)."
        )
    backend = caches[alias]
    client = getattr(backend, "client", None)
    if client is None or not hasattr(client, "get_client"):
        raise LockConfigurationError(
            f"Cache {alias!r} ({type(backend).__module__}.{type(backend).__name__}) is not a "
            "django-redis cache; locks need django_redis.cache.RedisCache."
        )
    if type(client).__name__ == "ShardClient":
        raise LockConfigurationError(
            f"Cache {alias!r} uses django-redis's ShardClient: a sharded client has no single "
            "server for a lock key. Point the lock at a non-sharded alias."
        )
    return client.get_client(write=True)


def _lock_pool_kwargs(source: redis.Redis) -> tuple[type, dict[str, Any]] | None:
    """Connection class and kwargs for our own pool, or None to use ``source`` as is."""
    pool = source.connection_pool
    if type(pool) is not redis.ConnectionPool and not isinstance(
        pool, redis.BlockingConnectionPool
    ):
        # Sentinel and other custom pools pick their server themselves: keep them.
        return None
    config = get_config()
    kwargs = dict(pool.connection_kwargs)
    kwargs.update(
        socket_timeout=config["SOCKET_TIMEOUT"],
        socket_connect_timeout=config["SOCKET_CONNECT_TIMEOUT"],
        retry=Retry(NoBackoff(), 0),
        decode_responses=False,
    )
    kwargs.pop("retry_on_timeout", None)
    kwargs.pop("retry_on_error", None)
    return pool.connection_class, kwargs


def lock_client(alias: str) -> redis.Redis:
    """The process-wide sync client for lock commands on ``alias``."""
    client = _sync_clients.get(alias)
    if client is not None:
        return client
    with _lock:
        client = _sync_clients.get(alias)
        if client is None and configured(alias) is not None:
            client = _sync_clients[alias] = build_configured(alias, SYNC)
        if client is None:
            source = django_redis_client(alias)
            built = _lock_pool_kwargs(source)
            if built is None:
                client = source
            else:
                connection_class, kwargs = built
                # Blocking: past MAX_CONNECTIONS a caller waits for a free
                # connection (up to SOCKET_TIMEOUT) instead of failing at once.
                config = get_config()
                client = redis.Redis(
                    connection_pool=redis.BlockingConnectionPool(
                        connection_class=connection_class,
                        max_connections=config["MAX_CONNECTIONS"],
                        timeout=config["SOCKET_TIMEOUT"],
                        **kwargs,
                    )
                )
            _sync_clients[alias] = client
        return client


async def async_lock_client(alias: str) -> redis.asyncio.Redis:
    """The client for lock commands on ``alias`` in the running event loop.

    Clients are closed when the loop shuts down its async generators (what
    ``asyncio.run`` and ``asyncio.Runner`` do before closing the loop), so a
    short-lived loop leaves no connection behind.
    """
    loop = asyncio.get_running_loop()
    per_loop = _async_clients.get(loop)
    if per_loop is not None:
        client = per_loop.get(alias)
        if client is not None:
            return client
    else:
        per_loop = _async_clients[loop] = {}
        closer = _close_at_loop_shutdown(per_loop)
        per_loop["__closer__"] = closer
        await closer.__anext__()  # registered with the loop's async generators
    client = per_loop[alias] = (
        build_configured(alias, ASYNC) if configured(alias) is not None else _build_async(alias)
    )
    return client


async def async_node_client(alias: str, host: str, port: int) -> redis.asyncio.Redis:
    """A plain asyncio client on one node of cluster ``alias`` (same options, this loop).

    For commands that must share one connection with the write before them
    (``WAIT``), which the cluster client cannot pin.
    """
    cluster = await async_lock_client(alias)
    per_loop = _async_clients[asyncio.get_running_loop()]
    name = f"{alias}@{host}:{port}"
    client = per_loop.get(name)
    if client is None:
        import redis.asyncio.connection as aconn

        manager: Any = cluster.nodes_manager  # type: ignore[attr-defined]
        connection_class = manager.connection_kwargs.get("connection_class", aconn.Connection)
        allowed = _init_parameters(connection_class) - {"redis_connect_func"}
        kwargs = {k: v for k, v in manager.connection_kwargs.items() if k in allowed}
        kwargs.update(host=host, port=port, retry=redis.asyncio.retry.Retry(NoBackoff(), 0))
        client = per_loop[name] = redis.asyncio.Redis(
            connection_pool=redis.asyncio.ConnectionPool(
                connection_class=connection_class, **kwargs
            )
        )
    return client


async def _close_at_loop_shutdown(per_loop: dict[str, Any]) -> Any:
    try:
        yield
    finally:
        for alias, client in list(per_loop.items()):
            if alias != "__closer__":
                with contextlib.suppress(Exception):
                    await _aclose(client)
        per_loop.clear()


async def _aclose(client: Any, *, idle_only: bool = False) -> None:
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        await leases.release_kept(pool)  # idle, though checked out: closed with the idle
        await pool.disconnect(inuse_connections=not idle_only)
        manager = getattr(pool, "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            await sentinel.aclose()
    else:  # the asyncio RedisCluster has no single pool
        await client.aclose()


def _build_async(alias: str) -> redis.asyncio.Redis:
    source = lock_client(alias)
    pool = source.connection_pool
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        return _async_sentinel_like(pool)
    connection_class = _async_connection_class(pool.connection_class)
    if connection_class is None:
        raise LockConfigurationError(
            f"Cache {alias!r} uses connection class {pool.connection_class!r}, which has no "
            "asyncio counterpart; async lock methods cannot use it."
        )
    allowed = _init_parameters(connection_class)
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in allowed}
    kwargs["retry"] = redis.asyncio.retry.Retry(NoBackoff(), 0)
    config = get_config()
    return redis.asyncio.Redis(
        connection_pool=redis.asyncio.BlockingConnectionPool(
            connection_class=connection_class,
            max_connections=config["MAX_CONNECTIONS"],
            timeout=config["SOCKET_TIMEOUT"],
            **kwargs,
        )
    )


def _async_sentinel_like(pool: redis.sentinel.SentinelConnectionPool) -> Any:
    """An asyncio Sentinel client with the sentinels and options of a sync Sentinel pool."""
    import redis.asyncio.connection as aconn

    client_parameters = set(inspect.signature(redis.asyncio.Redis.__init__).parameters)
    allowed = (_init_parameters(aconn.Connection) & client_parameters) - {
        "host",
        "port",
        "connection_pool",
    }
    sentinels, sentinel_kwargs = [], {}
    for sentinel in pool.sentinel_manager.sentinels:
        options = sentinel.connection_pool.connection_kwargs
        sentinels.append((options["host"], options["port"]))
        sentinel_kwargs = {k: v for k, v in options.items() if k in allowed}
    config = get_config()
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in allowed}
    kwargs.update(
        socket_timeout=config["SOCKET_TIMEOUT"],
        socket_connect_timeout=config["SOCKET_CONNECT_TIMEOUT"],
        retry=redis.asyncio.retry.Retry(NoBackoff(), 0),
    )
    kwargs.pop("retry_on_timeout", None)
    kwargs.pop("retry_on_error", None)
    sentinel_kwargs.pop("retry", None)
    manager = redis.asyncio.sentinel.Sentinel(sentinels, sentinel_kwargs=sentinel_kwargs, **kwargs)
    return manager.master_for(pool.service_name)


def _async_connection_class(sync_class: type) -> type | None:
    import redis.asyncio.connection as aconn
    import redis.connection as conn

    if issubclass(sync_class, conn.UnixDomainSocketConnection):
        return aconn.UnixDomainSocketConnection
    if issubclass(sync_class, conn.SSLConnection):
        return aconn.SSLConnection
    if sync_class.__module__.startswith("fakeredis"):
        import fakeredis.aioredis

        return getattr(fakeredis.aioredis, "FakeAsyncRedisConnection", None) or getattr(
            fakeredis.aioredis, "FakeConnection", None
        )
    if issubclass(sync_class, conn.Connection):
        return aconn.Connection
    return None


@cache
def _init_parameters(cls: type) -> frozenset[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names.update(
                p.name
                for p in inspect.signature(init).parameters.values()
                if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
            )
    names.discard("parser_class")  # a sync parser does not work with asyncio
    return frozenset(names)


def pubsub_client(alias: str) -> redis.Redis:
    """A sync client for the shared release subscriber: no read timeout.

    For a cluster, a plain client on one primary picked at random: a PUBLISH
    (also one run by a script) reaches every node over the cluster bus, so any
    node hears every release. If that node goes away the subscriber reconnects
    through here and picks again.
    """
    source = lock_client(alias)
    if isinstance(source, RedisCluster):
        node = random.choice(source.get_primaries() or source.get_nodes())
        source = source.get_redis_connection(node)
    pool = source.connection_pool
    kwargs = dict(pool.connection_kwargs)
    kwargs.pop("redis_connect_func", None)
    kwargs.update(socket_timeout=None, health_check_interval=0)
    return redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )


def scan_clients(alias: str) -> list[redis.Redis]:
    """The clients to SCAN for held locks: every primary of a cluster, else the one client."""
    client = lock_client(alias)
    if isinstance(client, RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def is_cluster(client: Any) -> bool:
    """True for a sync or asyncio ``RedisCluster``."""
    return isinstance(client, (RedisCluster, redis.asyncio.cluster.RedisCluster))


#: What a forked child inherited from its parent's event loops, kept and never used:
#: collecting it would close the parent's sockets through the epoll instance both
#: processes share (the parent's loop would stop hearing from them) and warn about
#: unclosed connections. The child's copies of their socket descriptors are closed.
inherited: list[Any] = []


def park_inherited(obj: Any) -> None:
    """Keep ``obj`` (from the parent's event loops) out of a forked child's GC."""
    inherited.append(obj)


def _close_inherited_sockets(client: Any) -> None:
    # Only the child's descriptor: the parent's socket stays open (no shutdown()).
    pool = getattr(client, "connection_pool", None)
    for attr in ("_available_connections", "_in_use_connections"):
        for conn in list(getattr(pool, attr, ()) or ()):
            writer = getattr(conn, "_writer", None)
            sock = writer.get_extra_info("socket") if writer is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    os.close(sock.fileno())


def _forget_after_fork() -> None:
    # A forked child must not share the parent's sockets (nor a lock a parent
    # thread held while forking): it builds its own clients on first use.
    global _lock
    _lock = threading.Lock()
    _sync_clients.clear()  # redis-py's sync connections check the pid themselves
    for per_loop in _async_clients.values():
        for client in per_loop.values():
            _close_inherited_sockets(client)
        park_inherited(per_loop)
    _async_clients.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


#: Called after :func:`reset_clients` (modules with connections of their own).
_reset_hooks: list[Callable[[], None]] = []


def on_reset(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever the cached clients are dropped (settings changed)."""
    _reset_hooks.append(hook)


def reset_clients() -> None:
    """Forget every cached client (settings changed, or tests)."""
    for hook in _reset_hooks:
        hook()
    with _lock:
        for client in _sync_clients.values():
            with contextlib.suppress(Exception):
                if isinstance(client, RedisCluster):
                    client.close()
                else:
                    client.connection_pool.disconnect()
                    manager = getattr(client.connection_pool, "sentinel_manager", None)
                    for sentinel in getattr(manager, "sentinels", ()):
                        sentinel.close()
        _sync_clients.clear()
        for loop, per_loop in list(_async_clients.items()):
            clients = [c for alias, c in per_loop.items() if alias != "__closer__"]
            per_loop.clear()  # the loop-shutdown closer has nothing left to close
            _close_on_loop(loop, clients)
        _async_clients.clear()


def _close_on_loop(loop: asyncio.AbstractEventLoop, clients: list[Any]) -> None:
    """Close dropped asyncio clients on the loop that owns them, as soon as it runs.

    Idle connections are closed now; a connection still running a lock command
    is closed when that command hands it back (:func:`leases.retire`), so a call
    in flight across a settings change finishes rather than fails.
    """
    for client in clients:
        leases.retire(client)
    if not clients or loop.is_closed():
        return

    async def close() -> None:
        for client in clients:
            with contextlib.suppress(Exception):
                await _aclose(client, idle_only=True)

    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        leases.keep(asyncio.run_coroutine_threadsafe(close(), loop))


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("CACHES", "REDISLOCK"):
        reset_clients()
