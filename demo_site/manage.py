#!/usr/bin/env python
"""``manage.py`` of the demo site: ``python demo_site/manage.py rebuild_reports``."""

import os
import sys
from pathlib import Path


def main() -> None:
    # The repository root, so ``demo_site`` and ``django_redislock`` import from a checkout.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
