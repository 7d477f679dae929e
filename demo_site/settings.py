"""Settings of the demo site (``make demo``; see ``demo_site/run.py``).

Where Redis is, in this order:

1. ``REDIS_URL`` (and optionally ``REDLOCK_URLS``, comma-separated, for Redlock) from the
   environment: the servers you point it at;
2. else the state file ``run.py`` writes while it runs an embedded server
   (``demo_site/var/servers.json``), so ``python demo_site/manage.py rebuild_reports`` in a
   second terminal reaches the same server as the site;
3. else nothing: the site and the commands say to start the demo with ``make demo``.

``DEMO_VAR_DIR`` moves ``var/`` (the sqlite database and the state file) elsewhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
VAR_DIR = Path(os.environ.get("DEMO_VAR_DIR") or BASE_DIR / "var")
STATE_FILE = VAR_DIR / "servers.json"


def _servers() -> tuple[str | None, list[str], str]:
    """(redis url, redlock urls, where they came from)."""
    url = os.environ.get("REDIS_URL")
    if url:
        redlock = [u.strip() for u in os.environ.get("REDLOCK_URLS", "").split(",") if u.strip()]
        return url, redlock, os.environ.get("DEMO_SERVER_LABEL", "REDIS_URL")
    try:
        state = json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return None, [], "none"
    return state.get("url"), list(state.get("redlock_urls", [])), state.get("label", "embedded")


REDIS_URL, REDLOCK_URLS, REDIS_SOURCE = _servers()

SECRET_KEY = os.environ.get("DEMO_SECRET_KEY", "django-redislock-demo-not-a-secret")
DEBUG = os.environ.get("DEMO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_redislock",
    "demo_site.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "demo_site.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.debug",
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "demo.sqlite3",
        # Several processes (the site, workers, the freeze demo) write: wait, do not fail.
        "OPTIONS": {"timeout": 20},
    }
}

# The locks reuse the project's django-redis connections: here, one cache alias per server.
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL or "redis://127.0.0.1:1/0",  # port 1: fails fast, never 6379
    },
}
for _i, _url in enumerate(REDLOCK_URLS, start=1):
    CACHES[f"redlock{_i}"] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": _url}

REDISLOCK = {
    "TTL": 30.0,
    "REDLOCK_CONNECTIONS": [f"redlock{i}" for i in range(1, len(REDLOCK_URLS) + 1)],
}

# How long the demo's "regenerate report" takes (seconds).
DEMO_REPORT_SECONDS = float(os.environ.get("DEMO_REPORT_SECONDS", "6"))

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
STATIC_URL = "/static/"
LOGIN_URL = "/admin/login/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_redislock": {"handlers": ["console"], "level": "WARNING"}},
}
