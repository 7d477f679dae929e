"""``--warm-cpu``: one nice-19 busy loop per core, so idle-CPU wake-up cost stays out."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

_BUSY_LOOP = "import os\nos.nice(19)\nwhile True:\n    pass\n"


@contextlib.contextmanager
def warm_cpus(enabled: bool = True) -> Iterator[None]:
    """Run one lowest-priority spinning child per CPU while the block runs."""
    if not enabled:
        yield
        return
    children = [
        subprocess.Popen([sys.executable, "-c", _BUSY_LOOP]) for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()
