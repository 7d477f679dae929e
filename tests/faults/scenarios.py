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

import asyncio
import contextlib
import gc
import json
import math
import os
import random
import re
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
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_redislock.testing import FaultProxy, RedisServer, default_server_spec
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
from tests.support.held import token_at

ROOT = Path(__file__).resolve().parents[2]
ALIAS = "faults"
TTL = 0.3


# -- the lab: servers, proxies, files ----------------------------------------------------------


def debug_args(server_name: str | None = None) -> list[str]:
    """``--enable-debug-command yes`` where the server knows it (7.0 and later)."""
    spec = default_server_spec() if server_name is None else None
    if spec is None:
        from django_redislock.testing import get_server_spec

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
        # Redlock's per-node timeout is ttl/10: 1 s keeps it clear of a loaded machine.
        return _run_paused(lab, protected, point, redlock, ttl=1.0 if redlock else TTL)

    return run


def _run_paused(lab: Lab, protected: bool, point: str, redlock: bool, ttl: float) -> RunResult:
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
            "ttl": ttl,
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
            # Each reading carries the instant before its first call: on a loaded machine
            # the round trips between nodes are a sizeable part of the wait.
            before = [(time.monotonic(), raw.get(key), raw.pttl(key)) for raw in raws]
            worker.cont()
            code = worker.wait()
            if code != 0:
                raise RuntimeError(f"w1 failed ({code}):\n{worker.output()}")
            after = [(raw.get(key), raw.pttl(key), time.monotonic()) for raw in raws]
            for (t_before, token_before, pttl_before), (token_after, pttl_after, t_after) in zip(
                before, after, strict=True
            ):
                elapsed_ms = (t_after - t_before) * 1000
                late = (
                    token_after is not None and token_after.split(b"\x1e")[0] == lock.token.encode()
                )
                if token_before is None and (token_after is None or late):
                    continue  # a Redlock node w2 missed; its own late SET may land there
                if token_after != token_before:
                    result.violations.append(
                        f"the new holder's key changed under a stale release/extend: "
                        f"{token_before!r} -> {token_after!r}"
                    )
                elif not (pttl_before - elapsed_ms - 5 <= pttl_after <= pttl_before + 1):
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


# -- 2. lost replies ---------------------------------------------------------------------------


def lost_acquire_reply(lab: Lab, protected: bool) -> RunResult:
    """The SET lands, its reply is lost; once the failure is reported no key holds our token.

    Unprotected: the clean-up after an unknown outcome (compare-and-delete) is a no-op.
    """
    from django_redislock import LockBackendUnavailable
    from django_redislock.lock import BaseLock, Lock

    result = RunResult()
    server = lab.server()
    proxy = lab.proxy(server)
    raw = _raw(server)
    try:
        with (
            lock_settings(proxy.url, SOCKET_TIMEOUT=0.2),
            patched(BaseLock, "_do_cleanup", lambda self, token: None, active=not protected),
            # A waiter's unclaim also deletes a key holding its token (a hand-off it left):
            # a subscribed waiter takes its place in line on its first attempt, so it is
            # part of the same clean-up.
            patched(BaseLock, "_do_unclaim", lambda self, token: None, active=not protected),
        ):
            lock = Lock("lost-acquire-reply", connection=ALIAS, ttl=30)
            assert lock.acquire() and lock.release() is None  # warm: scripts loaded
            for _attempt in range(5):
                proxy.drop_replies(True)
                errors: list[BaseException] = []
                returned: list[Any] = []

                def acquire(errors: list[Any] = errors, returned: list[Any] = returned) -> None:
                    try:
                        returned.append(lock.acquire())
                    except LockBackendUnavailable as exc:
                        errors.append(exc)
                    except BaseException as exc:
                        returned.append(exc)

                thread = threading.Thread(target=acquire)
                thread.start()
                # The SET lands but its reply is lost; the network heals before the clean-up.
                if not wait_until(lambda: raw.exists(lock.key), timeout=5):
                    raise RuntimeError("the SET never landed")
                proxy.drop_replies(False)
                thread.join(10)
                proxy.reset()
                if thread.is_alive():
                    result.violations.append("acquire() hung for 10 s after the lost reply")
                    thread.join(30)
                if returned == [True]:
                    # We healed before the proxy saw the reply: no fault. Undo, try again.
                    assert token_at(raw, lock.key) == lock.token
                    lock.release()
                    result.notes.append("the reply got through before the drop; retried")
                    continue
                if returned:
                    raise RuntimeError(f"acquire() returned {returned} after the lost reply")
                break
            else:
                raise RuntimeError("could not lose the acquire's reply in 5 attempts")
            leaked = raw.get(lock.key)
            if leaked is not None:
                result.violations.append(
                    f"a key with our token {leaked!r} was left after the acquire failed "
                    f"(TTL {raw.pttl(lock.key)} ms)"
                )
    finally:
        raw.close()
        proxy.close()
    return result


