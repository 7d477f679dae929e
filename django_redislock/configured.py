"""``REDISLOCK["CONNECTIONS"]``: servers named in the lock settings, not django-redis aliases.

Names listed in ``REDISLOCK["CONNECTIONS"]`` are not django-redis aliases: they
describe a server of their own, which may be a Redis Cluster (django-redis has
no cluster client) or a Sentinel-managed primary::

    REDISLOCK = {
        "CONNECTION": "locks",
        "CONNECTIONS": {
            "locks": {"URL": "redis://10.0.0.1:6379", "CLUSTER": True},
            "ha": {"SENTINELS": [("10.0.0.5", 26379), ...], "SERVICE_NAME": "mymaster"},
            "plain": {"URL": "redis://10.0.0.9:6379/2"},
        },
    }

``URL`` (a string, or a list of startup-node URLs for a cluster), ``CLUSTER``
(bool), ``SENTINELS`` (``(host, port)`` pairs), ``SERVICE_NAME``, ``DB``,
``SENTINEL_OPTIONS`` (keyword arguments for the connections to the sentinels)
and ``OPTIONS`` (extra redis-py connection keyword arguments: ``password``,
``ssl``...). Every client built here has retries off and the REDISLOCK socket
timeouts, like the ones built from django-redis aliases.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.sentinel
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from .conf import get_config
from .exceptions import LockConfigurationError

#: Keys allowed in one ``REDISLOCK["CONNECTIONS"]`` entry.
CONNECTION_KEYS = frozenset(
    {"URL", "CLUSTER", "SENTINELS", "SERVICE_NAME", "DB", "SENTINEL_OPTIONS", "OPTIONS"}
)


def connections_setting() -> dict[str, Any]:
    """``REDISLOCK["CONNECTIONS"]`` (an empty dict when unset)."""
    value = get_config().get("CONNECTIONS") or {}
    if not isinstance(value, dict):
        raise LockConfigurationError(
            f"REDISLOCK['CONNECTIONS'] must be a dict of name -> options, not {value!r}"
        )
    return value


def configured(name: str) -> dict[str, Any] | None:
    """The ``REDISLOCK["CONNECTIONS"]`` entry called ``name``, validated, or None."""
    entry = connections_setting().get(name)
    if entry is None:
        return None
    problem = connection_problem(name, entry)
    if problem:
        raise LockConfigurationError(problem)
    return entry


def connection_problem(name: str, entry: Any) -> str | None:
    """What is wrong with one CONNECTIONS entry (for the system check too), or None."""
    where = f"REDISLOCK['CONNECTIONS'][{name!r}]"
    if not isinstance(entry, dict):
        return f"{where} must be a dict, not {entry!r}"
    unknown = set(entry) - CONNECTION_KEYS
    if unknown:
        return f"{where} has unknown key(s) {sorted(unknown)}; known: {sorted(CONNECTION_KEYS)}"
    if entry.get("SENTINELS"):
        if entry.get("CLUSTER"):
            return f"{where}: CLUSTER and SENTINELS cannot be combined"
        if not entry.get("SERVICE_NAME"):
            return f"{where}: SENTINELS needs SERVICE_NAME (the monitored primary's name)"
        return None
    url = entry.get("URL")
    urls = url if isinstance(url, (list, tuple)) else [url]
    if not urls or not all(isinstance(u, str) and u for u in urls):
        return f"{where} needs a URL (or a list of URLs for a cluster), or SENTINELS"
    if len(urls) > 1 and not entry.get("CLUSTER"):
        return f"{where}: a list of URLs is only for CLUSTER: True"
    if not isinstance(entry.get("OPTIONS", {}), dict):
        return f"{where}['OPTIONS'] must be a dict of redis-py keyword arguments"
    return None


def _common_kwargs(entry: dict[str, Any]) -> dict[str, Any]:
    config = get_config()
    kwargs = dict(entry.get("OPTIONS") or {})
    kwargs.update(
        socket_timeout=config["SOCKET_TIMEOUT"],
        socket_connect_timeout=config["SOCKET_CONNECT_TIMEOUT"],
        decode_responses=False,
    )
    for name in ("retry", "retry_on_timeout", "retry_on_error"):
        kwargs.pop(name, None)
    return kwargs


def _urls(entry: dict[str, Any]) -> list[str]:
    url = entry["URL"]
    return list(url) if isinstance(url, (list, tuple)) else [url]


def _sentinel_args(entry: dict[str, Any]) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    config = get_config()
    sentinels = [(str(host), int(port)) for host, port in entry["SENTINELS"]]
    sentinel_kwargs = dict(entry.get("SENTINEL_OPTIONS") or {})
    sentinel_kwargs.setdefault("socket_timeout", config["SOCKET_TIMEOUT"])
    sentinel_kwargs.setdefault("socket_connect_timeout", config["SOCKET_CONNECT_TIMEOUT"])
    return sentinels, sentinel_kwargs


class Flavour(NamedTuple):
    """The redis-py classes of one side, sync or asyncio."""

    Redis: Any
    Sentinel: Any
    RedisCluster: Any
    ClusterNode: Any
    Retry: Any


SYNC = Flavour(redis.Redis, redis.sentinel.Sentinel, RedisCluster, ClusterNode, Retry)
ASYNC = Flavour(
    redis.asyncio.Redis,
    redis.asyncio.sentinel.Sentinel,
    redis.asyncio.cluster.RedisCluster,
    redis.asyncio.cluster.ClusterNode,
    redis.asyncio.retry.Retry,
)


def build_configured(name: str, flavour: Flavour) -> Any:
    """A client (sync or asyncio, by ``flavour``) for the CONNECTIONS entry ``name``."""
    entry = configured(name)
    assert entry is not None
    kwargs = _common_kwargs(entry)
    no_retry = flavour.Retry(NoBackoff(), 0)
    if entry.get("SENTINELS"):
        sentinels, sentinel_kwargs = _sentinel_args(entry)
        sentinel = flavour.Sentinel(
            sentinels, sentinel_kwargs=sentinel_kwargs, retry=no_retry, **kwargs
        )
        return sentinel.master_for(entry["SERVICE_NAME"], db=int(entry.get("DB", 0)))
    urls = _urls(entry)
    if entry.get("CLUSTER"):
        others = [redis.connection.parse_url(u) for u in urls[1:]]
        startup = [flavour.ClusterNode(o["host"], o.get("port", 6379)) for o in others]
        try:
            return flavour.RedisCluster.from_url(
                urls[0], startup_nodes=startup or None, retry=no_retry, **kwargs
            )
        except RedisClusterException as exc:  # sync: no startup node answered
            raise redis.ConnectionError(f"cluster {name!r}: {exc}") from exc
    if "DB" in entry:
        kwargs["db"] = int(entry["DB"])
    return flavour.Redis.from_url(urls[0], retry=no_retry, **kwargs)


__all__ = [
    "ASYNC",
    "CONNECTION_KEYS",
    "SYNC",
    "Flavour",
    "build_configured",
    "configured",
    "connection_problem",
    "connections_setting",
]
