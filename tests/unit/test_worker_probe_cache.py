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


@pytest.mark.parametrize(
    ("master", "python", "root", "path", "shared", "skip"),
    [
        # local, this interpreter, the package in site-packages: every worker imports it
        ("local[2]", "/venv/bin/python", "/venv/site", ["/venv/site"], ["/venv/site"], True),
        # an editable install's finder: the package root is on no sys.path entry at all
        ("local[*]", "/venv/bin/python", "/repo", ["/venv/site"], ["/venv/site"], True),
        # $PYTHONPATH or the working folder (a worker's sys.path[0]) hold it
        ("local[1]", "/venv/bin/python", "/repo", ["/repo"], ["/repo"], True),
        # only this script's folder (or a sys.path entry added at run time) holds it
        ("local[2]", "/venv/bin/python", "/scripts", ["/scripts", "/venv/site"], [], False),
        ("local[2]", "/other/python", "/venv/site", ["/venv/site"], ["/venv/site"], False),
        ("spark://m:7077", "/venv/bin/python", "/venv/site", ["/venv/site"], ["/venv/site"], False),
        (None, "/venv/bin/python", "/venv/site", ["/venv/site"], ["/venv/site"], False),
    ],
)
def test_the_probe_is_skipped_only_where_the_workers_are_this_interpreter_on_this_machine(
    master: str | None, python: str, root: str, path: list[str], shared: list[str], skip: bool
) -> None:
    assert (
        workers.workers_are_this_interpreter(master, python, "/venv/bin/python", root, path, shared)
        is skip
    )


def test_a_local_session_of_this_interpreter_is_not_probed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workers, "_PASSED", {})
    monkeypatch.setattr(workers, "probe_workers", lambda spark: pytest.fail("probed"))
    session = SimpleNamespace(
        sparkContext=SimpleNamespace(
            applicationId="local-9", pythonExec=sys.executable, master="local[2]"
        )
    )
    got = workers.check_workers(session)  # type: ignore[arg-type]
    assert (got.executable, got.error, got.ms) == (sys.executable, None, 0.0)
