"""The session's Elasticsearch stand-in listens below the kernel's ephemeral port range.

Its refusals (``refuse_connections_for``) stop listening and later bind the same port again;
a port from the ephemeral range can meanwhile become the local end of some outgoing
connection (a JVM's, a Kafka client's) and the bind fails with "Address already in use"
(seen once in a whole run, 2026-11-27).
"""

from __future__ import annotations

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
