"""The local OpenSearch node (service ``opensearch``, the soak's OpenSearch sink server): what it
acknowledged survives a hard restart by chaos (SIGKILL of its process group) and a clean one
(SIGTERM: the main class's hook closes the node), which is what lets chaos restart an
OpenSearch sink's own server. A genuine node in a temporary home."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exactlyonce.integration.lab.chaos.servers import restart
from exactlyonce.integration.lab.services import down, up
from exactlyonce.integration.lab.services import opensearch as node
from tests.support.private_kafka import free_port  # below the ephemeral range: safe to restart on


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("EXACTLYONCE_OPENSEARCH_PORT", str(free_port()))
    monkeypatch.setenv("EXACTLYONCE_OPENSEARCH_TRANSPORT_PORT", str(free_port()))
    up(["opensearch"], tmp_path)
    yield tmp_path
    down(["opensearch"], tmp_path)


def call(method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{node.url()}{path}", data, {"Content-Type": "application/json"}, method=method
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        answer: dict[str, Any] = json.load(resp)
        return answer


def test_what_it_acknowledged_survives_a_hard_and_a_clean_restart(home: Path) -> None:
    call("PUT", "/events/_doc/a?refresh=true", {"e": 1})
    call("PUT", "/events/_doc/b", {"e": 2})  # acknowledged, not refreshed: in the translog
    hard = restart("opensearch", hard=True, down_s=0.0, home=home)
    assert hard.new_pid != hard.old_pid
    assert call("GET", "/events/_doc/a")["found"] and call("GET", "/events/_doc/b")["found"]
    call("PUT", "/events/_doc/c", {"e": 3})
    clean = restart("opensearch", hard=False, down_s=0.0, home=home)
    assert clean.new_pid != clean.old_pid
    call("POST", "/events/_refresh")
    assert call("GET", "/events/_count")["count"] == 3
