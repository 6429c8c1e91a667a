"""The OpenSearch sink's settings and seam, without a node: its URL, its refusals, and a sink
object that pickles as configuration and names its engine in errors."""

from __future__ import annotations

import pickle

import pytest

from exactlyonce.connectors.opensearch import OpenSearchSink, OpenSearchSinkConfig
from exactlyonce.connectors.search.engine import Conflict, EngineError, NotFound, Unreachable
from exactlyonce.connectors.search.policy import is_transient
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config.urls import sink_config_from_url

PW = "os-secret-pw"


def test_opensearch_url_and_refusals() -> None:
    config = sink_config_from_url(
        f"opensearch+https://writer:{PW}@search:9200?index=ev&dedup=false", query_name="q"
    )
    assert isinstance(config, OpenSearchSinkConfig) and config.type == "opensearch"
    assert config.hosts == ("https://search:9200",) and config.username == "writer"
    assert config.password is not None and config.password.get_secret_value() == PW
    with pytest.raises(ConfigError, match="api_key"):
        OpenSearchSinkConfig(
            hosts=["http://h:9200"], index="ev", id_columns=["k"], query_name="q", api_key="k"
        )
    with pytest.raises(ConfigError, match="op_type"):
        OpenSearchSink("http://h:9200", "ev", ["k"], "q", mode="upsert", op_type="index")


def test_the_sink_pickles_as_configuration_and_hides_its_password() -> None:
    sink = OpenSearchSink(
        "http://h:9200", "ev", ["k"], "q", basic_auth=("writer", PW), dedup=False, check=False
    )
    conn = pickle.loads(pickle.dumps(sink.conn))
    assert conn.name == "OpenSearch" and PW in conn.secrets()
    assert PW not in repr(conn) and PW not in repr(sink.config)


def test_the_protocols_errors_pickle_and_say_what_is_retried() -> None:
    for error in (NotFound(404, "x"), Conflict(409, "y"), EngineError(503, "z")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and again.status_code == error.status_code
    assert is_transient(EngineError(429, "es_rejected_execution_exception"))
    assert is_transient(Unreachable("connection refused"))
    assert not is_transient(Conflict(409, "version_conflict_engine_exception"))
