"""Django system checks for the ``REDISLOCK`` settings and the lock server.

Errors ``redislock.E0xx``, warnings ``redislock.W0xx``; messages and hints are
kept together here. The settings are checked offline by every ``manage.py check``; the
lock servers themselves (reachable, eviction policy, persistence) only by
``check --deploy``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from .conf import DEFAULTS, get_config
from .keys import ttl_milliseconds

#: maxmemory policies that may evict a key that has a TTL, i.e. a held lock.
EVICTING_POLICIES = {
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
}


def _alias_problem(alias: Any, what: str, obj: str) -> list[CheckMessage]:
    from .configured import connection_problem

    connections = get_config().get("CONNECTIONS") or {}
    if isinstance(connections, dict) and isinstance(alias, str) and alias in connections:
        problem = connection_problem(alias, connections[alias])
        if problem is None:
            return []
        return [
            Error(
                problem,
                hint="An entry needs URL (a list of URLs for CLUSTER: True), or SENTINELS and "
                "SERVICE_NAME; optional DB, OPTIONS, SENTINEL_OPTIONS.",
                obj="settings.REDISLOCK",
                id="redislock.E006",
            )
        ]
    caches = getattr(settings, "CACHES", {})
    if not isinstance(alias, str) or alias not in caches:
        return [
            Error(
                f"{what} {alias!r} is not a cache alias in settings.CACHES.",
                hint="Add a django-redis cache with that alias, or point "
                f"{what} at an existing one.",
                obj=obj,
                id="redislock.E001",
            )
        ]
    backend = str(caches[alias].get("BACKEND", ""))
    client_class = str(caches[alias].get("OPTIONS", {}).get("CLIENT_CLASS", ""))
    if not backend.startswith("django_redis."):
        return [
            Error(
                f"Cache {alias!r} uses {backend!r}, not django-redis.",
                hint="Locks need BACKEND 'django_redis.cache.RedisCache'.",
                obj=obj,
                id="redislock.E002",
            )
        ]
    if client_class.endswith("ShardClient"):
        return [
            Error(
                f"Cache {alias!r} uses django-redis's ShardClient; a lock key needs one server.",
                hint="Point the lock at a non-sharded django-redis alias.",
                obj=obj,
                id="redislock.E002",
            )
        ]
    return []


def _switch_problem(config: dict[str, Any], key: str, check_id: str) -> list[CheckMessage]:
    """An error unless ``REDISLOCK[key]`` is True or False."""
    value = config[key]
    if isinstance(value, bool):
        return []
    return [
        Error(
            f"REDISLOCK[{key!r}] must be True or False, not {value!r}.",
            obj="settings.REDISLOCK",
            id=f"redislock.{check_id}",
        )
    ]


def _count_problem(
    config: dict[str, Any], key: str, check_id: str, *, unit: str, hint: str
) -> list[CheckMessage]:
    """An error unless ``REDISLOCK[key]`` is an int >= 1 (``True`` is no count)."""
    value = config[key]
    if not isinstance(value, bool) and isinstance(value, int) and value >= 1:
        return []
    return [
        Error(
            f"REDISLOCK[{key!r}] must be {unit} >= 1, not {value!r}.",
            hint=hint,
            obj="settings.REDISLOCK",
            id=f"redislock.{check_id}",
        )
    ]


@register(Tags.caches)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the REDISLOCK dict: aliases, TTL, prefix, Redlock nodes, unknown keys."""
    config = get_config()
    messages: list[CheckMessage] = []
    extra = set(config) - set(DEFAULTS) - {"CONNECTIONS"}
    if extra:
        messages.append(
            Warning(
                f"Unknown REDISLOCK setting(s): {', '.join(sorted(extra))}.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                obj="settings.REDISLOCK",
                id="redislock.W002",
            )
        )
    messages += _alias_problem(
        config["CONNECTION"], "REDISLOCK['CONNECTION']", "settings.REDISLOCK"
    )
    try:
        ttl_milliseconds(config["TTL"], "REDISLOCK['TTL']")
    except ValueError as exc:
        messages.append(
            Error(
                str(exc),
                hint="Use a positive number of seconds, e.g. 30.0.",
                obj="settings.REDISLOCK",
                id="redislock.E003",
            )
        )
    switches = (("REENTRANT", "E008"), ("METRICS", "E010"), ("TRACING", "E010"))
    for switch, check_id in (*switches, ("HISTORY", "E010")):
        messages += _switch_problem(config, switch, check_id)
    messages += _count_problem(
        config,
        "VIEW_UNAVAILABLE_RETRY_AFTER",
        "E009",
        unit="a whole number of seconds",
        hint="It is the Retry-After of lock_view's 503, e.g. 5.",
    )
    messages += _count_problem(
        config,
        "METRICS_FAMILIES",
        "E011",
        unit="a whole number",
        hint="It caps the distinct lock families labelling metrics, e.g. 200.",
    )
    messages += _count_problem(
        config,
        "HISTORY_MAXLEN",
        "E012",
        unit="a whole number",
        hint="It caps the entries of the lock history's stream, e.g. 10000.",
    )
    age = config["HISTORY_MAX_AGE"]
    if isinstance(age, bool) or not isinstance(age, (int, float)) or not age > 0:
        messages.append(
            Error(
                f"REDISLOCK['HISTORY_MAX_AGE'] must be a number of seconds > 0, not {age!r}.",
                hint="Events older than this are trimmed from the history, e.g. 86400.",
                obj="settings.REDISLOCK",
                id="redislock.E013",
            )
        )
    prefix = config["KEY_PREFIX"]
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        messages.append(
            Error(
                f"REDISLOCK['KEY_PREFIX'] {prefix!r} must be a non-empty str without braces.",
                obj="settings.REDISLOCK",
                id="redislock.E005",
            )
        )
    nodes = config["REDLOCK_CONNECTIONS"]
    if nodes:
        if not isinstance(nodes, (list, tuple)) or len(nodes) < 3 or len(nodes) % 2 == 0:
            count = len(nodes) if isinstance(nodes, (list, tuple)) else repr(nodes)
            messages.append(
                Error(
                    f"REDISLOCK['REDLOCK_CONNECTIONS'] has {count} entries; Redlock needs an "
                    "odd number >= 3 of independent nodes.",
                    hint="List 3, 5 or 7 django-redis aliases of independent primaries.",
                    obj="settings.REDISLOCK",
                    id="redislock.E004",
                )
            )
        else:
            for alias in nodes:
                messages += _alias_problem(alias, "Redlock node", "settings.REDISLOCK")
    return messages


