"""The local genuine Apache Kafka broker, under ``<home>/kafka``.

Apache Kafka 4 in KRaft mode, one JVM with the broker and controller roles, listening on
loopback only: clients on port ``kafka`` (19092), the controller on ``kafka-controller``
(19093). Its jars come from Maven Central (:data:`exactlyonce.integration.jars.KAFKA_BROKER`),
it runs on the machine's Java 17+. Data lives on disk in ``<home>/kafka/data`` and survives
``stop``/``start`` (a broker bounce keeps every topic, offset and transaction). The storage is
formatted once (``kafka.tools.StorageTool format --standalone``, a fixed cluster id); it is
formatted again, empty, only when the ports it was formatted for changed.

The settings (:data:`SETTINGS`) are the ones ``docker-compose.yml`` gives the
``apache/kafka`` image, so a user's ``docker compose up`` gets what the tests used.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from exactlyonce.integration.jars import KAFKA_BROKER, classpath, require_java
from exactlyonce.integration.lab.services.env import HOST, port
from exactlyonce.integration.lab.services.processes import DetachedService, check, run, tcp_open

PROCESS_NAME = "kafka.Kafka"
CLUSTER_ID = "4L0IXjZJQjmtGq3bdqpDNQ"
HEAP = "-Xmx768m"
START_TIMEOUT_S = 120.0

# Single node: every internal topic has one replica. Transactions time out on the broker
# after transaction.timeout.ms (the producer's, at most transaction.max.timeout.ms); the
# cleanup that aborts them runs every 10 s by default, here every second. Partitions of the
# internal topics are fewer than the defaults (50) so a fresh broker is ready sooner.
SETTINGS: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "10",
    "transaction.max.timeout.ms": "900000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}


# WARN and above, plus the broker's start/stop and the transaction coordinator's aborts.
LOG4J2 = """\
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.txn.name = kafka.coordinator.transaction
logger.txn.level = INFO
"""


def bootstrap() -> str:
    return f"{HOST}:{port('kafka')}"


def answers() -> bool:
    return metadata_answers(port("kafka"))


def metadata_answers(port_: int) -> bool:
    """True if a TCP connect to the Kafka-protocol broker on ``port_`` succeeds and an
    AdminClient gets the cluster metadata with a broker in it."""
    if not tcp_open(port_):
        return False
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"{HOST}:{port_}", "log_level": 0})
    try:
        return bool(admin.list_topics(timeout=5).brokers)
    except KafkaException:
        return False


def server_properties(data: Path) -> str:
    """The broker's ``server.properties`` for the configured ports and ``data`` dir."""
    client, controller = port("kafka"), port("kafka-controller")
    values = {
        **SETTINGS,
        "listeners": f"PLAINTEXT://{HOST}:{client},CONTROLLER://{HOST}:{controller}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{client}",
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller}",
        "log.dirs": str(data),
    }
    return "".join(f"{key}={value}\n" for key, value in values.items())


def start(home: Path) -> None:
    """Start the broker unless it runs, detached from this process; return once it answers.
    Resolves its jars with Maven the first time. (``stop``: SIGTERM, a clean shutdown;
    SIGKILL after 30 s; data is kept.)"""
    SERVICE.start(home, _argv)


def _argv(base: Path) -> list[str]:
    """The broker's command, its config written and its storage formatted (once)."""
    java, cp = require_java(), classpath(KAFKA_BROKER)
    config = base / "server.properties"
    config.write_text(server_properties(base / "data"))
    _format_once(java, cp, config, base)
    logging = base / "log4j2.properties"
    logging.write_text(LOG4J2)
    argv = [java, HEAP, "-XX:+UseG1GC", "-Djava.awt.headless=true"]
    argv += [f"-Dlog4j2.configurationFile={logging}", "-cp", cp]
    return [*argv, PROCESS_NAME, str(config)]


def _format_once(java: str, cp: str, config: Path, base: Path) -> None:
    """Format the storage unless it was formatted for these same ports."""
    stamp = base / "formatted-for"
    ports = f"{port('kafka')} {port('kafka-controller')}\n"
    data = base / "data"
    if (data / "meta.properties").is_file() and stamp.is_file() and stamp.read_text() == ports:
        return
    shutil.rmtree(data, ignore_errors=True)
    tool = [java, "-cp", cp, "kafka.tools.StorageTool", "format", "--standalone"]
    result = run([*tool, "-t", CLUSTER_ID, "-c", str(config)], timeout=120)
    check(result, "formatting the Kafka storage")
    stamp.write_text(ports)


SERVICE = DetachedService(
    "kafka",
    PROCESS_NAME,
    answers,
    ports=("kafka", "kafka-controller"),
    start_timeout=START_TIMEOUT_S,
    stop_timeout=30.0,
)
paths, pid, stop = SERVICE.paths, SERVICE.pid, SERVICE.stop