def lost_release_reply(lab: Lab, protected: bool) -> RunResult:
    """The release lands, its reply is lost; the next holder's key survives our retry.

    Unprotected: the retry is a plain ``DEL`` (no token check).
    """
    from django_redislock import Lock, LockBackendUnavailable, LockNotOwned

    result = RunResult()
    server = lab.server()
    proxy = lab.proxy(server)
    raw = _raw(server)
    try:
        with lock_settings(proxy.url, SOCKET_TIMEOUT=0.2), _alias("direct", server.url):
            a = Lock("lost-release-reply", connection=ALIAS, ttl=30)
            assert a.acquire() and a.release() is None  # warm: scripts loaded
            assert a.acquire()
            proxy.drop_replies(True)
            try:
                a.release()
                raise RuntimeError("release did not notice the lost reply")
            except LockBackendUnavailable:
                pass
            proxy.drop_replies(False)
            proxy.reset()
            if raw.exists(a.key):
                raise RuntimeError("the release never landed")
            b = Lock("lost-release-reply", connection="direct", ttl=5)
            assert b.acquire(timeout=0)
            before = raw.pttl(b.key)
            t0 = time.monotonic()
            # Our retry.
            if protected:
                with contextlib.suppress(LockNotOwned):
                    a.release()
            else:
                raw.delete(a.key)
            elapsed = (time.monotonic() - t0) * 1000
            if token_at(raw, b.key) != b.token:
                result.violations.append("the retried release deleted the next holder's key")
            elif not before - elapsed - 20 <= raw.pttl(b.key) <= before:
                result.violations.append("the retried release changed the next holder's TTL")
            with contextlib.suppress(LockNotOwned):
                b.release()
    finally:
        raw.close()
        proxy.close()
    return result


# -- 3. the server frozen past the TTL (SIGSTOP, DEBUG SLEEP, CLIENT PAUSE) --------------------


def frozen_server(how: str) -> Callable[[Lab, bool], RunResult]:
    def run(lab: Lab, protected: bool) -> RunResult:
        return _run_frozen(lab, protected, how)

    return run


def _freeze(server: RedisServer, how: str, seconds: float) -> Callable[[], None]:
    """Freeze ``server`` now; returns the function that waits until it is back."""
    if how == "sigstop":
        server.pause()

        def thaw() -> None:
            time.sleep(seconds)  # the fault's duration, not a synchronisation
            server.resume()

        return thaw
    if how == "client-pause":
        with server.client() as client:
            client.client_pause(int(seconds * 1000), all=True)

        def thaw() -> None:
            with server.client(socket_timeout=seconds + 5) as client:
                client.ping()  # answered once the pause is over

        return thaw
    assert how == "debug-sleep"
    sleeper = server.client(socket_timeout=seconds + 5)
    sleeper.ping()
    # Connected before the sleep: a new connection's handshake would wait it out.
    probe = server.client(socket_timeout=0.02, retry=Retry(NoBackoff(), 0))
    probe.ping()
    thread = threading.Thread(
        target=lambda: sleeper.execute_command("DEBUG", "SLEEP", seconds), daemon=True
    )
    thread.start()

    def asleep() -> bool:
        try:
            probe.ping()
            return False
        except redis.TimeoutError:
            return True

    if not wait_until(asleep, timeout=5, interval=0):
        raise RuntimeError("DEBUG SLEEP did not freeze the server")
    probe.close()

    def thaw() -> None:
        thread.join(seconds + 5)
        sleeper.close()

    return thaw


