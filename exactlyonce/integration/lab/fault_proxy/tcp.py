"""A TCP proxy that loses a server's reply after the server applied the request.

The hardest failure of a write protocol: the server committed, the client never heard. A
sink must then verify (read its own markers) rather than assume the write failed or
succeeded (DESIGN invariant 6). :class:`FaultProxy` sits between a client and a server
(PostgreSQL, Redis, Elasticsearch, any TCP protocol) and, once armed with
:meth:`FaultProxy.drop_reply_to`, forwards the next request that contains a byte pattern
(``b"COMMIT"`` of PostgreSQL's simple query, ``b"EVALSHA"`` of Redis, ``b"_bulk"`` of
Elasticsearch), lets the server answer, throws the answer away and cuts that connection. It
can also refuse new connections for a while (:meth:`FaultProxy.refuse`), cut the open ones
(:meth:`FaultProxy.cut_open`), and hold every reply for a while (:meth:`FaultProxy.hold_replies`).

Used by the crash tests and ``exactlyonce chaos``; it runs its own event loop in a daemon
thread until :meth:`FaultProxy.stop`. How a connection's requests and replies are read is
one object per connection (:class:`Conversation`): byte patterns here, the Kafka protocol's
frames in :mod:`.kafka`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field

READ_BYTES = 1 << 16


@dataclass
class DroppedReply:
    """One reply thrown away: the pattern that armed it (and the Kafka API key, for a
    :class:`~.kafka.KafkaFaultProxy`) and the request's first bytes."""

    pattern: bytes
    request_head: bytes
    reply_bytes: int
    api_key: int | None = None


@dataclass
class Arming:
    """What the next dropped replies answer: requests containing ``pattern`` (and, for Kafka,
    of API ``api_key``); ``times`` drops left."""

    pattern: bytes
    times: int
    api_key: int | None = None
    dropped: list[DroppedReply] = field(default_factory=list)


