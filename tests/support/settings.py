"""Django settings for the test suite (and, for now, ``manage.py``).

Two environment variables, read when this module is imported, say where the test-run
resources live; ``tests/support/plugin.py`` sets both before pytest-django imports this module:

* ``REDISLOCK_TEST_REDIS_URL``: the server behind ``CACHES["default"]``. Under pytest it is a
  server the test run started itself on a free loopback port (never 6379).
* ``REDISLOCK_TEST_DB``: the sqlite file. A file, not ``:memory:``, so that child processes
  started by a test (``manage.py`` commands, workers) share the test database.
"""

import os
import tempfile
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]  # the repository

SECRET_KEY = "django-redislock-tests-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_redislock",
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

ROOT_URLCONF = "tests.support.urls"

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

_DB_PATH = os.environ.get("REDISLOCK_TEST_DB") or os.path.join(
    tempfile.gettempdir(), "django-redislock-tests.sqlite3"
)

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": _DB_PATH,
        # The test database is this same file, so other processes can open it too.
        "TEST": {"NAME": _DB_PATH},
    }
}

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("REDISLOCK_TEST_REDIS_URL", "redis://127.0.0.1:6399/0"),
    }
}

REDISLOCK = {"TTL": 5.0}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
STATIC_URL = "/static/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast tests
