"""Shared run context handed to every scenario."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis

from bench.adapters import Target
from bench.proxies import ProxyGroup
from bench.servers import Server


@dataclass
class Context:
    """Servers, sizes and switches of one benchmark run."""

    target: Target
    server: Server
    redlock_servers: list[Server] = field(default_factory=list)
    proxies: ProxyGroup | None = None
    proxy_skip: str | None = None
    inspect_server: Server | None = None  # scenario 5's own server (Django alias "inspect")
    quick: bool = False
    warm_cpu: bool = False
    both_modes: bool = False
    server_kind: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def inspect_url(self) -> str | None:
        """URL of scenario 5's server, if one was started."""
        return self.inspect_server.url if self.inspect_server is not None else None

    def admin(self) -> redis.Redis:
        """A fresh client on the single node, for INFO / FLUSHALL (not used by any lock)."""
        return redis.Redis.from_url(self.target.url)

    def sizes(self, quick: Any, full: Any) -> Any:
        """Pick the quick or the full value."""
        return quick if self.quick else full