def _run_frozen(lab: Lab, protected: bool, how: str) -> RunResult:
    """The holder's validity must end no later than the server's expiry; then it is lost.

    Replies are delayed 20 ms each way by the proxy. Unprotected: the holder starts its
    validity clock when the reply arrives (instead of before sending), so it believes the
    lock for up to one round trip after the server expired it.
    """
    from django_redislock import Lock, LockNotOwned

    result = RunResult()
    server = lab.server("frozen")
    proxy = lab.proxy(server)
    proxy.delay(0.02)
    raw = _raw(server)
    on_lost = LostRecorder()
    try:
        with lock_settings(proxy.url, SOCKET_TIMEOUT=0.1):
            lock = Lock(f"frozen-{how}", connection=ALIAS, ttl=TTL, watchdog=True, on_lost=on_lost)
            assert lock.acquire(timeout=0)
            complete = time.monotonic()
            # A lower bound of the server's expiry: sent-at + PTTL (1 ms PTTL resolution).
            sent = time.monotonic()
            pttl = raw.pttl(lock.key)
            expiry_lb = sent + pttl / 1000 - 0.001
            valid_until = lock.valid_until
            believed = valid_until if protected else complete + lock.ttl
            thaw = _freeze(server, how, 2 * TTL)
            if lock.valid_until != valid_until:
                result.notes.append("a renewal landed before the freeze; run not counted")
                thaw()
                return result
            if believed > expiry_lb + 0.001:
                result.violations.append(
                    f"the holder believed the lock {1000 * (believed - expiry_lb):.1f} ms past "
                    "the server's expiry"
                )
            thaw()
            if not on_lost.event.wait(5):
                result.violations.append("the lock was not reported lost after the freeze")
            if not lock.lost:
                result.violations.append("lock.lost is False after the freeze")
            if not wait_until(lambda: not raw.exists(lock.key), timeout=2):
                result.violations.append("the key outlived the freeze")
            # Never revived: no late renewal brings it back.
            deadline = time.monotonic() + TTL
            while time.monotonic() < deadline:
                if raw.exists(lock.key):
                    result.violations.append("the lock key was revived after the freeze")
                    break
                time.sleep(0.005)
            try:
                lock.release()
                result.violations.append("release() of a lost lock succeeded")
            except LockNotOwned:
                pass
    finally:
        raw.close()
        proxy.close()
    return result


# -- 4. the watchdog starved (GIL) or cut off (proxy hold) --------------------------------------

_CATASTROPHIC = re.compile(r"(a+)+$")


_regex_size: dict[float, int] = {}


def regex_size(seconds: float) -> int:
    """Input length for which the catastrophic regex runs at least ``seconds`` (cached).

    Measured on short inputs and extrapolated (each extra character doubles the time),
    so calibrating never starves anything for long.
    """
    if seconds not in _regex_size:
        n, took = 14, 0.0
        while took < 0.02:
            n += 1
            took = min(_regex_time(n) for _ in range(3))  # the least disturbed of three
        # Two characters (4x) of margin: a run measured while the machine was busy reads
        # slow and would predict too short an input for a quieter moment (CI saw 0.49 s).
        _regex_size[seconds] = n + max(0, math.ceil(math.log2(seconds / took))) + 2
    return _regex_size[seconds]


def _regex_time(n: int) -> float:
    t0 = time.monotonic()
    _CATASTROPHIC.match("a" * n + "!")
    return time.monotonic() - t0


def hold_gil(size: int) -> float:
    """Run the catastrophic regex (it holds the GIL throughout); how long it took."""
    t0 = time.monotonic()
    _CATASTROPHIC.match("a" * size + "!")
    return time.monotonic() - t0


