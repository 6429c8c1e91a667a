"""The worker probe runs once per (Spark application, worker Python), not once per sink start."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from exactlyonce.connectors.base import workers
from exactlyonce.errors import ConfigError


def fake_session(app: str, python: str) -> Any:
    return SimpleNamespace(sparkContext=SimpleNamespace(applicationId=app, pythonExec=python))


def report(error: str | None = None) -> workers.WorkerReport:
    import pyspark

    python = ".".join(map(str, sys.version_info[:3]))
    return workers.WorkerReport(sys.executable, python, pyspark.__version__, "1", error, 5.0)


def test_a_session_whose_workers_passed_is_not_probed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probes: list[str] = []
    monkeypatch.setattr(workers, "_PASSED", {})

    def probe(spark: Any) -> workers.WorkerReport:
        probes.append(spark.sparkContext.applicationId)
        return report()

    monkeypatch.setattr(workers, "probe_workers", probe)
    first = workers.check_workers(fake_session("local-1", "/py"))
    assert workers.check_workers(fake_session("local-1", "/py")) is first
    workers.check_workers(fake_session("local-1", "/other/py"))  # another worker Python
    workers.check_workers(fake_session("local-2", "/py"))  # a new session
    assert probes == ["local-1", "local-1", "local-2"]


def test_refused_workers_are_probed_again_at_the_next_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    monkeypatch.setattr(workers, "_PASSED", {})

    def probe(spark: Any) -> workers.WorkerReport:
        calls.append(1)
        return report(error="ModuleNotFoundError: No module named 'exactlyonce'")

    monkeypatch.setattr(workers, "probe_workers", probe)
    for _ in range(2):
        with pytest.raises(ConfigError):
            workers.check_workers(fake_session("local-1", "/py"))
    assert len(calls) == 2