def _server_config(client: Any) -> dict[str, str] | None:
    """maxmemory-policy, appendonly and save of one server, or None if CONFIG is refused.

    Managed services (ElastiCache, Memorystore...) often forbid or rename CONFIG:
    then nothing can be checked and nothing is reported.
    """
    values: dict[str, str] = {}
    try:
        for name in ("maxmemory-policy", "appendonly", "save"):
            reply = client.config_get(name)
            for key, value in reply.items():
                key = key.decode() if isinstance(key, bytes) else str(key)
                values[key] = value.decode() if isinstance(value, bytes) else str(value)
    except Exception:
        return None
    return values


@register(Tags.caches, deploy=True)
def check_eviction_policy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when the lock server may evict held locks (W001), worse without persistence (W003).

    ``check --deploy`` only: it asks the server, and plain ``check`` stays offline. A
    cluster is checked on every primary (the first problem found is reported).
    """
    from .connection import scan_clients

    alias = get_config()["CONNECTION"]
    if _alias_problem(alias, "", ""):
        return []  # reported by check_settings
    try:
        clients = scan_clients(alias)
    except Exception:
        return []
    for client in clients:
        values = _server_config(client)
        if values is None:
            continue
        messages = _config_problems(alias, values)
        if messages:
            return messages
    return []


def _config_problems(alias: str, values: dict[str, str]) -> list[CheckMessage]:
    policy = values.get("maxmemory-policy")
    if policy not in EVICTING_POLICIES:
        return []
    obj = f"lock connection {alias!r}"
    messages: list[CheckMessage] = [
        Warning(
            f"The lock server of connection {alias!r} uses maxmemory-policy {policy!r}: under "
            "memory pressure it may evict a held lock, and a second holder gets it.",
            hint="Use 'noeviction' on the lock server (a separate Redis for locks if the "
            "cache needs eviction), and give it enough memory.",
            obj=obj,
            id="redislock.W001",
        )
    ]
    no_aof = values.get("appendonly", "no") == "no"
    no_rdb = not values.get("save", "").strip()
    if no_aof and no_rdb:
        messages.append(
            Warning(
                f"The lock server of connection {alias!r} has no persistence (appendonly no, "
                f"no save points) and evicts keys ({policy!r}): held locks vanish under memory "
                "pressure and on every restart, and the fence counters restart from zero.",
                hint="On the lock server: CONFIG SET maxmemory-policy noeviction; and either "
                "appendonly yes with appendfsync always (every acquire on disk before the "
                "reply), or keep persistence off and delay every restart by the longest lock "
                "TTL. See docs/operations.md.",
                obj=obj,
                id="redislock.W003",
            )
        )
    return messages


@register(Tags.caches)
def check_cache_lock_clients(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A cache with ``CLIENT_CLASS`` ``RedisLockClient`` must be a django-redis cache."""
    from django.utils.module_loading import import_string

    from .compat import CLIENT_CLASS

    messages: list[CheckMessage] = []
    for alias, conf in (getattr(settings, "CACHES", None) or {}).items():
        options = conf.get("OPTIONS") or {}
        if not isinstance(options, dict) or options.get("CLIENT_CLASS") != CLIENT_CLASS:
            continue
        backend = str(conf.get("BACKEND", ""))
        try:
            from django_redis.cache import RedisCache

            ok = issubclass(import_string(backend), RedisCache)
        except ImportError:
            ok = False
        if not ok:
            messages.append(
                Error(
                    f"Cache {alias!r} sets CLIENT_CLASS {CLIENT_CLASS!r}, but its BACKEND "
                    f"{backend!r} is not django-redis's RedisCache (or a subclass): its "
                    "lock() is not this library's (Django's own Redis cache has no lock()).",
                    hint="Use BACKEND 'django_redis.cache.RedisCache' (django-prometheus's "
                    "'django_prometheus.cache.backends.redis.RedisCache' works too), or take "
                    "locks with django_redislock.Lock(name, connection=...).",
                    obj=f"settings.CACHES[{alias!r}]",
                    id="redislock.E007",
                )
            )
    return messages


