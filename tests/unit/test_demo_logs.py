"""The demo's terminal is for its story: the Kafka clients of the demo process log into the
demo's log file (``exactlyonce.integration.lab.demo.logs``), not onto the terminal. A librdkafka
client pointed at a closed port (127.0.0.1:1) stands in for a broker's noise: no service."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
from confluent_kafka import Producer

from exactlyonce.connectors.kafka.clients import client_log
from exactlyonce.integration.lab.demo import producer_config
from exactlyonce.integration.lab.demo.logs import logs_to

GETPID = (
    "GETPID [rdkafka#producer-3] [thrd:main]: 127.0.0.1:19092/1: Failed to acquire transactional "
    "PID from broker TxnCoordinator/1: Broker: Coordinator load in progress: retrying"
)


def test_client_lines_go_to_the_file_and_the_package_warnings_to_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "demo.log"
    with logs_to(path):
        client_log.warning(GETPID)
        logging.getLogger("exactlyonce.kafka").warning("the broker shows aborted records")
        logging.getLogger("exactlyonce.kafka").info("fenced 2 shard producers")
        with warnings.catch_warnings():
            warnings.simplefilter("always")  # not pytest's: errors
            warnings.warn("a library's deprecation", UserWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert "GETPID" not in err and "deprecation" not in err and "fenced" not in err, err
    assert "the broker shows aborted records" in err
    text = path.read_text()
    assert all(s in text for s in ("GETPID", "aborted records", "fenced", "deprecation")), text
    client_log.warning("after the demo")  # the handlers are gone again
    assert "after the demo" not in path.read_text()


def test_the_demo_log_is_the_only_place_meanwhile(tmp_path: Path) -> None:
    """A handler set up earlier on the package logger (a CLI's, a test's) sees nothing while
    the demo routes the lines, and is back afterwards."""
    seen: list[str] = []

    class Earlier(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    package, earlier = logging.getLogger("exactlyonce"), Earlier()
    package.addHandler(earlier)
    try:
        with logs_to(tmp_path / "demo.log"):
            client_log.warning(GETPID)
        assert seen == [] and earlier in package.handlers
    finally:
        package.removeHandler(earlier)


def test_the_demo_producer_logs_through_python(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """librdkafka writes to file descriptor 2 itself unless the client has a ``logger``."""
    path = tmp_path / "demo.log"
    with logs_to(path):
        producer = Producer(producer_config("127.0.0.1:1"))  # nothing listens: it logs FAIL
        producer.produce("t", b"x")
        producer.flush(1.5)
        producer.poll(0.5)
        del producer
    assert "Connection refused" not in capfd.readouterr().err
    assert "Connection refused" in path.read_text()
