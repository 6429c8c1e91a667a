"""The session's Elasticsearch stand-in listens below the kernel's ephemeral port range.

Its refusals (``refuse_connections_for``) stop listening and later bind the same port again;
a port from the ephemeral range can meanwhile become the local end of some outgoing
connection (a JVM's, a Kafka client's) and the bind fails with "Address already in use"
(seen once in a whole run, 2026-11-27).
"""

from __future__ import annotations

import socket
import threading
import time

from tests.support.es_fixtures import ephemeral_ports_start, stand_in_server


def test_the_range_start_is_read_from_the_kernel() -> None:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        assert ephemeral_ports_start() == int(f.read().split()[0])


def test_the_stand_in_listens_below_the_ephemeral_range_and_comes_back_there() -> None:
    server = stand_in_server()
    try:
        assert 1024 <= server.port < ephemeral_ports_start()
        port = server.port
        server.stop()
        server.start()
        assert server.port == port
    finally:
        server.stop()


def test_a_refusal_during_a_refusal_extends_it_and_the_server_comes_back_once() -> None:
    """Two refusals in a row (the fault storm's seeded order can put them back to back,
    seed 83587976) each scheduled its own restart: the second bind failed with "Address
    already in use" in a timer thread. The later refusal now replaces the pending restart."""
    errors: list[BaseException] = []
    hook, threading.excepthook = threading.excepthook, lambda a: errors.append(a.exc_value)
    server = stand_in_server()
    try:
        server.refuse_connections_for(0.6)
        time.sleep(0.2)
        server.refuse_connections_for(0.2)  # fires before the first one's 0.6 s would
        time.sleep(0.1)
        assert not _listening(server.port)
        time.sleep(0.9)
        assert _listening(server.port)
        assert server.refusals == 2
        assert not errors, errors
    finally:
        threading.excepthook = hook
        server.stop()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0
