"""The Django site of scenario 7, served by gunicorn: settings and URLs in one module.

``DJANGO_SETTINGS_MODULE=bench.site``, ``BENCH_REDIS_URL`` names the server. Four views do
the same 2 ms read-modify-write of a Redis counter under a different lock:

- ``/cache-lock/``: django-redis's ``cache.lock()`` (redis-py's Lock, 0.1 s sleep-poll);
- ``/cache-lock-switched/``: the same code on a cache with ``RedisLockClient``;
- ``/lock-view/``: ``lock_view``;
- ``/no-lock/``: no lock at all (the baseline that loses updates).

Each adds the time it held the lock to ``<counter>:busy_us``: the share of the serial limit
is that time over the wall time of the run.
"""

import os
import time

from django.core.cache import caches
from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_redislock import lock_view

_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

SECRET_KEY = "bench-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["django_redislock"]
ROOT_URLCONF = "bench.site"
USE_TZ = True
CACHES = {
    "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": _URL},
    "switched": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": _URL,
        "OPTIONS": {"CLIENT_CLASS": "django_redislock.compat.RedisLockClient"},
    },
}
REDISLOCK = {"CONNECTION": "default"}
HOLD = 0.002


def _section(counter: str) -> HttpResponse:
    """The critical section: read, 2 ms of work, write back; its length is recorded."""
    from django_redis import get_redis_connection

    redis = get_redis_connection("default")
    started = time.perf_counter()
    value = int(redis.get(counter) or 0)
    time.sleep(HOLD)
    redis.set(counter, value + 1)
    held_us = int((time.perf_counter() - started) * 1e6)
    redis.incrby(f"{counter}:busy_us", held_us)
    return HttpResponse(str(value + 1))


def cache_lock(request: HttpRequest) -> HttpResponse:
    with caches["default"].lock("bench-s7-cache", timeout=10, blocking_timeout=60):
        return _section("bench-s7:cache-lock")


def cache_lock_switched(request: HttpRequest) -> HttpResponse:
    with caches["switched"].lock("bench-s7-switched", timeout=10, blocking_timeout=60):
        return _section("bench-s7:cache-lock-switched")


@lock_view("bench-s7-view", ttl=10, timeout=60)
def locked_view(request: HttpRequest) -> HttpResponse:
    return _section("bench-s7:lock-view")


def no_lock(request: HttpRequest) -> HttpResponse:
    return _section("bench-s7:no-lock")


urlpatterns = [
    path("cache-lock/", cache_lock),
    path("cache-lock-switched/", cache_lock_switched),
    path("lock-view/", locked_view),
    path("no-lock/", no_lock),
]
