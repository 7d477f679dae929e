"""Deprecated: the old name of :mod:`django_redislock.locked_command`.

Renamed after what it holds (``LockedCommand``; the ``redislock`` management
command itself lives in ``management/commands/``). Importing this name still
works (it is the same module object) and warns once.
"""

import sys
import warnings

from . import locked_command

warnings.warn(
    "django_redislock.commands is deprecated; import django_redislock.locked_command "
    "(or LockedCommand from django_redislock itself)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = locked_command