class Conversation:
    """How one forwarded connection is read: byte patterns (a request whose bytes contain
    the armed pattern: the next read of replies is its reply). :meth:`request` sees each
    chunk of requests before it is forwarded; :meth:`reply` splits each chunk of replies
    into what to forward and, once, the reply to lose (the connection is then cut);
    :meth:`unanswered` counts the matched requests whose reply never came."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.doomed: list[tuple[bytes, bytes]] = []  # (pattern, request head)

    def request(self, data: bytes) -> None:
        pattern = self.proxy.take(data)
        if pattern is not None:
            self.doomed.append((pattern, data[:80]))

    def reply(self, data: bytes) -> tuple[bytes, DroppedReply | None]:
        if self.doomed:
            pattern, head = self.doomed.pop(0)
            return b"", DroppedReply(pattern, head, len(data))
        return data, None

    def unanswered(self) -> int:
        """Matched requests whose reply has not been lost (their connection ended first)."""
        return len(self.doomed)


class ThreadedProxy:
    """A TCP proxy on ``127.0.0.1:<port>`` (a free port) to ``host:upstream_port``, running
    its own event loop in a daemon thread until :meth:`stop`; ``port`` to listen on a given
    port instead. Subclasses forward each connection in :meth:`_handle`
    (bench/slow_proxy.py delays replies with it)."""

    def __init__(self, host: str, upstream_port: int, name: str = "proxy", port: int = 0) -> None:
        self.upstream = (host, upstream_port)
        self._listen_port = port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._server is None:
            raise RuntimeError(f"the {name} did not start")
        self.port: int = int(self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        """Close the listener and every forwarded connection, then the loop."""

        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self._listen_port)
        )
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        """One connection; cancelled by :meth:`stop`, it ends quietly (asyncio would print
        the cancellation of a stream handler as an error)."""
        with contextlib.suppress(asyncio.CancelledError):
            await self._handle(client_r, client_w)

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class FaultProxy(ThreadedProxy):
    """Forwards ``127.0.0.1:<port>`` to ``host:upstream_port`` until told to lose a reply."""

    def __init__(self, host: str, upstream_port: int, port: int = 0) -> None:
        self.dropped: list[DroppedReply] = []
        self.refused = 0  # connections cut at accept while refusing
        self.cut = 0  # open connections cut by cut_open
        self.stalled = 0  # replies held by hold_replies
        self._arming: Arming | None = None
        self._matched = 0  # requests taken whose reply is not yet lost
        self._refusing = False
        self._hold_until = 0.0  # time.monotonic() until which replies are held
        self._open: set[asyncio.StreamWriter] = set()  # both ends of each live connection
        self._lock = threading.Lock()
        super().__init__(host, upstream_port, name="fault-proxy", port=port)

    # -- what a test or the chaos command calls --------------------------------------

    def drop_reply_to(self, pattern: bytes, times: int = 1) -> None:
        """Lose the reply to the next ``times`` requests whose bytes contain ``pattern``
        (each on its own connection, which is then cut)."""
        self._arm(Arming(pattern, times))

    def _arm(self, arming: Arming) -> None:
        with self._lock:
            self._arming = arming

    def armed(self) -> bool:
        """True while replies are still to be dropped: drops left to match, or a matched
        request whose reply has not yet been lost."""
        with self._lock:
            left = self._arming is not None and self._arming.times > 0
            return left or self._matched > 0

    def refuse(self, on: bool) -> None:
        """While on, every new connection is closed as soon as it is accepted (open ones
        go on): a server that is down or refusing, as its clients see it."""
        self._refusing = on

    def cut_open(self) -> int:
        """Close every connection forwarded now (both ends): their clients see the server go
        away mid-conversation. Returns how many ends were closed."""

        async def cut() -> int:
            writers = list(self._open)
            for writer in writers:
                writer.close()
            return len(writers)

        closed = asyncio.run_coroutine_threadsafe(cut(), self._loop).result(10)
        self.cut += closed // 2
        return closed

    def hold_replies(self, seconds: float) -> None:
        """Hold every reply that arrives in the next ``seconds`` until they have passed (a
        stalled server, as its clients see it); each held reply counts in ``stalled``."""
        self._hold_until = time.monotonic() + seconds

    async def _held(self) -> None:
        wait = self._hold_until - time.monotonic()
        if wait > 0:
            self.stalled += 1
            await asyncio.sleep(wait)

    def take(self, request: bytes, api_key: int | None = None) -> bytes | None:
        """The armed pattern if ``request`` (of Kafka API ``api_key``, if known) matches the
        arming (one drop used), else None."""
        with self._lock:
            arming = self._arming
            if arming is None or arming.times <= 0 or arming.api_key != api_key:
                return None
            if arming.pattern not in request:
                return None
            arming.times -= 1
            self._matched += 1
            return arming.pattern

    def _lost(self, dropped: DroppedReply) -> None:
        with self._lock:
            self.dropped.append(dropped)
            self._matched -= 1

    def _unanswered(self, count: int) -> None:
        """``count`` matched requests ended without a reply: their drops are armed again."""
        if count == 0:
            return
        with self._lock:
            self._matched -= count
            if self._arming is not None:
                self._arming.times += count

    def _conversation(self) -> Conversation:
        """The reader of one new connection."""
        return Conversation(self)

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self._refusing:
            self.refused += 1
            client_w.close()
            return
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        self._open.update((client_w, up_w))
        conversation = self._conversation()

        async def requests() -> None:
            while data := await client_r.read(READ_BYTES):
                conversation.request(data)
                up_w.write(data)
                await up_w.drain()

        async def replies() -> None:
            while data := await up_r.read(READ_BYTES):
                forward, dropped = conversation.reply(data)
                if forward:
                    await self._held()
                    client_w.write(forward)
                    await client_w.drain()
                if dropped is not None:
                    self._lost(dropped)
                    break  # the server applied it; its client never hears

        # Whichever side ends first (EOF, a reset, a dropped reply) ends the connection on
        # both: a client SIGKILLed mid-transaction resets its socket, and its server session,
        # left open, would hold that transaction's locks for good.
        pumps = [asyncio.ensure_future(replies()), asyncio.ensure_future(requests())]
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for writer in (up_w, client_w):
            self._open.discard(writer)
            writer.close()
        self._unanswered(conversation.unanswered())
