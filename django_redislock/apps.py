"""Django app configuration."""

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