def watchdog_starved(lab: Lab, protected: bool) -> RunResult:
    """A holder whose process cannot run its watchdog (GIL held by a regex) for 5 TTLs.

    Another process takes the lock meanwhile. ``lost`` must be True as soon as the regex
    returns (one TTL after the last good renewal had passed), the stale write is rejected
    by its fence, and the late renewal never touches the new holder's key.
    Unprotected: the holder trusts only the watchdog's flag (``lock._lost``), not the
    validity clock, and the resources do not check fences.
    """
    from django_redislock import Lock

    result = RunResult()
    server = lab.server()
    raw = _raw(server)
    resources, sqlite_path, resource_url = _resources(lab, enforce=protected)
    history_path = lab.path(f"history-starved-{now_ns()}.jsonl")
    history = History(history_path, "w1")
    name = "starved"
    taker = None
    on_lost = LostRecorder()
    try:
        with lock_settings(server.url, SOCKET_TIMEOUT=0.5):
            lock = Lock(name, connection=ALIAS, ttl=TTL, watchdog=True, on_lost=on_lost)
            invoke = now_ns()
            assert lock.acquire(timeout=0)
            _record_acquire(history, lock, invoke, True, naive=not protected)
            first = lock.valid_until
            if not wait_until(lambda: lock.valid_until != first, timeout=5):
                raise RuntimeError("no renewal happened")
            taker = Worker(
                lab,
                {
                    "worker": "w2",
                    "history": history_path,
                    "urls": [server.url],
                    "name": name,
                    "ttl": 5.0,
                    "enforce": protected,
                    "naive": not protected,
                    "timeout": 10,
                    "hold": 0.5,
                    "sqlite": sqlite_path,
                    "redis_resource": resource_url,
                },
            )
            # Let the taker start and block on the lock; its own startup is not the fault.
            subscribed = wait_until(
                lambda: raw.pubsub_numsub(f"redislock:{{{name}}}:released")[0][1] > 0,
                timeout=10,
            )
            if not subscribed:
                raise RuntimeError(f"the taker did not start waiting:\n{taker.output()}")
            size = regex_size(3 * TTL)
            first = lock.valid_until
            if not wait_until(lambda: lock.valid_until != first, timeout=5):
                raise RuntimeError("no renewal happened")
            last_renewal = lock.valid_until
            took = hold_gil(size)
            if took < 2 * TTL:
                raise RuntimeError(f"the regex held the GIL only {took:.2f}s")
            end = time.monotonic()
            if lock.valid_until != last_renewal:
                raise RuntimeError("the watchdog ran during the regex: the GIL was not held")
            believes_lost = lock.lost if protected else lock._lost
            if not believes_lost and end >= last_renewal:
                result.violations.append(
                    f"{1000 * (end - last_renewal):.0f} ms past the last renewal + TTL the "
                    f"holder still believed it held the lock (regex held the GIL {took:.2f}s)"
                )
            # The holder goes on with its write: the fence must reject it.
            _write_all(history, resources, lock.fence, "w1")
            if not on_lost.event.wait(5):
                result.violations.append("the watchdog never reported the loss")
            code = taker.wait()
            if code != 0:
                raise RuntimeError(f"taker failed:\n{taker.output()}")
            if token_at(raw, lock.key) == (lock.token or ""):
                result.violations.append("the starved holder's key was revived")
            _release(history, lock, invoke, naive=not protected)
        history.close()
        result.history = read_history(history_path)
        taker_lines = [x for x in result.history if x["worker"] == "w2"]
        if not any(x["op"] == "release" and x["ok"] for x in taker_lines):
            result.violations.append("the new holder's release failed: its key was touched")
        result.extend(check_windows(result.history))
        result.extend(check_resources(resources))
    finally:
        history.close()  # again on an error path: a file left open warns in a later test
        if taker is not None:
            taker.kill()
        raw.close()
        _close(resources)
    return result


