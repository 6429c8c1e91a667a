"""When the fault proxy (exactlyonce/integration/lab/fault_proxy/tcp.py) counts a lost reply as
done: ``armed()`` stays true from the moment a request matches until its reply is actually
thrown away (a test that waits for ``not armed()`` then finds the drop in ``dropped``), and a
matched request whose connection ends before any reply gives its drop back to the arming."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from exactlyonce.integration.lab.fault_proxy import FaultProxy


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Reads one request, then closes without a reply (a server that died mid-request)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()


def test_a_matched_request_keeps_the_proxy_armed_until_its_reply_is_lost() -> None:
    proxy = FaultProxy("127.0.0.1", 9)
    try:
        proxy.drop_reply_to(b"_bulk")
        assert proxy.take(b"POST /_bulk HTTP/1.1") == b"_bulk"
        assert proxy.armed(), "the request matched, but no reply has been lost yet"
        assert proxy.dropped == []
    finally:
        proxy.stop()


def test_a_request_whose_connection_ends_unanswered_gives_its_drop_back(
    silent_server: int,
) -> None:
    proxy = FaultProxy("127.0.0.1", silent_server)
    try:
        proxy.drop_reply_to(b"_bulk")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
            client.sendall(b"POST /_bulk HTTP/1.1\r\n\r\n")
            assert client.recv(1024) == b"", "the server closed without a reply"
        deadline = time.monotonic() + 5
        while not (given_back := _given_back(proxy)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert given_back, "the unanswered request's drop is armed again"
        assert proxy.armed() and proxy.dropped == []
    finally:
        proxy.stop()


def _given_back(proxy: FaultProxy) -> bool:
    return proxy.take(b"POST /_bulk again") == b"_bulk"
