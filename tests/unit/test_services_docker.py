"""With Docker in use, ``services down`` stops the compose services it knows and leaves the
local-only ones (tansu, kafka3, redis-aof, opensearch: not in docker-compose.yml) alone; ``up``
of a local-only one is refused, naming it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from exactlyonce.integration.lab.services import manager


def test_down_stops_only_the_compose_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopped: list[list[str]] = []
    monkeypatch.setattr(manager, "use_docker", lambda: True)
    monkeypatch.setattr(manager, "docker_down", lambda names: stopped.append(list(names)))
    manager.down(home=tmp_path)  # every known service, the local-only ones too
    assert stopped == [["pg", "redis", "kafka"]]


def test_up_of_a_local_only_service_under_docker_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def up(names: Sequence[str], home: Path) -> dict[str, str]:
        raise AssertionError(f"compose started {names}")

    monkeypatch.setattr(manager, "use_docker", lambda: True)
    monkeypatch.setattr(manager, "docker_up", up)
    with pytest.raises(ValueError, match="opensearch.*not in docker-compose.yml"):
        manager.up(["pg", "opensearch"], tmp_path)