def watchdog_cut_off(lab: Lab, protected: bool) -> RunResult:
    """The watchdog cannot reach Redis (proxy hold) past the TTL, then the network heals.

    ``lost`` must be set no later than one TTL after the last good renewal (the
    ``on_lost`` callback within one socket timeout more), and the key is never revived
    after healing, though every held renewal is delivered then.
    Unprotected: renewal is a silent re-acquire (``SET key token PX ttl``).
    """
    from django_redislock.connection import lock_client
    from django_redislock.lock import Lock
    from django_redislock.transports.single import SingleNode

    def naive_renewals(self: Any, ops: Any) -> list[Any]:
        # What the watchdog sends, as silent re-acquires: SET key token PX ttl.
        outcomes: list[Any] = []
        for op in ops:
            (key, _), (token, ttl_ms) = op.keys, op.args
            try:
                outcomes.append(bool(lock_client(self.alias).set(key, token, px=ttl_ms)))
            except Exception as exc:
                outcomes.append(exc)
        return outcomes

    result = RunResult()
    server = lab.server()
    proxy = lab.proxy(server)
    raw = _raw(server)
    on_lost = LostRecorder()
    socket_timeout = 0.2
    try:
        with (
            lock_settings(proxy.url, SOCKET_TIMEOUT=socket_timeout),
            patched(SingleNode, "call_many", naive_renewals, active=not protected),
        ):
            lock = Lock("cut-off", connection=ALIAS, ttl=TTL, watchdog=True, on_lost=on_lost)
            assert lock.acquire(timeout=0)
            first = lock.valid_until
            if not wait_until(lambda: lock.valid_until != first, timeout=5):
                raise RuntimeError("no renewal happened")
            proxy.hold()
            last_good = lock.valid_until  # = start of the last good renewal + TTL
            if not wait_until(lambda: lock.lost, timeout=5):
                result.violations.append("lock.lost never turned True")
            lost_seen = time.monotonic()
            if lost_seen > last_good + 0.05:
                result.violations.append(
                    f"lost turned True {1000 * (lost_seen - last_good):.0f} ms after the last "
                    "good renewal + TTL"
                )
            if not on_lost.event.wait(5):
                result.violations.append("on_lost was never called")
            elif (
                on_lost.at is not None and on_lost.at > last_good + socket_timeout + TTL / 10 + 0.1
            ):
                result.violations.append(
                    f"on_lost came {1000 * (on_lost.at - last_good):.0f} ms after the TTL ran out"
                )
            if not wait_until(lambda: not raw.exists(lock.key), timeout=5):
                raise RuntimeError("the key did not expire while cut off")
            proxy.heal()  # every held renewal is delivered now
            deadline = time.monotonic() + 2 * TTL
            while time.monotonic() < deadline:
                if raw.exists(lock.key):
                    result.violations.append("the key was revived after the network healed")
                    break
                time.sleep(0.005)
    finally:
        raw.close()
        proxy.close()
    return result


# -- 5. eviction -------------------------------------------------------------------------------


def eviction(lab: Lab, protected: bool) -> RunResult:
    """``volatile-ttl`` evicts the held lock under memory pressure.

    It must be reported lost within one renewal interval (ttl/3) of the eviction, the
    fence counter (no TTL) survives, and the system check W001 warns about the policy.
    Unprotected: no watchdog (the holder notices only when its validity runs out).
    """
    from django_redislock import Lock
    from django_redislock.checks import check_eviction_policy

    result = RunResult()
    ttl = 1.0
    server = lab.server("evict")
    raw = _raw(server)
    raw.config_set("maxmemory-policy", "volatile-ttl")
    on_lost = LostRecorder()
    try:
        with lock_settings(server.url, CONNECTION=ALIAS):
            ids = [message.id for message in check_eviction_policy()]
            if "redislock.W001" not in ids:
                result.violations.append(f"no redislock.W001 for volatile-ttl (got {ids})")
            lock = Lock("evicted", connection=ALIAS, ttl=ttl, watchdog=protected, on_lost=on_lost)
            assert lock.acquire(timeout=0)
            fence = lock.fence
            used = int(raw.info("memory")["used_memory"])
            raw.config_set("maxmemory", used + 512 * 1024)
            filler = b"x" * 1024
            last_seen = time.monotonic()
            for batch in range(5000):
                pipe = raw.pipeline(transaction=False)
                for i in range(50):
                    pipe.set(f"filler:{batch}:{i}", filler, ex=3600)
                pipe.execute()
                if not raw.exists(lock.key):
                    break
                last_seen = time.monotonic()
            else:
                raise RuntimeError("the lock key was never evicted")
            if not wait_until(lambda: lock.lost, timeout=5):
                result.violations.append("the evicted lock was never reported lost")
            noticed = (on_lost.at if protected else None) or time.monotonic()
            bound = ttl / 3 + 0.1
            if noticed - last_seen > bound:
                result.violations.append(
                    f"eviction noticed {1000 * (noticed - last_seen):.0f} ms after it happened "
                    f"(bound: one renewal interval, {1000 * ttl / 3:.0f} ms)"
                )
            raw.config_set("maxmemory", 0)
            counter = raw.get(lock.keys.fence)
            if counter is None or int(counter) < fence:
                result.violations.append(f"the fence counter was evicted ({counter!r})")
    finally:
        with contextlib.suppress(Exception):
            raw.config_set("maxmemory", 0)
            raw.config_set("maxmemory-policy", "noeviction")
        raw.close()
    return result


# -- 6. lifecycle: cancellations, exceptions, GC ------------------------------------------------


