"""Bad input and Redis errors (Hypothesis).

* Every invalid input is a ``ValueError`` raised before any network call: the lock's
  connection points at a closed port AND opening any socket fails the test.
* Nothing valid leaves a key behind on any error path.
* Redis errors (OOM, NOSCRIPT, READONLY, NOPERM) map to documented exceptions.
  CROSSSLOT: the lock keeps all its keys in one hash slot (``P:{N}``, checked in
  ``tests/test_security.py``); a cluster run belongs to the cluster suite.
"""

from __future__ import annotations

import math
import socket
import string
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from django_redislock import (
    InvalidLockName,
    Lock,
    LockBackendUnavailable,
    LockNotOwned,
    RedisLockError,
)
from django_redislock.connection import reset_clients
from django_redislock.keys import MAX_NAME_LENGTH, MAX_SECONDS
from django_redislock.testing import available_servers
from tests.support.held import token_at

CLOSED = "redis://127.0.0.1:1/0"  # nothing listens on port 1
FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def name_is_valid(name: object) -> bool:
    return (
        isinstance(name, str)
        and 1 <= len(name) <= MAX_NAME_LENGTH
        and name.isprintable()
        and "{" not in name
        and "}" not in name
    )


def seconds_valid(value: object, *, zero: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    value = float(value)
    if math.isnan(value) or math.isinf(value) or value > MAX_SECONDS:
        return False
    return value >= 0 if zero else value > 0


def ttl_valid(value: object) -> bool:
    return seconds_valid(value) and round(float(value) * 1000) >= 1


names = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=250, max_size=270),
    st.text(alphabet="{}:*?\x00\n\t ab", max_size=20),
    st.binary(max_size=20),
    st.integers(),
    st.none(),
)
numbers = st.one_of(
    # Finite values above 1e15 s have tests of their own below.
    st.floats(allow_nan=True, allow_infinity=True).filter(
        lambda x: not math.isfinite(x) or abs(x) <= 1e15
    ),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.sampled_from([0, 0.0, -0.0, 0.0004, 0.0005, 0.0006, 1e-9, True, False]),
    st.text(max_size=3),
    st.none(),
)


@pytest.fixture
def closed(settings):
    """The lock's alias points at a closed port, and no socket may even be opened."""
    settings.CACHES = {
        **settings.CACHES,
        "closed": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": CLOSED},
    }
    reset_clients()
    return "closed"


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a network call was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_the_closed_alias_really_is_the_network(closed):
    """The control: a valid lock on the closed alias does reach for the network."""
    with pytest.raises(LockBackendUnavailable):
        Lock("valid", connection=closed).acquire(timeout=0)


@settings(max_examples=300, suppress_health_check=FIXTURES, deadline=None)
@given(name=names)
@example("")
@example("x" * 257)
@example("a{b}")
@example("tab\there")
@example(b"bytes")
@example("é" * 256)
def test_names(closed, no_network, name):
    if name_is_valid(name):
        lock = Lock(name, connection=closed)
        assert lock.key == f"redislock:{{{name}}}"
    else:
        with pytest.raises(InvalidLockName) as info:
            Lock(name, connection=closed)
        assert isinstance(info.value, ValueError)


@settings(max_examples=300, suppress_health_check=FIXTURES, deadline=None)
@given(ttl=numbers, timeout=numbers)
@example(float("nan"), 1)
@example(float("inf"), 1)
@example(-1, 1)
@example(0.0004, 1)
@example(1, -1)
@example(1, float("nan"))
def test_ttls_and_timeouts(closed, no_network, ttl, timeout):
    good = (ttl is None or ttl_valid(ttl)) and (
        timeout is None or seconds_valid(timeout, zero=True)
    )
    if good:
        lock = Lock("t", ttl=ttl, timeout=timeout, connection=closed)
        assert lock.ttl >= 0.001
    else:
        with pytest.raises(ValueError):
            Lock("t", ttl=ttl, timeout=timeout, connection=closed)


