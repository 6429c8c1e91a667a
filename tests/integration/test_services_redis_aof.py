"""The persistent local Redis (service ``redis-aof``, the soak's Redis sink server): what it
acknowledged survives a hard restart by chaos (SIGKILL of its process group), which is what
lets chaos restart a Redis sink's own server. A real redis-server in a temporary home."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from exactlyonce.integration.lab.chaos.servers import restart
from exactlyonce.integration.lab.services import down, port, up
from tests.support.private_kafka import free_port  # below the ephemeral range: safe to restart on


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("EXACTLYONCE_REDIS_AOF_PORT", str(free_port()))
    up(["redis-aof"], tmp_path)
    yield tmp_path
    down(["redis-aof"], tmp_path)


@pytest.mark.parametrize("hard", [True, False], ids=["hard", "clean"])
def test_what_it_acknowledged_survives_a_restart(home: Path, hard: bool) -> None:
    client = redis.Redis(port=port("redis-aof"))
    client.xadd("events", {"e": "1"})
    client.set("head", "7")
    done = restart("redis-aof", hard=hard, down_s=0.0, home=home)
    assert done.new_pid != done.old_pid
    assert client.get("head") == b"7" and client.xlen("events") == 1
