"""Celery integration: ``LockedTask``, one run at a time per key (``docs/celery.md``).

Importing this module imports Celery (the ``celery`` extra); importing
``django_redislock`` does not.
"""

from .options import LockOptions
from .task import SKIPPED, LockedTask, is_skipped

__all__ = ["SKIPPED", "LockOptions", "LockedTask", "is_skipped"]