@settings(max_examples=100, suppress_health_check=FIXTURES, deadline=None)
@given(value=numbers, blocking=st.one_of(st.booleans(), st.none(), st.integers(0, 1)))
def test_call_arguments(closed, no_network, value, blocking):
    """acquire(timeout=, blocking=) and extend(ttl=) validate before any network call."""
    lock = Lock("args", connection=closed)
    if not seconds_valid(value, zero=True) and value is not None:
        with pytest.raises(ValueError):
            lock.acquire(timeout=value)
    if blocking is not None and not isinstance(blocking, bool):
        with pytest.raises(ValueError):
            lock.acquire(blocking=blocking)
    if value is not None and not ttl_valid(value):
        with pytest.raises(ValueError):
            lock.extend(ttl=value)
    else:
        with pytest.raises(LockNotOwned):  # valid ttl, not held: still no network
            lock.extend(ttl=value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_hold": 0},
        {"max_hold": -1},
        {"max_hold": float("nan")},
        {"wait_replicas": -1},
        {"wait_replicas": 1.5},
        {"wait_replicas": True},
        {"wait_timeout": 0},
        {"on_lost": "not callable"},
        {"purpose": 42},
        {"blocking": "yes"},
        {"connection": ""},
        {"connection": 5},
    ],
)
def test_other_arguments(closed, no_network, kwargs):
    with pytest.raises(ValueError):
        Lock("other", **{"connection": closed, **kwargs})


def test_huge_ttl_is_a_value_error_before_the_network(closed, no_network):
    with pytest.raises(ValueError):
        Lock("huge", ttl=1e17, connection=closed)


def test_astronomic_ttl_is_a_value_error(closed, no_network):
    with pytest.raises(ValueError):
        Lock("astronomic", ttl=1.7e306, connection=closed)


def test_huge_ttl_leaves_no_key(real_backend):
    """A TTL Redis would refuse is a ValueError up front: nothing reaches the server."""
    with pytest.raises(ValueError, match="at most"):
        Lock("huge", ttl=1e17).acquire(timeout=0)
    assert real_backend.client().keys("*") == []


# -- valid input on real servers --------------------------------------------------------------

valid_names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cc", "Cs", "Zl", "Zp"]).filter(
        lambda c: c not in "{}" and c.isprintable()
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, suppress_health_check=FIXTURES, deadline=None)
@given(
    name=valid_names,
    ttl=st.floats(min_value=0.001, max_value=1e6),
    path=st.sampled_from(["exception", "lost", "release-twice", "extend-lost"]),
)
@example(name="é:*?[x]\\", ttl=0.001, path="lost")
def test_no_error_path_leaves_a_key(real_backend, name, ttl, path):
    client = real_backend.client()
    client.flushall()
    lock = Lock(name, ttl=max(ttl, 0.05) if path != "lost" else 0.001)
    if path == "exception":
        with pytest.raises(KeyError), lock:
            raise KeyError(name)
    elif path == "lost":
        lock.acquire()
        assert _gone(client, lock.key)
        with pytest.raises(LockNotOwned):
            lock.release()
    elif path == "release-twice":
        lock.acquire()
        lock.release()
        with pytest.raises(LockNotOwned):
            lock.release()
    else:
        lock.acquire()
        client.delete(lock.key, f"{lock.key}:meta")  # taken away (a FLUSHDB, a failover)
        with pytest.raises(LockNotOwned):
            lock.extend()
        with pytest.raises(LockNotOwned):
            lock.release()
    # Only the fence counter (no TTL by design) may remain.
    assert [k for k in client.keys("*") if not k.endswith(b":fence")] == []


def _gone(client, key, timeout=2.0):
    deadline = time.monotonic() + timeout
    while client.exists(key):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.mark.parametrize("decode", [True, False])
