"""The fault scenarios. Each runs once with its protection on or off.

``run_scenario(name, lab, protected=...)`` returns a :class:`RunResult` whose
``violations`` the checkers found. With ``protected=False`` the protection the
scenario is about is switched off (named in :data:`SCENARIOS`), and the checker must
find a violation — so no checker passes by being blind.

Everything here runs in the controller process with Django configured (pytest's
settings, or the CLI's minimal ones); locks of the controller use the cache alias
``faults`` that :func:`lock_settings` points at the scenario's server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from tests.faults.harness import (
    History,
    RedisResource,
    RunResult,
    SqliteResource,
    check_issued_fences,
    check_resources,
    check_windows,
    lock_validity_ns,
    now_ns,
    read_history,
    wait_exit,
    wait_stopped,
    wait_until,
)
from tests.servers import FaultProxy, RedisServer, default_server_spec

ROOT = Path(__file__).resolve().parents[2]
ALIAS = "faults"
TTL = 0.3


# -- the lab: servers, proxies, files ----------------------------------------------------------


def debug_args(server_name: str | None = None) -> list[str]:
    """``--enable-debug-command yes`` where the server knows it (7.0 and later)."""
    spec = default_server_spec() if server_name is None else None
    if spec is None:
        from tests.servers import get_server_spec

        spec = get_server_spec(server_name)  # type: ignore[arg-type]
    return ["--enable-debug-command", "yes"] if spec.version_tuple >= (7,) else []


class Lab:
    """Servers, proxies and files for scenario runs; ``close()`` removes everything."""

    def __init__(self, server_name: str | None = None) -> None:
        self.server_name = server_name
        self.dir = Path(tempfile.mkdtemp(prefix="redislock-faults-"))
        self._servers: dict[str, RedisServer] = {}
        self._extra: list[RedisServer | FaultProxy] = []

    def server(self, key: str = "locks", **kwargs: Any) -> RedisServer:
        """A server kept for the lab's life (flushed, unpaused and healed on every call)."""
        server = self._servers.get(key)
        if server is None:
            kwargs.setdefault("extra_args", debug_args(self.server_name))
            server = self._servers[key] = RedisServer(self.server_name, **kwargs).start()
        if server.paused:
            server.resume()
        if not server.running:
            server.start()
        with server.client() as client:
            client.flushall()
            client.config_set("maxmemory", 0)
            client.script_flush()
        return server

    def fresh_server(self, **kwargs: Any) -> RedisServer:
        kwargs.setdefault("extra_args", debug_args(self.server_name))
        server = RedisServer(self.server_name, **kwargs).start()
        self._extra.append(server)
        return server

    def proxy(self, server: RedisServer) -> FaultProxy:
        proxy = FaultProxy(server)
        self._extra.append(proxy)
        return proxy

    def path(self, name: str) -> str:
        return str(self.dir / name)

    def close(self) -> None:
        for item in self._extra:
            with contextlib.suppress(Exception):
                item.close()
        for server in self._servers.values():
            with contextlib.suppress(Exception):
                server.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def lock_settings(url: str, **redislock: Any) -> Iterator[None]:
    """Point the cache alias ``faults`` (and nothing else) at ``url`` for the block."""
    from django.conf import settings
    from django.test.utils import override_settings

    caches = {
        **settings.CACHES,
        ALIAS: {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url},
    }
    config = {**getattr(settings, "REDISLOCK", {}), **redislock}
    with override_settings(CACHES=caches, REDISLOCK=config):
        yield


@contextlib.contextmanager
def patched(owner: Any, attribute: str, value: Any, active: bool = True) -> Iterator[None]:
    """Replace ``owner.attribute`` for the block (the protection switched off)."""
    if not active:
        yield
        return
    original = owner.__dict__[attribute]
    setattr(owner, attribute, value)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