def lock_connection_aliases() -> list[str]:
    """Every connection the locks are configured to use, once each: ``CONNECTION``, the
    ``CONNECTIONS`` entries, the Redlock nodes, and caches whose ``lock()`` is ours."""
    from .compat import CLIENT_CLASS

    config = get_config()
    aliases: list[str] = [config["CONNECTION"]]
    connections = config.get("CONNECTIONS") or {}
    if isinstance(connections, dict):
        aliases += list(connections)
    nodes = config["REDLOCK_CONNECTIONS"]
    if isinstance(nodes, (list, tuple)):
        aliases += list(nodes)
    for alias, conf in (getattr(settings, "CACHES", None) or {}).items():
        options = conf.get("OPTIONS") or {}
        if isinstance(options, dict) and options.get("CLIENT_CLASS") == CLIENT_CLASS:
            aliases.append(alias)
    return [alias for i, alias in enumerate(aliases) if alias not in aliases[:i]]


def _unreachable(alias: str) -> str | None:
    """Why ``alias``'s server(s) cannot be reached, or ``None`` when each answers PING."""
    from .connection import scan_clients

    try:
        for client in scan_clients(alias):
            client.ping()
    except Exception as exc:
        return " ".join(f"{type(exc).__name__}: {exc}".split())
    return None


@register(Tags.caches, deploy=True)
def check_connections_reachable(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``check --deploy`` only (plain ``check`` stays offline): W010 for each configured
    lock connection that does not answer."""
    messages: list[CheckMessage] = []
    for alias in lock_connection_aliases():
        if not isinstance(alias, str) or _alias_problem(alias, "", ""):
            continue  # reported by check_settings
        problem = _unreachable(alias)
        if problem is not None:
            messages.append(
                Warning(
                    f"Lock connection {alias!r} cannot be reached: {problem}",
                    hint="Start the server, or fix its address in settings. Until then "
                    "lock_view answers 503, lock_command exits 69 and Lock raises "
                    "LockBackendUnavailable.",
                    obj=f"lock connection {alias!r}",
                    id="redislock.W010",
                )
            )
    return messages
