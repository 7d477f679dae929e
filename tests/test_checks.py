"""System checks of the REDISLOCK settings, run through Django's run_checks()."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks


def ids(deploy: bool = False) -> list[str]:
    messages = run_checks(include_deployment_checks=deploy)
    return sorted(m.id for m in messages if m.id.startswith("redislock."))


def test_default_settings_are_clean():
    assert ids() == []


def test_missing_alias(settings):
    settings.REDISLOCK = {"CONNECTION": "nope"}
    messages = [m for m in run_checks() if m.id == "redislock.E001"]
    assert len(messages) == 1
    assert "'nope'" in messages[0].msg and messages[0].hint


def test_not_django_redis(settings):
    settings.CACHES = {
        **settings.CACHES,
        "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    settings.REDISLOCK = {"CONNECTION": "locmem"}
    assert "redislock.E002" in ids()


def test_sharded_client(settings):
    settings.CACHES = {
        **settings.CACHES,
        "sharded": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": ["redis://127.0.0.1:1/0", "redis://127.0.0.1:2/0"],
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.ShardClient"},
        },
    }
    settings.REDISLOCK = {"CONNECTION": "sharded"}
    assert "redislock.E002" in ids()


@pytest.mark.parametrize("ttl", [0, -5, float("nan"), "30"])
def test_bad_ttl(settings, ttl):
    settings.REDISLOCK = {"TTL": ttl}
    assert ids() == ["redislock.E003"]


@pytest.mark.parametrize("nodes", [["default"], ["default", "default"], "default"])
def test_redlock_node_count(settings, nodes):
    settings.REDISLOCK = {"REDLOCK_CONNECTIONS": nodes}
    assert "redislock.E004" in ids()


def test_redlock_unknown_node(settings):
    settings.REDISLOCK = {"REDLOCK_CONNECTIONS": ["default", "a", "b"]}
    assert ids().count("redislock.E001") == 2


def test_bad_prefix(settings):
    settings.REDISLOCK = {"KEY_PREFIX": "bad{prefix}"}
    assert ids() == ["redislock.E005"]


def test_unknown_setting_is_a_warning(settings):
    settings.REDISLOCK = {"TTLL": 3}
    messages = [m for m in run_checks() if m.id == "redislock.W002"]
    assert len(messages) == 1 and "TTLL" in messages[0].msg


def test_evicting_policy_warns_on_deploy(real_backend):
    real_backend.client().config_set("maxmemory-policy", "volatile-ttl")
    try:
        assert "redislock.W001" in ids(deploy=True)
        assert "redislock.W001" not in ids()  # plain check does not ask the server
    finally:
        real_backend.client().config_set("maxmemory-policy", "noeviction")
    assert "redislock.W001" not in ids(deploy=True)
