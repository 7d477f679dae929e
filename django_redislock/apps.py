"""Django app configuration."""

from django.apps import AppConfig


class RedisLockConfig(AppConfig):
    name = "django_redislock"
    verbose_name = "Redis locks"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
