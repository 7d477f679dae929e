"""Django app configuration."""

import logging

from django.apps import AppConfig


class RedisLockConfig(AppConfig):
    name = "django_redislock"
    verbose_name = "Redis locks"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
        from .conf import get_config

        # Only when asked: off, neither the library nor its import is paid for.
        if get_config()["METRICS"] is True:
            from .contrib import prometheus

            prometheus.enable()
        if get_config()["TRACING"] is True:
            _enable_tracing()
        if get_config()["HISTORY"] is True:
            from . import history

            history.enable()


def _enable_tracing() -> None:
    try:
        from .contrib import otel
    except ImportError as exc:  # the API absent: tracing is a no-op, said once
        logging.getLogger("django_redislock").warning(
            "REDISLOCK['TRACING'] is on but opentelemetry-api cannot be imported (%s): "
            "locks are not traced. pip install 'django-redislock[otel]'",
            exc,
        )
        return
    otel.enable()
