"""Security: unguessable tokens, names that cannot escape their key, bounded names from
untrusted input, the minimal ACL (tested on a real server with exactly that ACL), TLS.

The admin and the command hide tokens from users without ``release_heldlock`` and the
admin release needs POST + CSRF + permission: those tests live with the admin helper —
``tests/test_admin.py::test_every_view_checks_the_model_permission``,
``::test_changelist_for_a_viewer_has_no_release_controls_nor_tokens``,
``::test_release_flow_with_csrf_writes_log_and_signal`` and
``tests/test_redislock_command.py::test_release_with_token_prefix``.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.cluster import key_slot

from django_redislock import InvalidLockName, Lock, force_release, held_locks, lock_info, locked
from django_redislock import lock as lock_module
from django_redislock.keys import MAX_NAME_LENGTH, LockKeys, name_from_key
from django_redislock.testing import available_servers
from tests.support.held import token_at

#: The commands a lock user needs (see SECURITY.md). Scripts run with the caller's ACL.
CORE_COMMANDS = [
    "evalsha", "eval",  # the scripts (EVAL is the NOSCRIPT fallback)
    "get", "set", "incr", "del", "hset", "hget", "pexpire", "pttl", "publish",  # in scripts
    "time",  # in scripts, optional: a hand-off's heir then confirms it with an attempt
    "exists",  # locked()
    "subscribe", "unsubscribe",  # the shared release subscriber
]  # fmt: skip
# held_locks / the admin page (holders are read by a script; TYPE tells the kinds apart)
INSPECT_COMMANDS = ["scan", "type"]
# Called inside the semaphore's scripts (its main key is a sorted set).
SEMAPHORE_COMMANDS = ["hdel", "zadd", "zrem", "zcard", "zrank", "zrange", "zrangebyscore", "zscore"]
# And in the read-write lock's (its main key is a set of holders; the rest as the semaphore's).
RWLOCK_COMMANDS = ["sadd", "srem", "scard", "srandmember"]


# -- tokens ------------------------------------------------------------------------------------


def test_tokens_come_from_secrets_with_128_bits(monkeypatch):
    calls = []

    def fake(nbytes):
        calls.append(nbytes)
        return "from-secrets"

    monkeypatch.setattr(secrets, "token_urlsafe", fake)
    assert lock_module.new_token() == "from-secrets"
    assert calls == [16]  # 16 bytes = 128 bits


def test_tokens_are_unique_and_full_width():
    tokens = {lock_module.new_token() for _ in range(10_000)}
    assert len(tokens) == 10_000
    for token in list(tokens)[:100]:
        assert len(base64.urlsafe_b64decode(token + "==")) == 16


def test_each_acquire_gets_a_new_token(lock_backend):
    lock = Lock("tokens", ttl=5)
    seen = set()
    for _ in range(50):
        lock.acquire()
        assert token_at(lock_backend.client(), lock.key) == lock.token
        seen.add(lock.token)
        lock.release()
    assert len(seen) == 50


# -- names and keys ---------------------------------------------------------------------------

valid_names = st.text(min_size=1, max_size=MAX_NAME_LENGTH).filter(
    lambda n: n.isprintable() and "{" not in n and "}" not in n
)


@settings(max_examples=500)
@given(name=valid_names, other=valid_names)
def test_names_stay_inside_prefix_and_hash_tag(name, other):
    keys = LockKeys.build("redislock", name)
    assert keys.key == f"redislock:{{{name}}}"
    # The hash tag is exactly the name: every key of one lock is in one slot (no CROSSSLOT).
    tag = keys.key[keys.key.index("{") + 1 : keys.key.index("}")]
    assert tag == name
    slots = {key_slot(k.encode()) for k in (keys.key, keys.fence, keys.meta, keys.channel)}
    assert len(slots) == 1
    assert name_from_key("redislock", keys.key) == name
    for companion in (keys.fence, keys.meta, keys.channel):
        assert name_from_key("redislock", companion) is None
    if other != name:
        theirs = LockKeys.build("redislock", other)
        mine = {keys.key, keys.fence, keys.meta, keys.channel}
        assert mine.isdisjoint({theirs.key, theirs.fence, theirs.meta, theirs.channel})


@settings(max_examples=200)
@given(name=st.text(max_size=20).map(lambda s: s + "}") | st.text(max_size=20).map("{".__add__))
def test_brace_names_are_refused(name):
    with pytest.raises(InvalidLockName):
        Lock(name)


@settings(max_examples=200)
@given(prefix=st.sampled_from(["a", "a:", "redislock", "x:y"]), name=valid_names)
def test_no_collision_across_prefixes(prefix, name):
    """A key of prefix P is never a key of another prefix Q (the brace ends the name)."""
    key = LockKeys.build(prefix, name).key
    for other in ("a", "a:", "redislock", "x:y"):
        if other != prefix:
            assert name_from_key(other, key) is None or not key.startswith(f"{other}:{{")


def test_untrusted_view_kwargs_cannot_make_unbounded_names(lock_backend, monkeypatch):
    """A URL kwarg of any length becomes InvalidLockName before Redis is touched."""

    @locked("invoice:{invoice_id}", ttl=5)
    def work(invoice_id):
        return "done"

    assert work("42") == "done"

    def refuse(*args, **kwargs):
        raise AssertionError("a network call was attempted")

    from django_redislock.connection import reset_clients

    reset_clients()
    monkeypatch.setattr(socket.socket, "connect", refuse)
    for evil in ("x" * 10_000, "a}b", "a{b", "line\nbreak", "x" * (MAX_NAME_LENGTH - 7)):
        with pytest.raises(InvalidLockName):
            work(evil)
    monkeypatch.undo()
    assert lock_backend.client().keys("redislock:{invoice:x*") == []


# -- the minimal ACL, on a real server ----------------------------------------------------------


def _acl_user(server, commands):
    raw = server.client()
    raw.execute_command(
        "ACL", "SETUSER", "locker", "reset", "on", ">s3cret", "resetkeys", "resetchannels",
        "~redislock:*", "&redislock:*", "-@all", *[f"+{c}" for c in commands],
    )  # fmt: skip
    return f"redis://locker:s3cret@{server.host}:{server.port}/0"


def _use_alias(settings, alias, url):
    settings.CACHES = {
        **settings.CACHES,
        alias: {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url},
    }


@pytest.mark.parametrize("server_name", [spec.name for spec in available_servers()])
def test_the_lock_works_with_exactly_the_minimal_acl(settings, make_server, server_name):
    server = make_server(server_name)
    url = _acl_user(server, CORE_COMMANDS + INSPECT_COMMANDS)
    _use_alias(settings, "acl", url)
    holder = Lock("acl", connection="acl", ttl=0.3, watchdog=True)
    assert holder.acquire()
    waiter = Lock("acl", connection="acl", ttl=5)
    got = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=10)))
    thread.start()
    # The waiter subscribes (pub/sub) while the watchdog renews the holder.
    raw = server.client()
    first = holder.valid_until
    for _ in range(1000):
        if raw.pubsub_numsub(holder.keys.channel)[0][1] and holder.valid_until != first:
            break
        threading.Event().wait(0.005)
    assert holder.owned() and holder.locked() and holder.remaining() > 0 and not holder.lost
    holder.extend()
    info = lock_info("acl", connection="acl")
    assert info is not None and info.fence == holder.fence
    assert [i.name for i in held_locks(connection="acl")] == ["acl"]
    raw.script_flush()  # NOSCRIPT: the EVAL fallback is allowed too
    holder.release()
    thread.join(10)
    assert got == [True]
    waiter.release()

    async def twins():
        lock = Lock("acl-async", connection="acl", ttl=5)
        async with lock:
            assert await lock.aowned()

    asyncio.run(twins())
    # Nothing outside the prefix is reachable for this user.
    denied = server.client(username="locker", password="s3cret")
    with pytest.raises(Exception, match=r"(?i)permission|noperm"):
        denied.get("sessions:abc")
    with pytest.raises(Exception, match=r"(?i)permission|noperm"):
        denied.flushall()


@pytest.mark.parametrize("server_name", [spec.name for spec in available_servers()])
def test_a_semaphore_works_with_exactly_the_minimal_acl(settings, make_server, server_name):
    from django_redislock import Semaphore

    server = make_server(server_name)
    _use_alias(
        settings, "acl", _acl_user(server, CORE_COMMANDS + INSPECT_COMMANDS + SEMAPHORE_COMMANDS)
    )
    first = Semaphore("acl-sem", 1, connection="acl", ttl=5, watchdog=True)
    assert first.acquire()
    second = Semaphore("acl-sem", 1, connection="acl", ttl=5)
    got = []
    thread = threading.Thread(target=lambda: got.append(second.acquire(timeout=10)))
    thread.start()
    raw = server.client()
    for _ in range(1000):  # in line
        if raw.zcard("redislock:{acl-sem}:queue"):
            break
        threading.Event().wait(0.005)
    assert first.owned() and first.available() == 0 and first.holders()
    first.extend()
    info = lock_info("acl-sem", connection="acl")
    assert info is not None and info.kind == "semaphore" and info.limit == 1
    first.release()
    thread.join(10)
    assert got == [True]
    assert force_release("acl-sem", connection="acl")


@pytest.mark.parametrize("server_name", [spec.name for spec in available_servers()])
def test_a_read_write_lock_works_with_exactly_the_minimal_acl(settings, make_server, server_name):
    from django_redislock import ReadWriteLock

    server = make_server(server_name)
    commands = CORE_COMMANDS + INSPECT_COMMANDS + SEMAPHORE_COMMANDS + RWLOCK_COMMANDS
    _use_alias(settings, "acl", _acl_user(server, commands))
    rw = ReadWriteLock("acl-rw", connection="acl", ttl=5)
    reader = rw.read_lock(watchdog=True)
    assert reader.acquire() and rw.read_lock().acquire(blocking=False)
    writer = rw.write_lock()
    assert not writer.acquire(timeout=0.1)  # stood in line, then left it
    assert reader.owned() and len(rw.holders()) == 2 and writer.locked()
    reader.extend()
    info = lock_info("acl-rw", connection="acl")
    assert info is not None and info.kind == "read" and len(info.holders) == 2
    reader.release()
    assert force_release("acl-rw", connection="acl")
    assert writer.acquire(blocking=False)
    writer.release()


def test_without_time_a_hand_off_is_confirmed_by_an_attempt(settings, make_server):
    server = make_server()
    url = _acl_user(server, [c for c in CORE_COMMANDS if c != "time"])
    _use_alias(settings, "acl", url)
    holder = Lock("acl-no-time", connection="acl", ttl=5)
    assert holder.acquire()
    waiter = Lock("acl-no-time", connection="acl", ttl=5)
    got = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=10)))
    thread.start()
    raw = server.client()
    for _ in range(1000):  # the waiter holds the claim on the next turn
        if raw.exists(holder.keys.claim):
            break
        threading.Event().wait(0.005)
    holder.release()  # handed over with no server time in the message
    thread.join(10)
    assert got == [True]
    assert waiter.owned() and not waiter.lost
    waiter.release()


@pytest.mark.parametrize("missing", ["evalsha", "publish", "pexpire", "incr"])
def test_each_core_command_is_needed(settings, make_server, missing):
    """Drop one command of the set: some lock operation fails (the set is minimal)."""
    from django_redislock import RedisLockError

    server = make_server()
    url = _acl_user(server, [c for c in CORE_COMMANDS if c != missing])
    _use_alias(settings, "acl", url)
    with pytest.raises(RedisLockError):
        lock = Lock("acl", connection="acl", ttl=5)
        lock.acquire(timeout=0)
        lock.extend()
        lock.release()  # nobody waits: nothing to publish
        lock.acquire(timeout=0)
        force_release("acl", connection="acl")  # wakes every waiter


# -- TLS ------------------------------------------------------------------------------------


def test_rediss_urls_give_tls_connections(settings):
    """``rediss://`` in the django-redis LOCATION makes the lock's own pool use TLS."""
    import redis

    from django_redislock.connection import lock_client, reset_clients

    settings.CACHES = {
        **settings.CACHES,
        "tls": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "rediss://127.0.0.1:1/0?ssl_cert_reqs=required",
        },
    }
    reset_clients()
    pool = lock_client("tls").connection_pool
    assert issubclass(pool.connection_class, redis.SSLConnection)
    assert pool.connection_kwargs.get("ssl_cert_reqs") in ("required", 2)
