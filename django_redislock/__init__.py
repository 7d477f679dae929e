"""django-redislock: distributed locks on Redis for Django projects.

Public names are imported lazily so importing the package never needs Django's
app registry to be ready.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .exceptions import (
    InvalidLockName,
    LockBackendUnavailable,
    LockConfigurationError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    RedisLockError,
    StaleFence,
)

__version__ = "0.1.0"

_LAZY = {
    "Lock": ".lock",
    "Redlock": ".redlock",
    "Election": ".election",
    "locked": ".decorators",
    "lock_view": ".decorators",
    "lock_command": ".decorators",
    "LockedCommand": ".locked_command",
    "held_locks": ".inspection",
    "lock_info": ".inspection",
    "alock_info": ".inspection",
    "force_release": ".inspection",
    "LockInfo": ".inspection",
    "LockHolder": ".inspection",
    "LockWaiter": ".inspection",
    "LockEvent": ".history",
    "lock_history": ".history",
    "Semaphore": ".semaphore",
    "ReadWriteLock": ".rwlock",
    "MultiLock": ".multilock",
    "lock_for": ".instance",
}

if TYPE_CHECKING:
    from .election import Election
    from .instance import lock_for
    from .lock import Lock
    from .multilock import MultiLock
    from .rwlock import ReadWriteLock
    from .semaphore import Semaphore

__all__ = [
    "Election",
    "InvalidLockName",
    "Lock",
    "LockBackendUnavailable",
    "LockConfigurationError",
    "LockEvent",
    "LockHolder",
    "LockInfo",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwned",
    "LockWaiter",
    "LockedCommand",
    "MultiLock",
    "ReadWriteLock",
    "RedisLockError",
    "Redlock",
    "Semaphore",
    "StaleFence",
    "alock_info",
    "force_release",
    "held_locks",
    "lock_command",
    "lock_for",
    "lock_history",
    "lock_info",
    "lock_view",
    "locked",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_redislock' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value
