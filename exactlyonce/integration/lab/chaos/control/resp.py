"""A raw RESP2 client over a socket, enough to read streams: the independent reader of
Redis writes shares no code with redis-py (which the sink and the project's own audit use).

``RespClient(url)`` connects (``AUTH`` and ``SELECT`` from a ``redis://`` URL), ``call(*args)``
sends one command as an array of bulk strings and returns the parsed reply: ``bytes`` for
simple and bulk strings, ``int``, ``list``, ``None`` for a null; an error reply raises
:class:`RespError`.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import unquote, urlsplit

TIMEOUT_S = 30.0


class RespError(Exception):
    """An error reply (``-ERR ...``)."""


class RespClient:
    def __init__(self, url: str, timeout: float = TIMEOUT_S) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", ""):
            raise RespError(f"the raw reader speaks plain TCP, not {parts.scheme}://")
        self.sock = socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 6379), timeout=timeout
        )
        self.buf = b""
        if parts.password is not None:
            user = unquote(parts.username) if parts.username else None
            password = unquote(parts.password)
            self.call("AUTH", *([user] if user else []), password)
        db = parts.path.strip("/")
        if db and db != "0":
            self.call("SELECT", db)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RespClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, *args: str | bytes | int) -> Any:
        self.send(*args)
        return self.reply()

    def send(self, *args: str | bytes | int) -> None:
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            raw = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
        self.sock.sendall(b"".join(out))

    def reply(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self._exact(size + 2)[:-2]
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self.reply() for _ in range(size)]
        raise RespError(f"unexpected reply {line[:40]!r}")

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _exact(self, size: int) -> bytes:
        while len(self.buf) < size:
            self._fill()
        out, self.buf = self.buf[:size], self.buf[size:]
        return out

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise RespError("the server closed the connection")
        self.buf += chunk


def entry_fields(raw: list[bytes]) -> dict[bytes, bytes]:
    """A stream entry's flat field/value list as a dict."""
    return dict(zip(raw[0::2], raw[1::2], strict=True))
