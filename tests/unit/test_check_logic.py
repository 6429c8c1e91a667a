"""The pure logic of ``exactlyonce check`` and of the worker probe: statuses, sentences."""

from __future__ import annotations

import json
from pathlib import Path

import pyspark

from exactlyonce.connectors.base.guarantee import (
    Check,
    Guarantee,
    GuaranteeReport,
    checked,
    head_check,
)
from exactlyonce.connectors.base.head import Head
from exactlyonce.connectors.base.redis_health import catalog_persistence, eviction, sink_persistence
from exactlyonce.connectors.base.workers import (
    WorkerReport,
    _compile_probe,
    failed_probe_problem,
    worker_problem,
)
from exactlyonce.errors import ConfigError, SinkUnavailableError
from exactlyonce.integration.cli.check import checkpoint_query_id


def test_head_against_checkpoint() -> None:
    assert head_check(None, None, True).status == "ok"
    assert head_check(Head(3, "a", 2), "a", True).status == "ok"
    assert head_check(Head(3, None, 2), "a", True).status == "ok"  # bound at the next start
    assert head_check(None, "a", True).status == "warning"
    assert head_check(Head(3, "a", 2), "b", True).status == "failing"
    assert head_check(Head(3, "a", 2), None, True).status == "failing"  # checkpoint deleted
    assert head_check(Head(3, "a", 2), None, False).status == "ok"  # not readable: not compared


def test_checked_turns_errors_into_one_failing_check() -> None:
    def down() -> Check:
        raise SinkUnavailableError("cannot reach X")

    def refused() -> Check:
        raise ConfigError("table", "no index")

    def bug() -> Check:
        raise KeyError("k")

    assert [c.status for c in checked("x", down)] == ["failing"]
    assert checked("x", refused)[0].fix == "change `table` (see the detail)"
    assert checked("x", bug)[0].detail == "KeyError: 'k'"


def test_report_scrubs_secrets_and_counts() -> None:
    report = GuaranteeReport(
        "s", Guarantee("EXACTLY ONCE", "m"), [Check("a", "failing", "pw=hunter2", "use hunter2")]
    )
    clean = report.scrubbed(["hunter2"])
    assert "hunter2" not in json.dumps(clean.as_dict()) + "\n".join(clean.lines())
    assert clean.failing and clean.counts() == {"ok": 0, "warning": 0, "failing": 1}


def test_redis_settings() -> None:
    always = {"appendonly": "yes", "appendfsync": "always"}
    everysec = {"appendonly": "yes", "appendfsync": "everysec"}
    off = {"appendonly": "no", "appendfsync": "everysec"}
    assert sink_persistence(always).status == "ok"
    assert sink_persistence(everysec).status == "warning"
    assert sink_persistence(off).status == "failing"
    assert sink_persistence(None).status == "warning"  # CONFIG refused
    assert catalog_persistence(off, unique_sink=True).status == "warning"
    assert catalog_persistence(everysec, unique_sink=True).status == "ok"
    assert catalog_persistence(everysec, unique_sink=False).status == "warning"
    assert eviction({"maxmemory-policy": "noeviction"}, "catalog").status == "ok"
    lru = eviction({"maxmemory-policy": "allkeys-lru", "maxmemory": "0"}, "catalog")
    assert lru.status == "failing" and "as soon as maxmemory is set" in lru.detail


def test_checkpoint_metadata(tmp_path: Path) -> None:
    assert checkpoint_query_id(str(tmp_path / "none")) == (True, None)
    (tmp_path / "metadata").write_text('{"id":"q-1"}\n')
    assert checkpoint_query_id(str(tmp_path)) == (True, "q-1")
    assert checkpoint_query_id(f"file://{tmp_path}") == (True, "q-1")
    assert checkpoint_query_id("s3a://bucket/ckpt") == (False, None)


def worker(**changes: object) -> WorkerReport:
    import sys

    values: dict[str, object] = {
        "executable": "/usr/bin/python3",
        "python": ".".join(map(str, sys.version_info[:3])),
        "pyspark": pyspark.__version__,
        "version": "0.1.0",
        "error": None,
        "ms": 1.0,
    }
    return WorkerReport(**{**values, **changes})  # type: ignore[arg-type]


def test_worker_problems_are_one_sentence_with_the_fix() -> None:
    assert worker_problem(worker()) is None
    missing = worker_problem(worker(version=None, error="ModuleNotFoundError: x"), "python3")
    assert missing is not None and "(started as python3) run /usr/bin/python3" in missing
    assert "cannot import exactlyonce" in missing and "PYSPARK_PYTHON" in missing
    other = worker_problem(worker(python="2.7.18"))
    assert other is not None and "but the driver runs Python" in other
    old = worker_problem(worker(pyspark="3.5.1"))
    assert old is not None and "pyspark 3.5.1" in old
    for problem in (missing, other, old):
        assert ". " not in problem.replace("spark.session()", "")
    mismatch = RuntimeError("[PYTHON_VERSION_MISMATCH] Python in worker has different version")
    assert "another Python version" in (failed_probe_problem(mismatch) or "")
    assert failed_probe_problem(RuntimeError("disk full")) is None


def test_the_probe_ships_by_value() -> None:
    from pyspark import cloudpickle

    probe = _compile_probe()
    assert b"exactlyonce.connectors" not in cloudpickle.dumps(probe)