def lifecycle(lab: Lab, protected: bool) -> RunResult:
    """400 cancellations landing mid-command, exceptions and GC inside ``with``.

    Commands go through a proxy adding 3 ms each way, and cancels land at random times
    within 1.5 times the slowest of 20 concurrent uncancelled acquires measured first (at
    least 20 ms), so many arrive while the SET or the release is in flight however slow
    this machine is at the moment (a fixed window missed every SET on a loaded CI
    machine, where opening a connection alone took longer). After every
    clean-up task finished and 3 TTLs passed: zero lock keys, zero watchdogs. Acquires
    use a 30 s TTL so a leaked key cannot hide by expiring. Unprotected: no clean-up after
    a cancelled acquire.
    """
    from django_redislock import Lock, drivers
    from django_redislock import watchdog as watchdog_module
    from django_redislock.base import BaseLock

    async def noop(self: Any, token: str) -> None:
        return None

    result = RunResult()
    server = lab.server()
    proxy = lab.proxy(server)
    proxy.delay(0.003)
    raw = _raw(server)
    rng = random.Random()
    window = 0.02

    async def timed_acquire(i: int) -> float:
        lock = Lock(f"lc-cal-{i}", connection=ALIAS, ttl=30)
        started = time.perf_counter()
        await lock.aacquire()
        elapsed = time.perf_counter() - started
        await lock.arelease()
        return elapsed

    async def cancel_later(coro: Any) -> bool:
        """Cancel at a random moment; True if the call had already completed."""
        task = asyncio.ensure_future(coro)
        await asyncio.sleep(rng.uniform(0, window))
        completed = task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        return completed and not task.cancelled()

    async def acquire_cancelled(i: int) -> None:
        lock = Lock(f"lc-acq-{i}", connection=ALIAS, ttl=30)
        if await cancel_later(lock.aacquire()):
            await lock.arelease()  # too late to cancel: it holds the lock, not a leak

    async def release_cancelled(i: int) -> None:
        lock = Lock(f"lc-rel-{i}", connection=ALIAS, ttl=TTL, watchdog=True)
        await lock.aacquire()
        await cancel_later(lock.arelease())

    async def error_inside(i: int) -> None:
        with contextlib.suppress(ValueError):
            async with Lock(f"lc-exc-{i}", connection=ALIAS, ttl=TTL, watchdog=True):
                raise ValueError(i)

    async def main() -> None:
        nonlocal window
        # A new loop's pool opens fresh connections, as the cancelled calls need (a cancel
        # mid-command drops its connection).
        durations = await asyncio.gather(*(timed_acquire(i) for i in range(20)))
        window = max(window, 1.5 * max(durations))
        # Batches of 40 calls: redis-py 8 caps a pool at 100 connections (see
        # tests/test_faults.py::test_more_concurrent_async_acquires_than_the_pool_cap).
        for start in range(0, 200, 20):
            await asyncio.gather(
                *(acquire_cancelled(i) for i in range(start, start + 20)),
                *(release_cancelled(i) for i in range(start, start + 20)),
            )
        await asyncio.gather(*(error_inside(i) for i in range(40)))
        for _ in range(500):  # clean-up tasks of cancelled calls
            if not drivers._background_tasks:
                break
            await asyncio.sleep(0.01)

    def sync_part() -> None:
        for i in range(50):
            with contextlib.suppress(KeyError), Lock(f"lc-sync-{i}", connection=ALIAS, ttl=TTL):
                raise KeyError(i)
        for i in range(50):
            held = Lock(f"lc-gc-{i}", connection=ALIAS, ttl=TTL, watchdog=True)
            held.acquire()
            del held
        gc.collect()

    def lock_keys() -> list[bytes]:
        return [
            k for k in raw.scan_iter("redislock:{lc-*", count=1000) if not k.endswith(b":fence")
        ]

    try:
        with (
            lock_settings(proxy.url, SOCKET_TIMEOUT=2.0),
            patched(BaseLock, "_ado_cleanup", noop, active=not protected),
            patched(BaseLock, "_ado_unclaim", noop, active=not protected),  # (see above)
        ):
            asyncio.run(main())
            sync_part()
            leaked = [k for k in lock_keys() if k.startswith(b"redislock:{lc-acq-")]
            t0 = time.monotonic()
            wait_until(
                lambda: not lock_keys() and not watchdog_module.running(), timeout=3 * TTL + 1
            )
            left = lock_keys()
            if leaked:
                result.violations.append(
                    f"{len(leaked)} keys of cancelled acquires left after their clean-up "
                    f"(e.g. {leaked[0]!r})"
                )
            if left:
                result.violations.append(
                    f"{len(left)} keys left {time.monotonic() - t0:.1f}s later (e.g. {left[0]!r})"
                )
            if watchdog_module.running():
                result.violations.append("a watchdog thread or task is still running")
    finally:
        raw.close()
        proxy.close()
    return result


