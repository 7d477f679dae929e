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
    """One FaultProxy per upstream, each in a helper process of its own (five proxies in
    one process contend for its GIL: the third reply of five then comes measurably later
    than one proxy's only reply); ``urls`` lists their addresses."""

    def __init__(self, upstream_urls: list[str]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._helpers: list[tuple[Connection, Any]] = []
        self.urls: list[str] = []
        try:
            for url in upstream_urls:
                host_port = url.split("//", 1)[1].split("/", 1)[0]
                host, port = host_port.rsplit(":", 1)
                conn, child = ctx.Pipe()
                proc = ctx.Process(target=_serve, args=(child, [(host, int(port))]), daemon=True)
                proc.start()
                self._helpers.append((conn, proc))
            for conn, _ in self._helpers:
                if not conn.poll(30):
                    raise RuntimeError("a proxy helper did not start")
                self.urls.extend(conn.recv())
        except BaseException:
            self.close()
            raise

    def delay(self, seconds: list[float]) -> None:
        """Set each proxy's one-way delay (seconds) in upstream order."""
        for (conn, _), value in zip(self._helpers, seconds, strict=True):
            conn.send(("delay", [value]))
        for conn, _ in self._helpers:
            conn.recv()

    def close(self) -> None:
        """Stop the proxies and their helper processes."""
        for conn, _ in self._helpers:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(("stop",))
        for conn, proc in self._helpers:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.poll(10)
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
