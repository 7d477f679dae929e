"""A Django site for ``gunicorn -k gevent``: settings and URLs in one module.

``DJANGO_SETTINGS_MODULE=tests.support.green_site`` and the application
``django.core.wsgi:get_wsgi_application()``. Two views do the same read-modify-write of a
Redis counter with a cooperative pause in the middle, one under ``lock_view``, one not.
"""

import time

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_redislock import lock_view
from tests.support.settings import *  # noqa: F403

ROOT_URLCONF = "tests.support.green_site"
COUNTER = "green-site:counter"


def _increment() -> int:
    from django_redis import get_redis_connection

    redis = get_redis_connection("default")
    value = int(redis.get(COUNTER) or 0)
    time.sleep(0.002)  # another request's greenlet runs here
    redis.set(COUNTER, value + 1)
    return value + 1


@lock_view("green-site-counter", timeout=60)
def locked(request: HttpRequest) -> HttpResponse:
    return HttpResponse(str(_increment()))


def unlocked(request: HttpRequest) -> HttpResponse:
    return HttpResponse(str(_increment()))


def counter(request: HttpRequest) -> HttpResponse:
    from django_redis import get_redis_connection

    return HttpResponse(str(int(get_redis_connection("default").get(COUNTER) or 0)))


urlpatterns = [
    path("locked/", locked),
    path("unlocked/", unlocked),
    path("counter/", counter),
]
