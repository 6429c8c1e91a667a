"""A slow sink for the buffer benchmark: a TCP proxy that delays each reply of the real server.

``LatencyProxy(host, port)`` listens on a free local port and forwards every connection to the
server; the first bytes of each reply (what the server sends after the client sent something)
wait ``delay_s`` seconds first. A pipelined batch of commands, a Lua script call, an HTTP
request: each costs one delay, as a slow server or a far network would. Used for Redis and for
Elasticsearch (the stand-in or a real cluster) alike; the delay can change while it runs (the
benchmark calibrates it until a batch takes ``SLOW_FACTOR`` times the fast one).
"""

from __future__ import annotations

import asyncio
import contextlib

from exactlyonce.integration.lab.fault_proxy import ThreadedProxy


class LatencyProxy(ThreadedProxy):
    """Forwards ``127.0.0.1:<port>`` to ``host:port``, each reply ``delay_s`` late; runs its
    own event loop in a daemon thread until :meth:`stop`."""

    def __init__(self, host: str, port: int, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.replies = 0  # replies delayed so far
        super().__init__(host, port, name="latency-proxy")

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        asked = asyncio.Event()

        async def requests() -> None:
            while data := await client_r.read(1 << 16):
                asked.set()
                up_w.write(data)
                await up_w.drain()
            up_w.close()

        async def replies() -> None:
            while data := await up_r.read(1 << 16):
                if asked.is_set() and self.delay_s > 0:
                    asked.clear()
                    self.replies += 1
                    await asyncio.sleep(self.delay_s)
                client_w.write(data)
                await client_w.drain()
            client_w.close()

        with contextlib.suppress(OSError):
            await asyncio.gather(requests(), replies(), return_exceptions=True)
        for writer in (up_w, client_w):
            writer.close()
