"""The fault proxy (exactlyonce/integration/lab/fault_proxy/tcp.py) against a real Redis: a
request armed for is applied by the server and its reply is lost; refused connections; open
connections cut; replies held; the latency proxy of the benchmarks shares its thread and
loop."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import pytest
import redis

from bench.slow_proxy import LatencyProxy
from exactlyonce.integration.lab.fault_proxy import FaultProxy

pytestmark = pytest.mark.integration


@pytest.fixture
def upstream(services: dict[str, str]) -> tuple[str, int]:
    url = urlsplit(services["EXACTLYONCE_REDIS_URL"])
    assert url.hostname is not None and url.port is not None
    return url.hostname, url.port


def test_an_armed_request_is_applied_and_its_reply_lost(
    upstream: tuple[str, int], unique_name: str
) -> None:
    proxy = FaultProxy(*upstream)
    try:
        client = redis.Redis(host="127.0.0.1", port=proxy.port, retry=None)
        client.set(unique_name, "0")
        proxy.drop_reply_to(b"INCR")
        with pytest.raises(redis.ConnectionError):
            client.incr(unique_name)  # applied; the client never hears
        assert not proxy.armed()
        assert [d.pattern for d in proxy.dropped] == [b"INCR"]
        assert client.get(unique_name) == b"1", "the server applied the request"
        assert client.incr(unique_name) == 2, "only the armed request lost its reply"
        client.delete(unique_name)
    finally:
        proxy.stop()


def test_refused_connections_and_back(upstream: tuple[str, int]) -> None:
    proxy = FaultProxy(*upstream)
    try:
        proxy.refuse(True)
        with pytest.raises(redis.ConnectionError):
            redis.Redis(host="127.0.0.1", port=proxy.port, retry=None).ping()
        assert proxy.refused >= 1
        proxy.refuse(False)
        assert redis.Redis(host="127.0.0.1", port=proxy.port, retry=None).ping()
    finally:
        proxy.stop()


def test_open_connections_cut_and_replies_held(upstream: tuple[str, int]) -> None:
    proxy = FaultProxy(*upstream)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as client:
            client.sendall(b"PING\r\n")
            assert client.recv(64) == b"+PONG\r\n"
            assert proxy.cut_open() == 2 and proxy.cut == 1  # the client's end and the server's
            assert client.recv(64) == b"", "the open connection was cut"
        proxy.hold_replies(1.0)
        began = time.monotonic()
        assert redis.Redis(host="127.0.0.1", port=proxy.port, retry=None).ping()
        assert time.monotonic() - began >= 0.9 and proxy.stalled == 1
        began = time.monotonic()
        assert redis.Redis(host="127.0.0.1", port=proxy.port, retry=None).ping()
        assert time.monotonic() - began < 0.5 and proxy.stalled == 1, "held only while asked"
    finally:
        proxy.stop()


def test_the_latency_proxy_delays_replies(upstream: tuple[str, int]) -> None:
    proxy = LatencyProxy(*upstream, delay_s=0.05)
    try:
        assert redis.Redis(host="127.0.0.1", port=proxy.port).ping()
        assert proxy.replies >= 1
    finally:
        proxy.stop()


def _server_sees_client(upstream: tuple[str, int], name: str) -> bool:
    direct = redis.Redis(host=upstream[0], port=upstream[1])
    return any(c.get("name") == name for c in direct.client_list())


def test_a_client_that_dies_with_a_reset_frees_its_server_connection(
    upstream: tuple[str, int], unique_name: str
) -> None:
    """A SIGKILLed client's socket closes with a reset when it dies holding unread bytes; its
    server-side connection must close too (a PostgreSQL session left open would hold its
    transaction's locks, and every later writer would wait on them forever)."""
    proxy = FaultProxy(*upstream)
    try:
        sock = socket.create_connection(("127.0.0.1", proxy.port))
        name = unique_name.replace("-", "_")
        sock.sendall(f"CLIENT SETNAME {name}\r\nPING\r\n".encode())
        time.sleep(0.5)  # the replies wait unread in the socket: its close sends a reset
        assert _server_sees_client(upstream, name)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()
        deadline = time.monotonic() + 5
        while _server_sees_client(upstream, name) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _server_sees_client(upstream, name), "the proxy kept the server side open"
    finally:
        proxy.stop()
