"""The ``REDISLOCK`` settings dict, merged over defaults.

Read through :func:`get_config` (cached, cleared on Django's ``setting_changed``)
so ``override_settings`` works and nothing is read at import time.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    # django-redis cache alias (or a name in CONNECTIONS) the locks use.
    "CONNECTION": "default",
    # Every key starts with this; one lock keeps all its keys in one hash slot.
    "KEY_PREFIX": "redislock",
    # Seconds a lock lives unless extended. Never infinite.
    "TTL": 30.0,
    # Keep extending the TTL while the holder lives.
    "WATCHDOG": False,
    # django-redis aliases of independent primaries for Redlock (odd count >= 3).
    "REDLOCK_CONNECTIONS": [],
    # Socket timeouts of the lock's own connections (seconds). A lock command
    # must fail fast against a frozen server rather than hang.
    "SOCKET_TIMEOUT": 5.0,
    "SOCKET_CONNECT_TIMEOUT": 2.0,
    # Connections per process (and per event loop) for lock commands; more
    # concurrent callers wait for a free one, up to SOCKET_TIMEOUT.
    "MAX_CONNECTIONS": 100,
    # Wake waiters through pub/sub on release; False = jittered backoff only.
    "PUBSUB_WAKEUP": True,
    # Inside transaction.atomic(), release only when the transaction ends
    # (on commit, or at once on rollback). False releases at the end of the block.
    "RELEASE_AFTER_COMMIT": True,
    # Lock connections that are not django-redis aliases (Cluster, Sentinel, URL):
    # {"name": {"URL": ..., "CLUSTER": True, ...}}; see docs/operations.md.
    "CONNECTIONS": {},
    # Default ``reentrant`` of Lock and the decorators: a re-acquire by the owner that
    # holds the name (same thread, or same asyncio task) counts instead of waiting.
    "REENTRANT": False,
    # Dotted path of a default ``on_busy(request, info)`` for lock_view.
    "VIEW_ON_BUSY": None,
    # Dotted path of a default ``on_unavailable(request, error)`` for lock_view (the lock
    # server cannot be reached); None answers 503.
    "VIEW_ON_UNAVAILABLE": None,
    # The Retry-After (whole seconds) of lock_view's default 503.
    "VIEW_UNAVAILABLE_RETRY_AFTER": 5,
    # Prometheus metrics of every lock (django_redislock.contrib.prometheus, the
    # "prometheus" extra). Off: nothing imported, nothing measured.
    "METRICS": False,
    # OpenTelemetry spans of every acquire and hold (django_redislock.contrib.otel, the
    # "otel" extra). Off: nothing imported, nothing measured.
    "TRACING": False,
    # Distinct lock families (metric label values) per process; past it, "other".
    "METRICS_FAMILIES": 200,
    # The lock history (django_redislock.history): every lock event, sent by a background
    # flusher to one capped stream per connection, read by lock_history() and the admin.
    "HISTORY": False,
    # Entries the history stream keeps (trimmed with MAXLEN ~: about this many).
    "HISTORY_MAXLEN": 10_000,
    # Seconds an event is kept at most (older ones are trimmed with each batch).
    "HISTORY_MAX_AGE": 24 * 3600,
}


@lru_cache(maxsize=1)
def get_config() -> dict[str, Any]:
    """Return the effective settings: ``settings.REDISLOCK`` merged over :data:`DEFAULTS`."""
    user = getattr(settings, "REDISLOCK", None) or {}
    config = dict(DEFAULTS)
    config.update(user)
    return config


@receiver(setting_changed)
def _clear_config(*, setting: str, **kwargs: Any) -> None:
    if setting == "REDISLOCK":
        get_config.cache_clear()
