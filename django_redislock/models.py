"""``HeldLock``: a placeholder model for the admin page of held locks.

Locks live in Redis, not in a table. The unmanaged model (``managed=False``, no
table is ever created) gives the admin a real index entry, a real content type
for ``LogEntry`` and real permissions: ``view_heldlock`` to list and inspect,
``release_heldlock`` to force-release. Its managers return empty querysets
without touching the database, so ``dumpdata`` (and anything else that walks
every model) does not trip over the missing table.
"""

from __future__ import annotations

from typing import Any

from django.db import models


class HeldLockQuerySet(models.QuerySet):
    """Always empty: there is no table to query."""


class HeldLockManager(models.Manager.from_queryset(HeldLockQuerySet)):  # type: ignore[misc]
    def get_queryset(self) -> models.QuerySet[Any]:
        return super().get_queryset().none()


class HeldLock(models.Model):
    """A lock held in Redis (read live with :func:`django_redislock.held_locks`)."""

    name = models.CharField(max_length=256, primary_key=True)

    objects = HeldLockManager()

    class Meta:
        managed = False
        verbose_name = "held lock"
        verbose_name_plural = "held locks"
        default_permissions = ("view",)
        permissions = [("release_heldlock", "Can force-release a held lock")]
        # dumpdata --all and related lookups use the base manager: keep it empty too.
        base_manager_name = "objects"

    def __str__(self) -> str:
        return self.name
