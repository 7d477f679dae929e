"""Test support for projects that use django-redislock (and for this project's own tests).

* :class:`RedisServer` and friends (:mod:`.servers`): real ``valkey-server`` /
  ``redis-server`` child processes on free loopback ports, from pip-installed binaries;
* :class:`FaultProxy` (:mod:`.proxy`): a TCP proxy that delays, partitions, drops replies
  or resets connections, for fault tests;
* the pytest plugin (:mod:`.plugin`): ``pytest_plugins = ["django_redislock.testing"]``
  in your ``conftest.py`` gives you the ``redislock`` and ``redislock_server`` fixtures.

Importing this package does not import pytest: the plugin is loaded by pytest itself,
through ``pytest_plugins`` below or the ``pytest11`` entry point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lock_server import (
    BACKENDS,
    EmbeddedServer,
    LockServer,
    cache_config,
    find_server,
    find_server_binary,
    start_lock_server,
)
from .proxy import FaultProxy
from .servers import (
    RedisServer,
    ServerSpec,
    ServerStartError,
    available_servers,
    default_server_spec,
    get_server_spec,
    running_server,
    spec_for_binary,
)

if TYPE_CHECKING:
    from .plugin import EntryPoint

# pytest registers the plugin module when this package is named in ``pytest_plugins``.
pytest_plugins = ["django_redislock.testing.plugin"]

__all__ = [
    "BACKENDS",
    "EmbeddedServer",
    "FaultProxy",
    "LockServer",
    "RedisServer",
    "ServerSpec",
    "ServerStartError",
    "available_servers",
    "cache_config",
    "default_server_spec",
    "find_server",
    "find_server_binary",
    "get_server_spec",
    "running_server",
    "spec_for_binary",
    "start_lock_server",
]


def __getattr__(name: str) -> Any:
    # The pytest11 entry point (``django_redislock.testing:entry_point``) is loaded only
    # by pytest, so pytest is imported only then.
    if name == "entry_point":
        from .plugin import entry_point

        result: EntryPoint = entry_point
        return result
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
