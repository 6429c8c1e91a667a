"""A sink's batch report shared with a Spark Connect client through the session's runtime
configuration, as pure logic (the end-to-end run is tests/integration/test_run_remote.py)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from exactlyonce.connectors.base.report import BatchReport
from exactlyonce.connectors.base.shared_report import (
    is_connect_session,
    report_from_json,
    report_json,
    report_key,
    share_report,
)

REPORT = BatchReport("orders", "postgres:events", 7, False, rows=10, written=9, duplicates=1)


class _Conf:
    def __init__(self, fail: bool = False) -> None:
        self.values: dict[str, str] = {}
        self.fail = fail

    def set(self, key: str, value: str) -> None:
        if self.fail:
            raise RuntimeError("server gone")
        self.values[key] = value


def _session(module: str, conf: _Conf) -> Any:
    cls = type("SparkSession", (), {"__module__": module})
    session = cls()
    session.conf = conf
    return session


def test_a_report_comes_back_as_it_went() -> None:
    assert report_from_json(report_json(REPORT)) == REPORT


def test_fields_a_newer_sink_adds_are_dropped() -> None:
    text = json.dumps({**json.loads(report_json(REPORT)), "from_the_future": 1})
    assert report_from_json(text) == REPORT


def test_only_a_connect_session_gets_the_report() -> None:
    connect, classic = _Conf(), _Conf()
    share_report(_session("pyspark.sql.connect.session", connect), REPORT)
    share_report(_session("pyspark.sql.session", classic), REPORT)
    assert connect.values == {report_key("orders", "postgres:events"): report_json(REPORT)}
    assert classic.values == {}
    assert is_connect_session(_session("pyspark.sql.connect.session", connect))


def test_a_failure_to_share_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        share_report(_session("pyspark.sql.connect.session", _Conf(fail=True)), REPORT)
    assert "could not share epoch 7's report" in caplog.text
