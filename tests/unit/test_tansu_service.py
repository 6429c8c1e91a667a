"""Tansu's start moves TANSU to a free port when its port is taken, never Kafka's."""

from __future__ import annotations

from pathlib import Path

import pytest

from exactlyonce.integration.lab.services import processes, tansu


class Moved(Exception):
    pass


def test_a_taken_tansu_port_moves_tansu_not_kafka(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved: list[str] = []

    def port_taken(name: str, home: Path) -> None:
        moved.append(name)
        raise Moved

    monkeypatch.setattr(processes, "adopt_running", lambda *args: False)
    monkeypatch.setattr(processes, "tcp_open", lambda port: True)
    monkeypatch.setattr(processes, "port_taken", port_taken)
    with pytest.raises(Moved):
        tansu.start(tmp_path)
    assert moved == ["tansu"]
