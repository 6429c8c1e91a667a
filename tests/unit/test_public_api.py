"""The import paths users rely on keep working after the restructure."""

from __future__ import annotations

import importlib


def test_the_documented_import_paths() -> None:
    from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer
    from exactlyonce.connectors import (
        ConfigError,
        ElasticsearchSink,
        ExactlyOnceError,
        KafkaSink,
        PostgresSink,
        RedisSink,
    )
    from exactlyonce.connectors.kafka.reader import read_exactly_once
    from exactlyonce.dedup import DedupConfig
    from exactlyonce.integration.config import load_config
    from exactlyonce.testing import MemorySink

    assert issubclass(ConfigError, ExactlyOnceError)
    for sink in (PostgresSink, KafkaSink, RedisSink, ElasticsearchSink):
        assert sink.__doc__ and "exactly once" in sink.__doc__.lower()
        assert hasattr(sink, "from_config")
    assert all((Buffered, Drainer, KafkaBuffer, read_exactly_once, DedupConfig, load_config))
    assert MemorySink is not None


def test_each_sink_package_exports_its_config_model() -> None:
    for name in ("postgres", "kafka", "redis", "elasticsearch"):
        module = importlib.import_module(f"exactlyonce.connectors.{name}")
        config = [n for n in module.__all__ if n.endswith("SinkConfig")]
        assert config, f"exactlyonce.connectors.{name} exports no config model"


def test_the_package_is_typed() -> None:
    import exactlyonce

    assert importlib.resources.files(exactlyonce).joinpath("py.typed").is_file()
