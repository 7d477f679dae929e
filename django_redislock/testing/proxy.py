"""A fault-injecting TCP proxy in front of a server: delays, partitions, lost replies, resets.

Used by this project's fault tests and benchmarks; your tests can put one between your
code and a :class:`~django_redislock.testing.RedisServer` the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from typing import Any

import redis

from .servers import LOOPBACK, START_DEADLINE, RedisServer

__all__ = ["FaultProxy"]


class _Conn:
    __slots__ = ("client_writer", "upstream_writer")

    def __init__(
        self, client_writer: asyncio.StreamWriter, upstream_writer: asyncio.StreamWriter
    ) -> None:
        self.client_writer = client_writer
        self.upstream_writer = upstream_writer


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """A TCP forwarder on loopback in front of a server, with faults switched at run time.

    It runs an asyncio loop in its own daemon thread; every method is called from other
    threads and takes effect before it returns.

    * ``delay(seconds)``: every chunk waits that long in *each* direction (a round trip gets
      twice the delay); ``delay(0)`` turns it off.
    * ``hold()`` / ``release_hold()``: stop forwarding in both directions while keeping every
      socket open (a network partition); held bytes are delivered on release, like TCP
      retransmission after a partition heals.
    * ``drop_replies(True)``: swallow server-to-client bytes (commands still reach the
      server). A connection that lost replies is out of step for good: ``reset()`` after.
    * ``cut_next_reply(n)``: forward the first ``n`` bytes of the next server-to-client
      chunk, then ``hold()``: a partition in the middle of a reply (``heal()`` sends the
      rest).
    * ``reset()``: close every client connection with a TCP RST (and its upstream socket).
    * ``close()``: stop listening, reset everything, stop the thread.
    """

    def __init__(self, target: RedisServer | tuple[str, int], *, host: str = LOOPBACK) -> None:
        if isinstance(target, RedisServer):
            if target.port is None:
                raise RuntimeError("start the server before putting a proxy in front of it")
            self.target: tuple[str, int] = (target.host, target.port)
        else:
            self.target = target
        self.host = host
        self.port: int = 0
        self._delay = 0.0
        self._drop_replies = False
        self._cut_after: int | None = None
        self._conns: set[_Conn] = set()
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="FaultProxy", daemon=True)
        self._thread.start()
        self._ready.wait(START_DEADLINE)
        if self._startup_error is not None:
            raise self._startup_error
        if not self.port:
            raise RuntimeError("FaultProxy did not start")

    # -- public API ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def connection_count(self) -> int:
        """Client connections currently open through the proxy."""
        return len(self._conns)

    def client(self, **kwargs: Any) -> redis.Redis:
        kwargs.setdefault("socket_connect_timeout", 5)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def delay(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        self._delay = float(seconds)

    def hold(self) -> None:
        self._call(self._set_flowing, False)

    def release_hold(self) -> None:
        self._call(self._set_flowing, True)

    def drop_replies(self, enabled: bool = True) -> None:
        self._drop_replies = bool(enabled)

    def cut_next_reply(self, keep: int) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self._cut_after = int(keep)

    def reset(self) -> None:
        self._call(self._reset_all)

    def heal(self) -> None:
        """Back to a transparent proxy: no delay, no hold, replies delivered."""
        self._delay = 0.0
        self._drop_replies = False
        self.release_hold()

    def close(self) -> None:
        if self._loop.is_closed() or not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(START_DEADLINE)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- loop side -----------------------------------------------------------------------

    def _call(self, func: Any, *args: Any) -> Any:
        async def runner() -> Any:
            return func(*args)

        return asyncio.run_coroutine_threadsafe(runner(), self._loop).result(START_DEADLINE)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as exc:
            self._startup_error = exc
            self._ready.set()
            self._loop.close()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._handle, self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def _set_flowing(self, flowing: bool) -> None:
        assert self._flowing is not None
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    def _reset_all(self) -> None:
        for conn in list(self._conns):
            _abort_with_rst(conn.client_writer)
            _abort_with_rst(conn.upstream_writer)
        self._conns.clear()

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        self._set_flowing(True)
        self._reset_all()

    async def _handle(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort_with_rst(client_writer)
            return
        conn = _Conn(client_writer, upstream_writer)
        self._conns.add(conn)
        try:
            await asyncio.gather(
                self._pump(client_reader, upstream_writer, replies=False),
                self._pump(upstream_reader, client_writer, replies=True),
            )
        finally:
            self._conns.discard(conn)
            for writer in (client_writer, upstream_writer):
                if not writer.is_closing():
                    writer.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, replies: bool
    ) -> None:
        assert self._flowing is not None
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if self._delay:
                    await asyncio.sleep(self._delay)
                # No await between this check and write(): a hold() that returned has
                # stopped every later write.
                await self._flowing.wait()
                if replies and self._drop_replies:
                    continue
                keep = self._cut_after if replies else None
                if keep is not None and keep < len(data):
                    self._cut_after = None
                    writer.write(data[:keep])
                    await writer.drain()
                    self._set_flowing(False)
                    await self._flowing.wait()
                    data = data[keep:]
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            # One side gone: close the other so the pair never half-lives.
            if not writer.is_closing():
                writer.close()
