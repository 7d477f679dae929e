"""``redislock top``'s live view in a process of its own, for tests/test_top.py to drive in
tmux: the test settings, with the default cache on ``REDISLOCK_TEST_REDIS_URL`` and the
history on."""

from __future__ import annotations

import os

import django
from django.conf import settings


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.settings")
    url = os.environ["REDISLOCK_TEST_REDIS_URL"]
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}}
    settings.REDISLOCK = {**getattr(settings, "REDISLOCK", {}), "HISTORY": True}
    django.setup()
    from django.core.management import call_command

    call_command("redislock", "top", "--interval", "0.5")


if __name__ == "__main__":
    main()
