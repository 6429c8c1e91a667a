"""The Kafka fault proxy (exactlyonce/integration/lab/fault_proxy/kafka.py) against a stand-in
server speaking Kafka's framing: it loses exactly the reply to the armed request, however the
bytes are cut, after every earlier reply on the connection. (Against real brokers:
tests/integration/test_kafka_lost_commit.py.)"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from exactlyonce.integration.lab.fault_proxy import END_TXN, KafkaFaultProxy

PRODUCE, METADATA = 0, 3


def request(api_key: int, correlation: int, body: bytes) -> bytes:
    frame = struct.pack(">hhi", api_key, 1, correlation) + b"\x00\x07rdkafka" + body
    return struct.pack(">i", len(frame)) + frame


def read_frame(sock: socket.socket) -> bytes | None:
    """One whole frame (without its size), or None at EOF."""
    head = _read(sock, 4)
    if head is None:
        return None
    return _read(sock, struct.unpack(">i", head)[0])


def _read(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except ConnectionResetError:  # the proxy's cut, with bytes of ours left unread
            return None
        if not chunk:
            return None
        data += chunk
    return data


def _send_bytewise(sock: socket.socket, data: bytes) -> None:
    for byte in data:
        sock.sendall(bytes([byte]))


def _send_until_cut(sock: socket.socket, data: bytes) -> None:
    """:func:`_send_bytewise`, but the proxy may cut the connection meanwhile (the armed
    reply came back while these bytes went out: CI 2026-12-01, a broken pipe)."""
    try:
        _send_bytewise(sock, data)
    except (BrokenPipeError, ConnectionResetError):
        return


@pytest.fixture
def server() -> Iterator[int]:
    """Answers each request frame with a frame holding its correlation id and a 300-byte
    body, sent in 7-byte pieces (so a reply's frame boundary falls anywhere in a read)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    def answer(conn: socket.socket) -> None:
        with conn:
            while (frame := read_frame(conn)) is not None:
                correlation = frame[4:8]
                reply = correlation + bytes(300)
                data = struct.pack(">i", len(reply)) + reply
                try:
                    for i in range(0, len(data), 7):
                        conn.sendall(data[i : i + 7])
                except OSError:
                    return

    threading.Thread(target=serve, daemon=True).start()
    yield port
    listener.close()


def test_exactly_the_armed_requests_reply_is_lost_after_the_earlier_ones(server: int) -> None:
    proxy = KafkaFaultProxy("127.0.0.1", server)
    try:
        proxy.drop_kafka_reply(END_TXN, b"txn-a")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
            # Pipelined, one byte at a time: an EndTxn of another id, a produce whose payload
            # holds the armed id and EndTxn's key bytes, then the armed EndTxn, then more.
            armed = b"".join(
                [
                    request(END_TXN, 1, b"\x00\x05txn-b"),
                    request(PRODUCE, 2, b"\x00\x1a txn-a \x00\x1a"),
                    request(METADATA, 3, b""),
                    request(END_TXN, 4, b"\x00\x05txn-a"),
                ]
            )
            _send_bytewise(client, armed)
            _send_until_cut(client, request(METADATA, 5, b""))
            answered = []
            while (frame := read_frame(client)) is not None:
                answered.append(struct.unpack(">i", frame[:4])[0])
        assert answered == [1, 2, 3], "every reply before the armed one, then the cut"
        assert [(d.api_key, d.pattern) for d in proxy.dropped] == [(END_TXN, b"txn-a")]
        assert not proxy.armed()
        assert proxy.requests[END_TXN] == 2 and proxy.requests[PRODUCE] == 1
    finally:
        proxy.stop()


def test_unarmed_or_byte_armed_kafka_proxies_forward_everything(server: int) -> None:
    proxy = KafkaFaultProxy("127.0.0.1", server)
    try:
        proxy.drop_reply_to(b"txn-a")  # a byte pattern does not single out a Kafka request
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
            client.sendall(request(END_TXN, 7, b"\x00\x05txn-a") + request(METADATA, 8, b""))
            frames = [read_frame(client), read_frame(client)]
        assert [struct.unpack(">i", f[:4])[0] for f in frames if f] == [7, 8]
        assert proxy.dropped == []
    finally:
        proxy.stop()
