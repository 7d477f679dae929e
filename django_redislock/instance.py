"""``lock_for``: a lock named after a saved model instance, so every place that guards
"this invoice" agrees on one name without spelling it."""

from __future__ import annotations

from typing import Any

from .keys import validate_name
from .lock import Lock


def instance_name(obj: Any, action: str | None = None) -> str:
    """``"<app_label>.<model_name>:<pk>"`` (plus ``":<action>"``) for a saved instance."""
    meta = getattr(obj, "_meta", None)
    if meta is None or not hasattr(obj, "pk"):
        raise ValueError(f"lock_for() takes a Django model instance, not {obj!r}")
    if obj.pk is None:
        raise ValueError(
            f"lock_for() needs a saved {meta.label} instance (its pk is None): save it first, "
            "or lock a name of your own"
        )
    if action is not None and (not isinstance(action, str) or not action):
        raise ValueError(f"action must be a non-empty str or None, not {action!r}")
    name = f"{meta.app_label}.{meta.model_name}:{obj.pk}"
    return validate_name(name if action is None else f"{name}:{action}")


def lock_for(obj: Any, *, action: str | None = None, **lock_kwargs: Any) -> Lock:
    """A :class:`~django_redislock.Lock` named after ``obj``, a saved model instance:
    ``"<app_label>.<model_name>:<pk>"``, plus ``":<action>"`` when given (one instance,
    several independent locks: ``action="refund"``). ``lock_kwargs`` go to ``Lock``
    (``ttl``, ``timeout``, ``watchdog``, ``reentrant``...). An unsaved instance (pk
    ``None``) raises ``ValueError``; so does anything but a model instance."""
    return Lock(instance_name(obj, action), **lock_kwargs)


__all__ = ["instance_name", "lock_for"]
