"""A pipeline file's ``trigger: {real_time: ...}`` and ``resume: from_sink`` (Spark
Real-time Mode): what the file may say, and errors that name the field before Spark starts."""

from __future__ import annotations

from typing import Any

import pytest

from exactlyonce.errors import ConfigError
from tests.unit.test_kafka_source_config import load, pipeline


def with_trigger(trigger: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {**pipeline(), "trigger": trigger, **top}


def test_a_real_time_trigger_runs_in_real_time_mode() -> None:
    cfg = load(with_trigger({"real_time": "5 seconds"}))
    assert cfg.trigger_kwargs() == {"real_time": "5 seconds", "transport": "arrow"}
    assert cfg.resume == "checkpoint"


def test_the_transport_may_be_spark_foreach_and_applies_to_real_time_only() -> None:
    cfg = load(with_trigger({"real_time": "5 seconds", "transport": "foreach"}))
    assert cfg.trigger_kwargs() == {"real_time": "5 seconds", "transport": "foreach"}
    with pytest.raises(ConfigError, match="trigger"):
        load(with_trigger({"real_time": "5 seconds", "transport": "pickle"}))
    with pytest.raises(ConfigError, match="real_time only"):
        load(with_trigger({"processing_time": "1 second", "transport": "arrow"}))


def test_a_real_time_trigger_takes_an_interval() -> None:
    with pytest.raises(ConfigError, match="trigger.real_time"):
        load(with_trigger({"real_time": "soon"}))


def test_one_trigger_only() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        load(with_trigger({"real_time": "5 seconds", "processing_time": "1 second"}))


def test_real_time_mode_needs_a_kafka_source() -> None:
    data = with_trigger({"real_time": "5 seconds"})
    data["source"] = {"type": "files", "path": "/in", "schema": "event_id STRING"}
    with pytest.raises(ConfigError, match=r"trigger\.real_time.*Kafka source"):
        load(data)


def test_resume_from_sink_needs_real_time_mode() -> None:
    with pytest.raises(ConfigError, match=r"resume.*real_time"):
        load({**pipeline(), "trigger": {"processing_time": "1 second"}, "resume": "from_sink"})
    cfg = load(with_trigger({"real_time": "5 seconds"}, resume="from_sink"))
    assert cfg.resume == "from_sink"


def test_every_sinks_realtime_has_the_one_default_commit_interval() -> None:
    import inspect

    from exactlyonce.connectors import KafkaSink, PostgresSink, RedisSink
    from exactlyonce.connectors.base.realtime import COMMIT_INTERVAL_S, RealtimeOptions
    from exactlyonce.connectors.search.sink import SearchSink

    assert RealtimeOptions().commit_interval == COMMIT_INTERVAL_S
    for sink in (KafkaSink, PostgresSink, RedisSink, SearchSink):
        default = inspect.signature(sink.realtime).parameters["commit_interval"].default
        assert default == COMMIT_INTERVAL_S, sink.__name__
