"""Sentinel: 1 primary, 1 replica, 3 sentinels, started by the fixtures; a real failover.

The lock connection is a ``REDISLOCK["CONNECTIONS"]`` entry with ``SENTINELS`` and
``SERVICE_NAME``: every new connection asks the sentinels for the current primary, so
after a failover the library follows the promoted replica. The replica replicates through
a FaultProxy, so the test can take a lock that the replica never receives.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from django_redislock import Lock, signals
from django_redislock.connection import lock_client
from django_redislock.testing import FaultProxy, RedisServer
from tests.support.cluster import (
    SentinelServer,
    replicate,
    sentinel_addresses,
    start_sentinels,
    wait_until,
)
from tests.support.held import token_at

SERVICE = "locks-primary"
ALIAS = "ha"


@dataclass
class Topology:
    primary: RedisServer
    replica: RedisServer
    link: FaultProxy
    sentinels: list[SentinelServer]

    def current_primary_port(self) -> int | None:
        for sentinel in self.sentinels:
            address = sentinel.primary_address()
            if address is not None:
                return address[1]
        return None


def _ready(sentinels: list[SentinelServer]) -> bool:
    for sentinel in sentinels:
        with sentinel.client(socket_timeout=2, decode_responses=True) as client:
            info = client.execute_command("SENTINEL MASTER", SERVICE)
            if isinstance(info, list):
                info = dict(zip(info[::2], info[1::2], strict=True))
            fields = info
            if int(fields["num-other-sentinels"]) < len(sentinels) - 1:
                return False
            if int(fields["num-slaves"]) < 1:
                return False
    return True


@pytest.fixture
def topology(make_server: Any, make_proxy: Any, settings: Any) -> Iterator[Topology]:
    primary = make_server(extra_args=["--repl-diskless-sync-delay", "0"])
    replica = make_server()
    link = make_proxy(primary)
    replicate(replica, link.host, link.port)
    sentinels = start_sentinels(primary.spec, SERVICE, primary)
    try:
        wait_until(lambda: _ready(sentinels), 15, what="sentinels to know each other")
        settings.REDISLOCK = {
            **settings.REDISLOCK,
            "CONNECTION": ALIAS,
            "CONNECTIONS": {
                ALIAS: {"SENTINELS": sentinel_addresses(sentinels), "SERVICE_NAME": SERVICE}
            },
        }
        yield Topology(primary, replica, link, sentinels)
    finally:
        link.heal()
        for sentinel in sentinels:
            sentinel.close()


def test_sentinel_connection_reaches_the_primary(topology: Topology) -> None:
    client = lock_client(ALIAS)
    assert client.info("server")["tcp_port"] == topology.primary.port
    with Lock("hello") as lock:
        assert lock.owned()


def test_failover_the_library_follows_the_new_primary(topology: Topology) -> None:
    reasons: list[str] = []

    def on_lost(sender: Any, lock: Lock, reason: str, **kwargs: Any) -> None:
        reasons.append(f"{lock.name}: {reason}")

    signals.lock_lost.connect(on_lost)
    try:
        # Replicated before the failover: it survives it.
        safe = Lock("safe", ttl=30, wait_replicas=1, wait_timeout=2)
        assert safe.acquire(timeout=0)
        # Never replicated: the new primary will not have it.
        topology.link.hold()
        unsafe = Lock("unsafe", ttl=8, watchdog=True)
        assert unsafe.acquire(timeout=0)

        topology.primary.kill()
        started = time.monotonic()
        wait_until(
            lambda: topology.current_primary_port() == topology.replica.port,
            20,
            what="the sentinels to promote the replica",
        )
        failover_seconds = time.monotonic() - started

        # The watchdog's next renewal reaches the new primary, which never had the lock.
        # ``lost`` turns true just before the signal is sent: wait for the signal.
        wait_until(lambda: reasons, 10, what="the watchdog to report the unsafe lock lost")
        assert reasons == ["unsafe: the lock expired or another holder took it"]
        assert unsafe.lost
        assert failover_seconds < 15

        # The library now talks to the promoted replica.
        assert wait_until(lambda: lock_client(ALIAS).info("server")["tcp_port"], 5) == (
            topology.replica.port
        )
        second = Lock("unsafe")
        assert second.acquire(timeout=0)  # the hazard: a second holder
        assert not Lock("safe").acquire(timeout=0)  # the replicated lock survived
        assert safe.owned()
        safe.release()
        second.release()
    finally:
        signals.lock_lost.disconnect(on_lost)


async def test_async_follows_the_new_primary(topology: Topology) -> None:
    lock = Lock("async-ha")
    assert await lock.aacquire(timeout=0)
    await lock.arelease()
    topology.primary.kill()
    wait_until(
        lambda: topology.current_primary_port() == topology.replica.port,
        20,
        what="the sentinels to promote the replica",
    )
    deadline = time.monotonic() + 5
    while True:  # the first command may hit a connection to the dead primary
        try:
            assert await lock.aacquire(timeout=0)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await __import__("asyncio").sleep(0.1)
    await lock.arelease()


async def test_django_redis_sentinel_alias(topology: Topology, settings: Any) -> None:
    """A django-redis cache alias with its SentinelClient works for sync and async locks."""
    settings.DJANGO_REDIS_CONNECTION_FACTORY = "django_redis.pool.SentinelConnectionFactory"
    settings.CACHES = {
        **settings.CACHES,
        "sentinel": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{SERVICE}/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "SENTINELS": sentinel_addresses(topology.sentinels),
            },
        },
    }
    lock = Lock("via-django-redis", connection="sentinel")
    assert lock.acquire(timeout=0)
    with topology.primary.client() as raw:
        assert token_at(raw, lock.key) == lock.token
    lock.release()
    assert await lock.aacquire(timeout=0)
    with topology.primary.client() as raw:
        assert token_at(raw, lock.key) == lock.token
    await lock.arelease()
