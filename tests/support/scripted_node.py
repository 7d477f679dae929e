"""A TCP server that speaks just enough RESP to be a misbehaving Redis node.

No real server can answer half a reply and then reset the connection, or accept a
connection and never say a word: this one can. It answers ``+OK`` to the handshake
(``CLIENT SETINFO``, ``SELECT``...) and to ``SCRIPT LOAD``, and behaves as told on
the first lock command (``EVALSHA``, ``EVAL``, ``MULTI``).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from typing import Literal

Mode = Literal["mute", "silent", "half-then-reset", "half-then-silent"]
LOCK_COMMANDS = {b"EVALSHA", b"EVAL", b"MULTI"}


class ScriptedNode:
    """``mute``: accepts connections, never answers anything (not even the handshake).
    ``silent``: answers the handshake, never the lock command. ``half-then-reset``:
    answers the lock command with half a reply, then resets the connection (RST).
    ``half-then-silent``: half a reply, then nothing more (the connection stays open)."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                if self.mode == "mute":
                    continue
                buffer += data
                while True:
                    command, buffer = _parse(buffer)
                    if command is None:
                        break
                    if command[0].upper() == b"HELLO":  # a RESP2 server, as Redis 5 is
                        conn.sendall(b"-ERR unknown command 'HELLO'\r\n")
                    elif command[0].upper() not in LOCK_COMMANDS:
                        conn.sendall(b"+OK\r\n")
                    elif self.mode == "half-then-reset":
                        conn.sendall(b"*2\r\n:1\r\n")  # an array of two, one sent
                        conn.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                        conn.close()  # SO_LINGER 0: the peer sees a reset
                        return
                    elif self.mode == "half-then-silent":
                        conn.sendall(b"*2\r\n:1\r\n")
        except OSError:
            return

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()


def _parse(buffer: bytes) -> tuple[list[bytes] | None, bytes]:
    """One RESP array of bulk strings off the front of ``buffer`` (None: not whole yet)."""
    end = buffer.find(b"\r\n")
    if not buffer.startswith(b"*") or end < 0:
        return None, buffer
    position, parts = end + 2, []
    for _ in range(int(buffer[1:end])):
        end = buffer.find(b"\r\n", position)
        if end < 0:
            return None, buffer
        size = int(buffer[position + 1 : end])
        start, position = end + 2, end + 2 + size + 2
        if len(buffer) < position:
            return None, buffer
        parts.append(buffer[start : start + size])
    return parts, buffer[position:]
