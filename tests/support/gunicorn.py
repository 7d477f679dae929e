"""A real gunicorn serving this repository's Django sites, for tests, and a GET helper."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]


def get(url: str, quiet: bool = False) -> str | None:
    """The body of ``url``; ``None`` instead of an OSError when ``quiet``."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return str(response.read().decode())
    except OSError:
        if quiet:
            return None
        raise


@contextlib.contextmanager
def gunicorn(*options: str, env: dict[str, str], ready: str) -> Iterator[str]:
    """``gunicorn OPTIONS`` on a free loopback port, serving Django's WSGI application;
    yields its URL once ``ready`` (a path) answers. Stopped with SIGTERM afterwards; a
    traceback in its output fails the test."""
    from django_redislock.testing.servers import _free_port

    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", *options, "-b", f"127.0.0.1:{port}",
            "--log-level", "warning", "django.core.wsgi:get_wsgi_application()",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: get(url + ready, quiet=True) is not None, 60)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        assert "Traceback" not in output, output[-3000:]
