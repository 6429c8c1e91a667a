"""The private broker's first start survives a port another process took first."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.support import private_kafka
from tests.support.private_kafka import PrivateKafka

TAKEN = (
    "kafka exited while starting; log k.log:\n"
    "Caused by: java.net.BindException: Address already in use"
)


def test_a_first_start_on_a_port_taken_meanwhile_moves_to_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried: list[tuple[int, int]] = []
    broker = PrivateKafka(tmp_path, port=20001, controller_port=20002)

    def start(self: PrivateKafka) -> int:
        tried.append((self.port, self.controller_port))
        if len(tried) == 1:
            raise RuntimeError(TAKEN)
        return 4242

    monkeypatch.setattr(PrivateKafka, "start", start)
    ports = iter([20003, 20004])
    monkeypatch.setattr(private_kafka, "free_port", lambda: next(ports))
    assert broker.start_new() == 4242
    assert tried == [(20001, 20002), (20003, 20004)]


def test_a_first_start_that_fails_for_another_reason_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def start(self: PrivateKafka) -> int:
        calls.append(1)
        raise RuntimeError("kafka exited while starting; log k.log:\nOutOfMemoryError")

    monkeypatch.setattr(PrivateKafka, "start", start)
    with pytest.raises(RuntimeError, match="OutOfMemoryError"):
        PrivateKafka(tmp_path, port=20001, controller_port=20002).start_new()
    assert len(calls) == 1


def test_the_broker_and_its_controller_never_share_a_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = iter([20005, 20005, 20005, 20006])
    monkeypatch.setattr(private_kafka, "free_port", lambda: next(ports))
    broker = PrivateKafka(tmp_path)
    assert (broker.port, broker.controller_port) == (20005, 20006)


def test_ports_taken_on_every_attempt_fail_with_the_last_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        PrivateKafka, "start", lambda self: (_ for _ in ()).throw(RuntimeError(TAKEN))
    )
    ports = itertools.count(20009)
    monkeypatch.setattr(private_kafka, "free_port", lambda: next(ports))
    with pytest.raises(RuntimeError, match="Address already in use"):
        PrivateKafka(tmp_path, port=20001, controller_port=20002).start_new()
