"""``lock_for(instance, action=None, **kwargs)`` (DESIGN §9): a ``Lock`` named
``"<app_label>.<model_name>:<pk>[:<action>]"``; an unsaved instance is refused."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from django_redislock import Lock, lock_for, lock_info


@pytest.mark.django_db
def test_a_saved_instance_names_its_lock(lock_backend: Any) -> None:
    user = User.objects.create(username="ada")
    lock = lock_for(user, ttl=10, timeout=0, purpose="refund")
    assert isinstance(lock, Lock) and lock.name == f"auth.user:{user.pk}"
    assert (lock.ttl, lock.timeout, lock.purpose) == (10, 0, "refund")
    with lock:
        # Another instance of the same row (another query, another process) agrees.
        assert not lock_for(User.objects.get(pk=user.pk)).acquire(blocking=False)
        assert lock_for(user, action="refund").acquire(blocking=False)  # another action
        assert lock_info(f"auth.user:{user.pk}:refund") is not None
    assert lock_info(f"auth.user:{user.pk}") is None


def test_names_need_no_database() -> None:
    # An instance built from a known pk is enough: no query.
    assert lock_for(Group(pk=7)).name == "auth.group:7"
    assert lock_for(Group(pk=7), action="rename").name == "auth.group:7:rename"
    key = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert lock_for(Group(pk=key)).name == f"auth.group:{key}"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("obj", "action", "error"),
    [(Group(), None, "needs a saved auth.Group instance"), ("invoice:7", None, "model instance"),
     (Group(pk=7), "", "action must be a non-empty str"), (Group(pk=7), 3, "action must be"),
     (Group(pk=7), "a{b", "must not contain")],
)  # fmt: skip
def test_bad_input_is_refused(obj: Any, action: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        lock_for(obj, action=action)
    with pytest.raises(TypeError):
        lock_for(Group(pk=7), "refund")  # type: ignore[misc]  # action is keyword-only
