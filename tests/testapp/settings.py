"""The test settings with ``tests.testapp`` installed, for ``manage.py`` child processes."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]
