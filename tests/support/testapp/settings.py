"""The test settings with ``tests.support.testapp`` installed, for ``manage.py`` child processes."""

from tests.support.settings import *  # noqa: F403
from tests.support.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.support.testapp"]
