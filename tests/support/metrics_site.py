"""A Django site for gunicorn with metrics on: settings and URLs in one module.

``DJANGO_SETTINGS_MODULE=tests.support.metrics_site``; gunicorn's config is
``tests/support/metrics_gunicorn.py`` (``child_exit`` drops a dead worker's gauges).
django-prometheus is installed beside django-redislock: both export on the default
registry, ours at ``/metrics`` and its own at ``/django-metrics``.
"""

import time

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django_prometheus.exports import ExportToDjangoView

from django_redislock import lock_view
from django_redislock.contrib.prometheus import metrics_view
from tests.support.settings import *  # noqa: F403
from tests.support.settings import INSTALLED_APPS, MIDDLEWARE

ROOT_URLCONF = "tests.support.metrics_site"
INSTALLED_APPS = [*INSTALLED_APPS, "django_prometheus"]
MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    *MIDDLEWARE,
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]
REDISLOCK = {"TTL": 5.0, "METRICS": True}


@lock_view("metrics-site:report", timeout=60)
def report(request: HttpRequest) -> HttpResponse:
    time.sleep(0.002)  # long enough for the next request to find it held
    return HttpResponse("done")


urlpatterns = [
    path("report/", report),
    path("metrics", metrics_view),
    path("django-metrics", ExportToDjangoView),
]