# -- 7. fork misuse --------------------------------------------------------------------------


def fork_misuse(lab: Lab, protected: bool) -> RunResult:
    """A forked child can neither release nor renew the parent's lock, nor GC-release it.

    Unprotected: the owner-pid check is switched off.
    """
    from django_redislock import Lock, LockNotOwned
    from django_redislock.lock import BaseLock

    def unchecked(self: Any, action: str) -> str:
        if self.token is None:
            raise LockNotOwned("not held")
        return self.token

    result = RunResult()
    server = lab.server()
    raw = _raw(server)
    try:
        with (
            lock_settings(server.url),
            patched(BaseLock, "_owned_token", unchecked, active=not protected),
        ):
            lock = Lock("forked", connection=ALIAS, ttl=1.0, watchdog=True)
            assert lock.acquire(timeout=0)
            token = lock.token.encode()
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child
                code = 0
                for action in (lock.extend, lock.release):
                    try:
                        action()
                        code |= 1
                    except LockNotOwned:
                        pass
                    except BaseException:
                        code |= 2
                del lock
                gc.collect()
                os.write(write, bytes([code]))
                os._exit(0)
            os.close(write)
            code = os.read(read, 1)
            os.close(read)
            os.waitpid(pid, 0)
            if code != b"\x00":
                result.violations.append(f"the child released or renewed the lock ({code!r})")
            # The parent still holds it, renewed by its own watchdog, for 2 more TTLs.
            deadline = time.monotonic() + 2 * lock.ttl
            while time.monotonic() < deadline:
                if token_at(raw, lock.key) != token.decode():
                    result.violations.append("the parent's lock was taken away by the child")
                    break
                time.sleep(0.01)
            with contextlib.suppress(LockNotOwned):
                lock.release()
    finally:
        raw.close()
    return result


# -- 8. server restart with and without AOF -----------------------------------------------------


def restart(lab: Lab, protected: bool) -> RunResult:
    """The lock server crashes (SIGKILL) while a lock is held and comes back at once.

    With ``appendonly yes`` + ``appendfsync always`` the lock and the fence counter
    survive: the next holder waits and gets a higher fence. Unprotected: no persistence —
    the next holder gets the lock at once (two holders) with the fence back at 1.
    """
    from django_redislock import Lock
    from django_redislock.connection import reset_clients

    result = RunResult()
    server = lab.fresh_server(appendonly=protected, appendfsync="always" if protected else None)
    history_path = lab.path(f"history-restart-{now_ns()}.jsonl")
    h1, h2 = History(history_path, "w1"), History(history_path, "w2")
    try:
        with lock_settings(server.url, SOCKET_TIMEOUT=1.0):
            for _ in range(3):  # fences 1..3 already handed out
                with Lock("restart", connection=ALIAS, ttl=2):
                    pass
            a = Lock("restart", connection=ALIAS, ttl=2)
            invoke_a = now_ns()
            assert a.acquire(timeout=0)
            _record_acquire(h1, a, invoke_a, True, naive=False)
            server.kill()
            server.start()
            reset_clients()
            b = Lock("restart", connection=ALIAS, ttl=2)
            invoke = now_ns()
            ok = b.acquire(timeout=0)
            _record_acquire(h2, b, invoke, ok, naive=False)
            _release(h1, a, invoke_a, naive=False)
            if not ok:
                invoke = now_ns()
                ok = b.acquire(timeout=5)
                _record_acquire(h2, b, invoke, ok, naive=False)
            _release(h2, b, invoke, naive=False)
        h1.close()
        h2.close()
        result.history = read_history(history_path)
        result.extend(check_windows(result.history))
        result.extend(check_issued_fences(result.history))
    finally:
        server.close()
    return result


# -- 9. server clock jump (libfaketime) --------------------------------------------------------

LIBFAKETIME = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
]


