"""Redis clients for lock commands, built from the project's django-redis settings.

The lock does not send its commands through django-redis's own client: that
client may retry a command after a lost reply (redis-py's default ``Retry``),
which can turn "acquired" into "not acquired" while the key holds our token, or
hang for many seconds against a frozen server. So we build a process-wide pool
per alias from the same connection settings (host, port, db, password, TLS,
socket path, fakeredis server...) with retries off and our own socket timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import threading
import weakref
from functools import cache
from typing import Any

import redis
import redis.asyncio
from django.core.signals import setting_changed
from django.dispatch import receiver
from redis.backoff import NoBackoff
from redis.retry import Retry

from .conf import get_config
from .exceptions import LockConfigurationError

_lock = threading.Lock()
_sync_clients: dict[str, redis.Redis] = {}
_pid = os.getpid()
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
    if client is not None and _pid == os.getpid():
        return client
    with _lock:
        _check_fork()
        client = _sync_clients.get(alias)
        if client is None:
            source = django_redis_client(alias)
            built = _lock_pool_kwargs(source)
            if built is None:
                client = source
            else:
                connection_class, kwargs = built
                client = redis.Redis(
                    connection_pool=redis.ConnectionPool(
                        connection_class=connection_class, **kwargs
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
    client = per_loop[alias] = _build_async(alias)
    return client


async def _close_at_loop_shutdown(per_loop: dict[str, Any]) -> Any:
    try:
        yield
    finally:
        for alias, client in list(per_loop.items()):
            if alias != "__closer__":
                await client.connection_pool.disconnect()
        per_loop.clear()


def _build_async(alias: str) -> redis.asyncio.Redis:
    source = lock_client(alias)
    pool = source.connection_pool
    connection_class = _async_connection_class(pool.connection_class)
    if connection_class is None:
        raise LockConfigurationError(
            f"Cache {alias!r} uses connection class {pool.connection_class!r}, which has no "
            "asyncio counterpart; async lock methods cannot use it."
        )
    allowed = _init_parameters(connection_class)
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in allowed}
    kwargs["retry"] = redis.asyncio.retry.Retry(NoBackoff(), 0)
    return redis.asyncio.Redis(
        connection_pool=redis.asyncio.ConnectionPool(connection_class=connection_class, **kwargs)
    )


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
    """A sync client for the shared release subscriber: no read timeout."""
    source = lock_client(alias)
    pool = source.connection_pool
    kwargs = dict(pool.connection_kwargs)
    kwargs.update(socket_timeout=None, health_check_interval=0)
    return redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )


def _check_fork() -> None:
    # A forked child must not share the parent's sockets.
    global _pid
    if _pid != os.getpid():
        _sync_clients.clear()
        _async_clients.clear()
        _pid = os.getpid()


def reset_clients() -> None:
    """Forget every cached client (settings changed, or tests)."""
    with _lock:
        for client in _sync_clients.values():
            with contextlib.suppress(Exception):
                client.connection_pool.disconnect()
        _sync_clients.clear()
        _async_clients.clear()


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("CACHES", "REDISLOCK"):
        reset_clients()
