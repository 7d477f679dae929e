"""Delay proxies for the Redlock scenario, run in a child process.

``django_redislock.testing.FaultProxy`` forwards bytes on an asyncio loop in a thread. Run
inside the benchmark process it would compete with the measured client for the GIL, so the
proxies live in one spawned helper process that takes ``delay`` orders over a pipe.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from multiprocessing.connection import Connection
from typing import Any


def _serve(conn: Connection, upstreams: list[tuple[str, int]]) -> None:
    from django_redislock.testing import FaultProxy

    proxies = [FaultProxy(upstream) for upstream in upstreams]
    conn.send([proxy.url for proxy in proxies])
    while True:
        message: tuple[Any, ...] = conn.recv()
        if message[0] == "delay":
            for proxy, seconds in zip(proxies, message[1], strict=True):
                proxy.delay(seconds)
            conn.send("ok")
        elif message[0] == "stop":
            # Closing cancels the forwarding tasks; asyncio logs each one. Not our news.
            sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the process ends right after
            for proxy in proxies:
                proxy.close()
            conn.send("ok")
            return


class ProxyGroup:
    """One FaultProxy per upstream, in a helper process; ``urls`` lists their addresses."""

    def __init__(self, upstream_urls: list[str]) -> None:
        upstreams = []
        for url in upstream_urls:
            host_port = url.split("//", 1)[1].split("/", 1)[0]
            host, port = host_port.rsplit(":", 1)
            upstreams.append((host, int(port)))
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, upstreams), daemon=True)
        self._proc.start()
        if not self._conn.poll(30):
            raise RuntimeError("the proxy helper did not start")
        self.urls: list[str] = self._conn.recv()

    def delay(self, seconds: list[float]) -> None:
        """Set each proxy's one-way delay (seconds) in upstream order."""
        self._conn.send(("delay", seconds))
        self._conn.recv()

    def close(self) -> None:
        """Stop the proxies and the helper process."""
        with contextlib.suppress(BrokenPipeError, OSError):
            self._conn.send(("stop",))
            self._conn.poll(10)
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