class Worker:
    """A ``tests.faults.worker`` child process."""

    def __init__(self, lab: Lab, config: dict[str, Any]) -> None:
        self.log = open(lab.path(f"{config['worker']}-{now_ns()}.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.worker", json.dumps(config)],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.pid = self.proc.pid

    def wait_stopped(self, timeout: float = 30) -> None:
        wait_stopped(self.pid, timeout)

    def cont(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def wait(self, timeout: float = 30) -> int:
        code = wait_exit(self.pid, timeout)
        self.proc.returncode = code
        self.log.close()
        return code

    def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.proc.returncode = -9
        self.log.close()

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-3000:]


def _resources(lab: Lab, enforce: bool) -> tuple[list[Any], str, str]:
    sqlite_path = lab.path("resource.sqlite3")
    if os.path.exists(sqlite_path):
        os.unlink(sqlite_path)
    resource_server = lab.server("resource")
    sqlite = SqliteResource(sqlite_path, enforce=enforce)
    sqlite.create()
    red = RedisResource(resource_server.url, enforce=enforce)
    red.create()
    return [sqlite, red], sqlite_path, resource_server.url


def _close(resources: list[Any]) -> None:
    for resource in resources:
        resource.close()


def _write_all(history: History, resources: list[Any], fence: int, worker: str) -> list[bool]:
    values = []
    for resource in resources:
        invoke = now_ns()
        values.append(resource.read())
        history.record("read", invoke_ns=invoke, ok=True, value=values[-1])
    out = []
    for resource, value in zip(resources, values, strict=True):
        invoke = now_ns()
        accepted = resource.write(value + 1, fence, worker)
        history.record(
            "write", invoke_ns=invoke, ok=accepted, fence=fence, resource=type(resource).__name__
        )
        out.append(accepted)
    return out


def _record_acquire(history: History, lock: Any, invoke: int, ok: bool, naive: bool) -> None:
    history.record(
        "acquire",
        invoke_ns=invoke,
        ok=ok,
        token=lock.token,
        fence=lock.fence,
        validity_ns=None if naive or not ok else lock_validity_ns(lock, invoke),
    )


def _release(history: History, lock: Any, acquire_invoke: int, naive: bool) -> bool:
    from django_redislock import LockNotOwned

    invoke = now_ns()
    validity = None if naive else lock_validity_ns(lock, acquire_invoke)
    token = lock.token
    try:
        lock.release()
        ok = True
    except LockNotOwned:
        ok = False
    history.record("release", invoke_ns=invoke, ok=ok, token=token, validity_ns=validity)
    return ok


class LostRecorder:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.at: float | None = None
        self.calls = 0

    def __call__(self, lock: Any) -> None:
        self.calls += 1
        if self.at is None:
            self.at = time.monotonic()
        self.event.set()


def _raw(server: RedisServer) -> redis.Redis:
    return server.client(socket_timeout=5)


# -- 1. a holder paused past its TTL at each point -----------------------------------------------


def paused_holder(point: str, *, redlock: bool = False) -> Callable[[Lab, bool], RunResult]:
    def run(lab: Lab, protected: bool) -> RunResult:
        return _run_paused(lab, protected, point, redlock)

    return run


def _run_paused(lab: Lab, protected: bool, point: str, redlock: bool) -> RunResult:
    from django_redislock import Lock, Redlock

    result = RunResult()
    servers = [lab.server(f"locks{i}") for i in range(3 if redlock else 1)]
    urls = [server.url for server in servers]
    resources, sqlite_path, resource_url = _resources(lab, enforce=protected)
    history_path = lab.path(f"history-{point}-{now_ns()}.jsonl")
    name = f"paused-{point}"
    naive = not protected
    worker = Worker(
        lab,
        {
            "worker": "w1",
            "history": history_path,
            "urls": urls,
            "name": name,
            "ttl": TTL,
            "watchdog": point == "during_renewal",
            "enforce": protected,
            "naive": naive,
            "pause_at": point,
            "sqlite": sqlite_path,
            "redis_resource": resource_url,
        },
    )
    raws = [_raw(server) for server in servers]
    key = f"redislock:{{{name}}}"
    try:
        worker.wait_stopped()
        # The fault: w1 stays frozen until its key expired on every node.
        if not wait_until(lambda: not any(raw.exists(key) for raw in raws), timeout=10):
            raise RuntimeError("w1's key did not expire")
        history = History(history_path, "w2")
        aliases = [f"faults{i}" for i in range(len(urls))]
        with contextlib.ExitStack() as stack:
            for alias, url in zip(aliases, urls, strict=True):
                stack.enter_context(_alias(alias, url))
            if redlock:
                lock: Any = Redlock(name, connections=aliases, ttl=5)
            else:
                lock = Lock(name, connection=aliases[0], ttl=5)
            invoke = now_ns()
            ok = lock.acquire(timeout=10)
            _record_acquire(history, lock, invoke, ok, naive)
            if not ok:
                raise RuntimeError("w2 could not acquire")
            _write_all(history, resources, lock.fence, "w2")
            before = [(raw.get(key), raw.pttl(key)) for raw in raws]
            t_before = time.monotonic()
            worker.cont()
            code = worker.wait()
            elapsed_ms = (time.monotonic() - t_before) * 1000
            if code != 0:
                raise RuntimeError(f"w1 failed ({code}):\n{worker.output()}")
            after = [(raw.get(key), raw.pttl(key)) for raw in raws]
            for (token_before, pttl_before), (token_after, pttl_after) in zip(
                before, after, strict=True
            ):
                if token_after != token_before:
                    result.violations.append(
                        f"the new holder's key changed under a stale release/extend: "
                        f"{token_before!r} -> {token_after!r}"
                    )
                elif not (pttl_before - elapsed_ms - 20 <= pttl_after <= pttl_before):
                    result.violations.append(
                        f"a stale extend changed the new holder's TTL: {pttl_before} ms -> "
                        f"{pttl_after} ms after {elapsed_ms:.0f} ms"
                    )
            _release(history, lock, invoke, naive)
        history.close()
        result.history = read_history(history_path)
        result.extend(check_windows(result.history))
        result.extend(check_resources(resources))
        if redlock:
            result.extend(check_issued_fences(result.history))
    finally:
        worker.kill()
        _close(resources)
        for raw in raws:
            raw.close()
    return result


@contextlib.contextmanager
def _alias(alias: str, url: str, **redislock: Any) -> Iterator[None]:
    from django.conf import settings
    from django.test.utils import override_settings

    caches = {
        **settings.CACHES,
        alias: {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url},
    }
    with override_settings(CACHES=caches, **({"REDISLOCK": redislock} if redislock else {})):
        yield


# -- the registry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Lab, bool], RunResult]
    #: What "without protection" switches off.
    unprotected: str
    #: Seconds one protected + one unprotected run take, roughly (for the quick suite).
    cost: float = 2.0
    available: Callable[[], str | None] = lambda: None  # a reason to skip, or None


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, unprotected: str, **kwargs: Any) -> Callable[[Any], Any]:
    def register(run: Callable[[Lab, bool], RunResult]) -> Callable[[Lab, bool], RunResult]:
        SCENARIOS[name] = Scenario(name, run, unprotected, **kwargs)
        return run

    return register


for _point in ("after_acquire", "before_write", "during_renewal", "before_release"):
    scenario(
        f"paused {_point.replace('_', ' ')}",
        "resources without fence check; naive holder (no validity bound, DEL/PEXPIRE "
        "without token check)",
    )(paused_holder(_point))


def run_scenario(name: str, lab: Lab, *, protected: bool) -> RunResult:
    return SCENARIOS[name].run(lab, protected)
