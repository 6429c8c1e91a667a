"""Which of a pipeline's servers ``exactlyonce chaos`` may restart, and restarting one.

A server is restarted only when it is a local service of ``exactlyonce services`` (``make
services``, or one started on demand: ``redis-aof``, the persistent Redis a Redis sink writes
to, ``opensearch``, a genuine OpenSearch node, and ``es-stand-in``, the durable Elasticsearch
stand-in)
under this checkout's services home (``EXACTLYONCE_HOME``, else
``./.exactlyonce``): the pipeline's address (the sink's DSN or URL, the catalog's Redis, the
Kafka source's or buffer's brokers) matches the address in that home's ``services.env``, its
process runs, and the port it would be started on again is the one it listens on. Every other
address is named in the output as skipped, with the reason: nothing is skipped silently.
The 3-node Kafka cluster (``services up --only kafka3``) is one server, ``kafka3``, when its
three nodes run and the pipeline's brokers are theirs; its faults are broker failovers
(:mod:`.brokers`), each striking the node that holds a role (:data:`FAILOVER_ROLES`).

A hard restart SIGKILLs the service's process group (PostgreSQL's postmaster and its
backends, as a power cut would), a clean one stops it the way ``services down`` does; both
then start it again on its data (PostgreSQL and Kafka keep theirs; Redis, without
persistence, starts empty: the dedup catalog is lost, which the sinks must survive).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.config import SinkConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.config.sources import KafkaSourceConfig
from exactlyonce.integration.envfile import home_dir, service_env
from exactlyonce.integration.lab.chaos.brokers import ROLES, SERVICE, cluster_addresses
from exactlyonce.integration.lab.services import (
    SERVICES,
    port,
    service_pid,
    start_service,
    stop_service,
    use_docker,
)
from exactlyonce.integration.lab.services.processes import (
    EXIT_POLL,
    pid_alive,
    poll_until,
    tcp_open,
)

DEFAULT_PORTS = {"postgres": 5432, "redis": 6379, "kafka": 9092, "elasticsearch": 9200}
_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}
_ENV_OF = {
    "pg": "EXACTLYONCE_PG_DSN",
    "redis": "EXACTLYONCE_REDIS_URL",
    "kafka": "KAFKA_BOOTSTRAP_SERVERS",
}
GONE_TIMEOUT_S = 60.0
AOF = "redis-aof"  # the persistent Redis, a Redis sink's server (``services up --only``)
OPENSEARCH = "opensearch"  # a genuine OpenSearch node, an OpenSearch sink's server (the same)
ES_STAND_IN = "es-stand-in"  # the durable Elasticsearch stand-in, an Elasticsearch sink's server
ON_DEMAND = (
    AOF,
    OPENSEARCH,
    ES_STAND_IN,
)  # local services not in services.env, restarted when they run
# The servers whose faults strike the node holding a role, the roles taken in turn.
FAILOVER_ROLES: dict[str, tuple[str, ...]] = {SERVICE: ROLES}


@dataclass(frozen=True)
class Server:
    """A local service the pipeline uses, with what it is to the pipeline."""

    service: str  # "pg", "redis" or "kafka"
    address: str  # host:port
    roles: tuple[str, ...]  # "sink", "catalog", "source", "buffer"


@dataclass(frozen=True)
class Skipped:
    """An address of the pipeline whose server faults are skipped, and why."""

    role: str
    address: str
    why: str


@dataclass(frozen=True)
class Restart:
    """One restart done: the pids before and after, how long the service was gone."""

    old_pid: int
    new_pid: int
    down_s: float


def host_port(address: str, default_port: int) -> str:
    """``host:port`` of a URL, a ``host:port`` or a libpq ``key=value`` DSN; loopback names
    as 127.0.0.1 (an unparsable address is returned as given)."""
    if "://" not in address and "=" in address:
        fields = dict(p.split("=", 1) for p in address.split() if "=" in p)
        host, port_text = fields.get("host", "localhost"), fields.get("port", "")
    else:
        parts = urlsplit(address if "://" in address else f"//{address}")
        try:
            host, port_num = parts.hostname or "localhost", parts.port
        except ValueError:
            return address
        port_text = "" if port_num is None else str(port_num)
    host = "127.0.0.1" if host in _LOCAL_NAMES else host
    return f"{host}:{port_text or default_port}"


def pipeline_addresses(cfg: PipelineConfig) -> list[tuple[str, str]]:
    """(role, host:port) of every server the pipeline talks to."""
    sink = cfg.sink
    found = [("sink", address) for address in _sink_addresses(sink)]
    try:
        dedup = sink.dedup_config()
    except ConfigError:
        dedup = None
    if dedup is not None:
        found.append(("catalog", host_port(dedup.redis_url, DEFAULT_PORTS["redis"])))
    if isinstance(cfg.source, KafkaSourceConfig):
        found += [("source", a) for a in _brokers(cfg.source.bootstrap_servers)]
    buffer = getattr(sink, "buffer", None)
    if buffer is not None:
        found += [("buffer", a) for a in _brokers(buffer.bootstrap_servers)]
    return found


def _sink_addresses(sink: SinkConfig) -> list[str]:
    chaos = registry.kind_of(sink).chaos
    return [host_port(address, chaos.default_port) for address in chaos.addresses(sink)]


def _brokers(bootstrap_servers: str) -> list[str]:
    return [host_port(b.strip(), DEFAULT_PORTS["kafka"]) for b in bootstrap_servers.split(",")]


def restartable(
    cfg: PipelineConfig, home: Path | None = None
) -> tuple[list[Server], list[Skipped]]:
    """The pipeline's servers that are local services of ``home`` (one entry per service,
    its roles merged), and every other address with the reason it is skipped."""
    local, reason = _local_services(home)
    servers: dict[str, Server] = {}
    skipped: list[Skipped] = []
    for role, address in pipeline_addresses(cfg):
        service = local.get(address)
        if service is None:
            skipped.append(
                Skipped(role, address, reason or "not a local service of `exactlyonce services`")
            )
            continue
        known = servers.get(service)
        roles = (*known.roles, role) if known else (role,)
        servers[service] = Server(service, address, tuple(dict.fromkeys(roles)))
    return list(servers.values()), skipped


def _local_services(home: Path | None) -> tuple[dict[str, str], str]:
    """host:port -> service name of the running local services whose restart comes back on
    the same port; else nothing, and why."""
    root = home_dir(home)
    if use_docker():
        return {}, "the services run in Docker: restart them yourself"
    try:
        env = service_env(root)
    except RuntimeError:
        return {}, f"no local services in {root} (`exactlyonce services up`)"
    found: dict[str, str] = {}
    for name in SERVICES:
        address = host_port(env[_ENV_OF[name]].split(",")[0], 0)
        if service_pid(name, root) is None or address != f"127.0.0.1:{port(name)}":
            continue
        if name == "kafka" and not _kafka_ports_kept(root):
            continue
        found[address] = name
    for name in ON_DEMAND:
        if service_pid(name, root) is not None:
            found[f"127.0.0.1:{port(name)}"] = name
    return {**found, **cluster_addresses(root)}, ""


def _kafka_ports_kept(root: Path) -> bool:
    """The broker's storage was formatted for the ports it would start on (else a start
    formats it again: empty)."""
    stamp = root / "kafka" / "formatted-for"
    try:
        return stamp.read_text() == f"{port('kafka')} {port('kafka-controller')}\n"
    except OSError:
        return False


def restart(service: str, *, hard: bool, down_s: float, home: Path | None = None) -> Restart:
    """SIGKILL (``hard``) or cleanly stop the local ``service``, wait until it is gone, keep
    it down ``down_s`` seconds, start it again and return once it answers."""
    root = home_dir(home)
    old = service_pid(service, root)
    if old is None:
        raise RuntimeError(f"{service} is not running under {root}")
    began = time.monotonic()
    if hard:
        _kill_hard(old)
    else:
        stop_service(service, root)
    if not poll_until(lambda: not _up(old, service), EXIT_POLL.replace(deadline_s=GONE_TIMEOUT_S)):
        raise RuntimeError(f"{service} (pid {old}) did not go away")
    time.sleep(down_s)
    start_service(service, root)
    new = service_pid(service, root)
    if new is None:
        raise RuntimeError(f"{service} did not come back under {root}")
    return Restart(old, new, time.monotonic() - began)


def _kill_hard(pid: int) -> None:
    """SIGKILL the service's process group (never ours), else the process alone."""
    group = os.getpgid(pid)
    if group != os.getpgrp():
        os.killpg(group, signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGKILL)


def _up(pid: int, service: str) -> bool:
    """The old process lives, or its port is still open (an exiting process's sockets close
    after its command line empties)."""
    return pid_alive(pid) or tcp_open(port(service))
