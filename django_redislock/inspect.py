"""Deprecated: the old name of :mod:`django_redislock.inspection`.

Renamed because ``inspect`` shadowed the standard library module inside the
package. Importing this name still works (it is the same module object) and
warns once.
"""

import sys
import warnings

from . import inspection

warnings.warn(
    "django_redislock.inspect is deprecated; import django_redislock.inspection "
    "(or the names from django_redislock itself)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = inspection
