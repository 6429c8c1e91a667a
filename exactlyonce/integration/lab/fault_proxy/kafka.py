"""A fault proxy that reads the Kafka protocol's frames, to lose the reply to one request.

A byte pattern cannot single out a Kafka request: ``EndTxn`` (the commit or abort of a
transaction) is API key 26 in a binary header, and the same bytes occur in record payloads;
and a Kafka client pipelines requests on one connection, so "the next read of replies" may
answer another request. :class:`KafkaFaultProxy` cuts both directions at frame boundaries
(every frame is a 4-byte big-endian size, then the frame; a request starts with its API key,
version and correlation id, a response with the correlation id), and once armed with
:meth:`KafkaFaultProxy.drop_kafka_reply` forwards the next matching request whole, forwards
every reply before its own, throws its own reply away and cuts the connection. The broker
applied the request (its reply exists); the client never hears.

Kafka clients connect to the addresses brokers advertise, not to the bootstrap address: put
one proxy in front of each broker and have each broker advertise its proxy's port (the
``PROXIED`` listener of :class:`~exactlyonce.integration.lab.services.kafka_cluster.KafkaCluster`).
"""

from __future__ import annotations

import struct
from collections import Counter

from exactlyonce.integration.lab.fault_proxy.tcp import (
    Arming,
    Conversation,
    DroppedReply,
    FaultProxy,
)

END_TXN = 26  # the EndTxn request: commit (or abort) a transaction
_SIZE = 4
_REQUEST_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id


class _Requests:
    """A connection's requests, assembled into whole frames as their bytes pass (they are
    forwarded as they come; whole frames are only inspected)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def frames(self, data: bytes) -> list[bytes]:
        self._buffer += data
        done: list[bytes] = []
        while len(self._buffer) >= _SIZE:
            end = _SIZE + int.from_bytes(self._buffer[:_SIZE], "big")
            if len(self._buffer) < end:
                break
            done.append(bytes(self._buffer[_SIZE:end]))
            del self._buffer[:end]
        return done


class _Replies:
    """A connection's responses, cut at frame boundaries without waiting for whole frames:
    each piece is forwarded at once, and a frame's first piece carries its correlation id."""

    def __init__(self) -> None:
        self._pending = b""  # the start of a frame shorter than size + correlation id
        self._left = 0  # bytes of the current frame not seen yet

    def pieces(self, data: bytes) -> list[tuple[int | None, bytes]]:
        """(correlation id of the frame this piece starts, or None for the rest of one,
        piece), in order; together they are ``data`` (less a short tail kept for later)."""
        data, self._pending = self._pending + data, b""
        out: list[tuple[int | None, bytes]] = []
        while data:
            if self._left:
                piece = data[: self._left]
                self._left -= len(piece)
                out.append((None, piece))
            elif len(data) < _SIZE + 4:
                self._pending = data
                break
            else:
                end = _SIZE + int.from_bytes(data[:_SIZE], "big")
                piece = data[:end]
                self._left = end - len(piece)
                out.append((int.from_bytes(data[_SIZE : _SIZE + 4], "big", signed=True), piece))
            data = data[len(piece) :]
        return out


class _KafkaConversation(Conversation):
    """One Kafka connection: requests matched by API key (and the armed byte pattern inside
    the frame), replies matched to them by correlation id."""

    def __init__(self, proxy: KafkaFaultProxy) -> None:
        super().__init__(proxy)
        self.kafka_proxy = proxy
        self._requests = _Requests()
        self._replies = _Replies()
        self._doomed: dict[int, tuple[int, bytes, bytes]] = {}  # id -> key, pattern, head

    def request(self, data: bytes) -> None:
        for frame in self._requests.frames(data):
            api_key, _version, correlation = _REQUEST_HEAD.unpack_from(frame)
            self.kafka_proxy.requests[api_key] += 1
            pattern = self.proxy.take(frame, api_key)
            if pattern is not None:
                self._doomed[correlation] = (api_key, pattern, frame[:80])

    def reply(self, data: bytes) -> tuple[bytes, DroppedReply | None]:
        forward = bytearray()
        for correlation, piece in self._replies.pieces(data):
            if correlation is not None and correlation in self._doomed:
                api_key, pattern, head = self._doomed.pop(correlation)
                return bytes(forward), DroppedReply(pattern, head, len(piece), api_key)
            forward += piece
        return bytes(forward), None

    def unanswered(self) -> int:
        return len(self._doomed)


class KafkaFaultProxy(FaultProxy):
    """A :class:`~.tcp.FaultProxy` for one Kafka broker that also loses the reply to a
    Kafka request chosen by API key (:meth:`drop_kafka_reply`) and counts the requests it
    forwards per API key (:attr:`requests`). Replies are buffered only up to a frame's
    correlation id; requests are forwarded as they come."""

    def __init__(self, host: str, upstream_port: int, port: int = 0) -> None:
        self.requests: Counter[int] = Counter()
        super().__init__(host, upstream_port, port=port)

    def drop_kafka_reply(self, api_key: int, contains: bytes = b"", times: int = 1) -> None:
        """Lose the reply to the next ``times`` requests of API ``api_key`` whose frame
        contains ``contains`` (a ``transactional.id``, say); each one's connection is cut
        once every earlier reply on it was forwarded."""
        self._arm(Arming(contains, times, api_key=api_key))

    def _conversation(self) -> Conversation:
        return _KafkaConversation(self)
