"""Releasing a lock only after the database transaction around it ended.

Releasing inside an open ``transaction.atomic()`` block lets the next holder
read rows this transaction has not committed yet: a lost update. So when the
``with`` block of a lock ends inside an atomic block, the release waits for the
transaction: it runs from ``transaction.on_commit`` when it commits, and, when
it rolls back (Django drops the on-commit callbacks of a rolled-back
transaction or savepoint), from a finalizer on the dropped callback, at once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any


class _ReleaseOnCommit:
    """The on-commit callback. Its finalizer is the release on rollback."""

    __slots__ = ("__weakref__", "done", "release")

    def __init__(self, release: Callable[[], None], done: list[bool]) -> None:
        self.release = release
        self.done = done

    def __call__(self) -> None:
        self.done[0] = True
        self.release()


def _release_if_dropped(release: Callable[[], None], done: list[bool]) -> None:
    if not done[0]:
        done[0] = True
        release()


def open_atomic_alias() -> str | None:
    """The alias of a database connection of this thread inside ``atomic()``, if any."""
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if connection.in_atomic_block and any(
            # The blocks Django's TestCase opens around each test never commit:
            # only the application's own transactions count.
            not getattr(block, "_from_testcase", False)
            for block in connection.atomic_blocks
        ):
            return str(connection.alias)
    return None


def defer_release_to_commit(release: Callable[[], None]) -> bool:
    """Arrange for ``release()`` to run when the open transaction ends.

    Returns False (release now) when no transaction is open.
    """
    from django.db import transaction

    from .conf import get_config

    if not get_config()["RELEASE_AFTER_COMMIT"]:
        return False
    alias = open_atomic_alias()
    if alias is None:
        return False
    done = [False]
    callback = _ReleaseOnCommit(release, done)
    weakref.finalize(callback, _release_if_dropped, release, done)
    transaction.on_commit(callback, using=alias)
    return True


__all__: list[Any] = ["defer_release_to_commit", "open_atomic_alias"]
