"""The durable Elasticsearch stand-in as a local service (``es-stand-in``, the soak's
Elasticsearch sink server; no Elasticsearch server is installable here): what it acknowledged
survives a restart by chaos, hard (SIGKILL of its process group) and clean, which is what lets
chaos restart an Elasticsearch sink's own server. Read back with the official client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.lab.chaos.servers import restart, restartable
from exactlyonce.integration.lab.services import down, port, status, up
from tests.support.private_kafka import free_port  # below the ephemeral range: safe to restart on


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("EXACTLYONCE_ES_STAND_IN_PORT", str(free_port()))
    up(["es-stand-in"], tmp_path)
    yield tmp_path
    down(["es-stand-in"], tmp_path)


@pytest.mark.parametrize("hard", [True, False], ids=["hard", "clean"])
def test_what_it_acknowledged_survives_a_restart(home: Path, hard: bool) -> None:
    url = f"http://127.0.0.1:{port('es-stand-in')}"
    with Elasticsearch(url) as es:
        es.index(index="events", id="e1", document={"n": 1})
        es.index(index="events", id="e1", document={"n": 2})
        assert status(["es-stand-in"], home) == {"es-stand-in": True}
        done = restart("es-stand-in", hard=hard, down_s=0.0, home=home)
        assert done.new_pid != done.old_pid
        found = es.get(index="events", id="e1")
        assert (found["_version"], found["_source"]) == (2, {"n": 2})


def test_chaos_restarts_it_as_an_elasticsearch_sinks_server(home: Path) -> None:
    cfg = PipelineConfig.model_validate(
        {
            "query_name": "q",
            "checkpoint": str(home / "checkpoint"),
            "source": {"type": "files", "path": str(home / "in"), "schema": "e STRING"},
            "sink": {
                "type": "elasticsearch",
                "hosts": [f"http://localhost:{port('es-stand-in')}"],
                "index": "events",
                "id_columns": ["e"],
                "dedup": False,
            },
        }
    )
    servers, _ = restartable(cfg, home)
    assert [(s.service, s.roles) for s in servers] == [("es-stand-in", ("sink",))]