def libfaketime() -> str | None:
    return next((path for path in LIBFAKETIME if os.path.exists(path)), None)


_env_lock = threading.Lock()


def faketime_missing() -> str | None:
    return None if libfaketime() else "libfaketime not installed (apt package faketime)"


def clock_jump(lab: Lab, protected: bool) -> RunResult:
    """The server's wall clock jumps 10 s forward while a lock is held (libfaketime).

    Redis expires the key at once, a second holder gets the lock while the first still
    believes it holds it: a known limit of any TTL lock (the windows overlap; reported
    as a note, not a violation). What must hold is the fence: the first holder's late
    write is rejected. Unprotected: the resources do not check fences.
    """
    from django_redislock import Lock

    result = RunResult()
    lib = libfaketime()
    assert lib is not None
    stamp = lab.path(f"faketime-{now_ns()}")
    Path(stamp).write_text("+0\n")
    env = {
        "LD_PRELOAD": lib,
        "FAKETIME_TIMESTAMP_FILE": stamp,
        "FAKETIME_NO_CACHE": "1",
        "DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    with _env_lock:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            server = lab.fresh_server()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    resources, _, _ = _resources(lab, enforce=protected)
    history_path = lab.path(f"history-jump-{now_ns()}.jsonl")
    h1, h2 = History(history_path, "w1"), History(history_path, "w2")
    raw = _raw(server)
    try:
        with lock_settings(server.url):
            a = Lock("jump", connection=ALIAS, ttl=5)
            invoke_a = now_ns()
            assert a.acquire(timeout=0)
            _record_acquire(h1, a, invoke_a, True, naive=False)
            values = [resource.read() for resource in resources]
            Path(stamp).write_text("+10\n")
            if not wait_until(lambda: not raw.exists(a.key), timeout=5):
                raise RuntimeError("the clock jump did not expire the key (faketime inactive?)")
            b = Lock("jump", connection=ALIAS, ttl=5)
            invoke = now_ns()
            assert b.acquire(timeout=0)
            _record_acquire(h2, b, invoke, True, naive=False)
            _write_all(h2, resources, b.fence, "w2")
            for resource, value in zip(resources, values, strict=True):
                t = now_ns()
                ok = resource.write(value + 1, a.fence, "w1")
                h1.record("write", invoke_ns=t, ok=ok, fence=a.fence)
            _release(h1, a, invoke_a, naive=False)
            _release(h2, b, invoke, naive=False)
        h1.close()
        h2.close()
        result.history = read_history(history_path)
        overlap = check_windows(result.history)
        if overlap:
            result.notes.append(f"expected (documented limit): {overlap[0]}")
        result.extend(check_resources(resources))
    finally:
        raw.close()
        _close(resources)
        server.close()
    return result


def redlock_missing() -> str | None:
    try:
        from django_redislock import Redlock  # noqa: F401
    except ImportError as exc:
        return f"Redlock not importable: {exc}"
    return None


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


scenario(
    "paused before write (Redlock, 3 nodes)",
    "resources without fence check; naive holder (no validity bound)",
    available=redlock_missing,
)(paused_holder("before_write", redlock=True))
scenario("reply lost on acquire", "no compare-and-delete clean-up")(lost_acquire_reply)
scenario("reply lost on release", "retry is a plain DEL")(lost_release_reply)
for _how in ("sigstop", "debug-sleep", "client-pause"):
    scenario(
        f"server frozen ({_how})",
        "validity clock started after the reply (proxy adds 20 ms each way)",
    )(frozen_server(_how))
scenario("watchdog starved (GIL)", "trusts only the watchdog flag; no fence check")(
    watchdog_starved
)
scenario("watchdog cut off (proxy hold)", "renewal re-acquires (SET PX)")(watchdog_cut_off)
scenario("eviction (volatile-ttl)", "no watchdog")(eviction)
scenario("lifecycle (400 cancels, exc, GC)", "no clean-up after a cancelled acquire")(lifecycle)
scenario("fork misuse", "owner pid not checked")(fork_misuse)
scenario("server restart (AOF always)", "no persistence")(restart)
scenario("server clock jump (libfaketime)", "no fence check", available=faketime_missing)(
    clock_jump
)


def run_scenario(name: str, lab: Lab, *, protected: bool) -> RunResult:
    return SCENARIOS[name].run(lab, protected)
