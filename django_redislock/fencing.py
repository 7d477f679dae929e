"""Fencing: let the protected resource reject a stale lock holder.

A lock can be held twice (a holder paused past its TTL, a failover). Every
holder gets a fence that grows with each new holder; the resource remembers
the highest fence it accepted and refuses writes carrying a lower or equal one.

For the ORM, :func:`fenced_update` is one conditional ``UPDATE ... WHERE fence
< %s``; :class:`FencedModel` adds the column. For a resource in Redis,
:func:`fenced_set` does the same in one Lua call.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q, QuerySet

from .exceptions import StaleFence
from .scripts import FENCED_SET
from .transports import wire


def fence_of(lock_or_fence: Any) -> int:
    """The fence of a held lock object, or an int fence passed as is."""
    fence = getattr(lock_or_fence, "fence", lock_or_fence)
    if isinstance(fence, bool) or not isinstance(fence, int) or fence < 1:
        raise ValueError(
            f"A fence must be a positive int or a held lock with fencing on, not {lock_or_fence!r}"
        )
    return fence


def fenced_update(
    queryset: QuerySet[Any], fence: Any, *, field: str = "fence", **values: Any
) -> int:
    """``queryset.update(**values)`` only where the stored fence is lower than ``fence``.

    ``fence`` is an int or a held lock (its ``.fence``). The stored fence is set
    to ``fence`` in the same UPDATE. Returns the number of rows written; raises
    :class:`StaleFence` when rows exist but a newer (or the same) holder
    already wrote them. An empty queryset returns 0.
    """
    number = fence_of(fence)
    fresh = Q(**{f"{field}__lt": number}) | Q(**{f"{field}__isnull": True})
    written = queryset.filter(fresh).update(**{field: number}, **values)
    if written == 0 and queryset.exists():
        stored = queryset.order_by(f"-{field}").values_list(field, flat=True).first()
        raise StaleFence(
            f"Rejected a write with fence {number}: {queryset.model.__name__} already has "
            f"fence {stored} from a newer lock holder.",
            lock_name=getattr(fence, "name", None),
            fence=number,
        )
    return written


class FencedModel(models.Model):
    """Abstract model with the ``fence`` column that :func:`fenced_update` checks."""

    fence = models.BigIntegerField(default=0, help_text="Fence of the last lock holder that wrote.")

    class Meta:
        abstract = True

    def fenced_save(self, fence: Any, *, fields: list[str] | None = None) -> None:
        """Save ``fields`` (default: all concrete fields) only if ``fence`` is newer.

        Raises :class:`StaleFence` when a newer holder already wrote this row.
        """
        names = fields or [
            f.attname for f in self._meta.concrete_fields if not f.primary_key and f.name != "fence"
        ]
        values = {name: getattr(self, name) for name in names}
        fenced_update(type(self)._default_manager.filter(pk=self.pk), fence, **values)
        self.fence = fence_of(fence)


def fenced_set(key: str, value: Any, fence: Any, *, connection: str | None = None) -> bool:
    """Set Redis ``key`` to ``value`` only if ``fence`` is newer than the last writer's.

    The last accepted fence is kept in ``<key>:fence``. Returns True when written,
    False when rejected.
    """
    from .conf import get_config
    from .connection import lock_client

    alias = get_config()["CONNECTION"] if connection is None else connection
    number = fence_of(fence)
    call = wire.Call(FENCED_SET, (key, f"{key}:fence"), (value, number))
    return wire.run(lock_client(alias), call) == 1