def test_decode_responses(settings, lock_backend, decode):
    """A django-redis pool with decode_responses=True or False: every call works."""
    from django_redislock import force_release, held_locks, lock_info

    config = lock_backend.cache_config()
    options = config.setdefault("OPTIONS", {})
    options.setdefault("CONNECTION_POOL_KWARGS", {})["decode_responses"] = decode
    settings.CACHES = {**settings.CACHES, "default": config}
    lock = Lock("decoded", ttl=5)
    assert lock.acquire(timeout=0)
    assert lock.owned() and lock.locked() and 0 < lock.remaining() <= 5
    lock.extend(10)
    info = lock_info("decoded")
    assert info is not None and info.fence == lock.fence and isinstance(info.name, str)
    assert [i.name for i in held_locks()] == ["decoded"]
    lock.release()
    assert lock_info("decoded") is None
    other = Lock("decoded", ttl=5)
    other.acquire()
    assert force_release("decoded") is True
    assert lock_backend.client().keys("redislock:{decoded}") == []


# -- Redis errors -------------------------------------------------------------------------------


def _alias(settings, url, name="errs"):
    settings.CACHES = {
        **settings.CACHES,
        name: {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url},
    }
    return name


@pytest.mark.parametrize("server_name", [s.name for s in available_servers()])
def test_oom_is_a_redis_lock_error_and_release_still_works(settings, make_server, server_name):
    server = make_server(server_name)
    alias = _alias(settings, server.url)
    raw = server.client()
    held = Lock("held", connection=alias, ttl=30)
    assert held.acquire()
    raw.config_set("maxmemory-policy", "noeviction")
    raw.config_set("maxmemory", 1)
    with pytest.raises(RedisLockError) as info:
        Lock("oom", connection=alias, ttl=30).acquire(timeout=0)
    assert not isinstance(info.value, (LockBackendUnavailable,))
    assert "maxmemory" in str(info.value) or "OOM" in str(info.value)
    assert raw.keys("redislock:{oom}*") == []
    held.extend()  # PEXPIRE is allowed under OOM
    held.release()  # and a full server never makes a lock stuck
    assert raw.exists(held.key) == 0


def test_noscript_falls_back_to_eval(lock_backend):
    raw = lock_backend.client()
    lock = Lock("noscript", ttl=5)
    lock.acquire()
    raw.script_flush()
    lock.extend()
    raw.script_flush()
    lock.release()
    raw.script_flush()
    assert lock.acquire(timeout=0)
    lock.release()


def _readonly_params():
    out = []
    for spec in available_servers():
        # Redis 6.2 wraps a script's READONLY error in "ERR Error running script";
        # lock.is_unreachable() recognises it by its message.
        out.append(pytest.param(spec.name, id=spec.name))
    return out


@pytest.mark.parametrize("server_name", _readonly_params())
def test_readonly_replica_is_backend_unavailable(settings, make_server, server_name):
    primary = make_server(server_name)
    replica = make_server(server_name)
    raw = replica.client()
    raw.replicaof(primary.host, primary.port)
    alias = _alias(settings, replica.url)
    with pytest.raises(LockBackendUnavailable) as info:
        Lock("ro", connection=alias).acquire(timeout=0)
    assert "read only" in str(info.value).lower()
    assert raw.keys("*") == []


def test_noperm_without_eval_is_a_redis_lock_error(settings, make_server):
    server = make_server()
    raw = server.client()
    raw.execute_command(
        "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "&*", "+@all", "-eval", "-evalsha"
    )
    alias = _alias(settings, f"redis://noeval:pw@{server.host}:{server.port}/0")
    with pytest.raises(RedisLockError) as info:
        Lock("noperm", connection=alias).acquire(timeout=0)
    assert not isinstance(info.value, LockBackendUnavailable)
    assert "permission" in str(info.value).lower() or "noperm" in str(info.value).lower()
    assert raw.keys("*") == []


def test_printable_ascii_names_round_trip(real_backend):
    name = string.printable.strip().replace("{", "").replace("}", "")[:MAX_NAME_LENGTH]
    name = "".join(c for c in name if c.isprintable())
    with Lock(name, ttl=5) as lock:
        assert token_at(real_backend.client(), lock.key) == lock.token
