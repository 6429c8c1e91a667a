"""Spark Declarative Pipelines (exactlyonce.integration.declarative) and credentials by
environment variable in format("exactlyonce")'s options: pure logic, no Spark."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr
from pyspark.sql.connect.client.core import PlanObservedMetrics

from exactlyonce.errors import ConfigError
from exactlyonce.integration import declarative
from exactlyonce.integration.datasource.options import options_with_credentials, sink_config

DSN = "postgresql://app:Very-Secret-pw@127.0.0.1:5432/app"


def _options(**extra: Any) -> dict[str, Any]:
    base = {"sink": "postgres", "table": "events", "id_columns": ["event_id"], "query_name": "q"}
    return {**base, "dsn": "${EO_TEST_DSN}", **extra}


@pytest.fixture(autouse=True)
def _dsn_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EO_TEST_DSN", DSN)


def test_an_option_reads_a_credential_from_the_environment_where_the_sink_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EO_TEST_DSN", DSN)
    config: Any = sink_config(_texts(_options(table="t")))
    assert isinstance(config.dsn, SecretStr) and config.dsn.get_secret_value() == DSN
    defaulted: Any = sink_config(_texts(_options(table="${EO_UNSET_TABLE:-fallback}")))
    assert defaulted.table == "fallback"


def test_an_unset_variable_is_a_config_error_naming_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EO_TEST_DSN", raising=False)
    with pytest.raises(ConfigError) as caught:
        sink_config(_texts(_options()))
    assert caught.value.field == "dsn"
    assert "EO_TEST_DSN is not set where the sink runs" in str(caught.value)


def test_options_with_credentials_names_each_whatever_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EO_TEST_DSN", DSN)
    assert options_with_credentials(_texts(_options())) == []
    leaked = _texts({k: v for k, v in _options().items() if k != "dsn"} | {"secret.dsn": DSN})
    assert options_with_credentials(leaked) == ["secret.dsn"]


def test_create_sink_refuses_a_bad_setting_before_any_spark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(declarative, "_active_session", _no_spark)
    with pytest.raises(ConfigError) as caught:
        declarative.create_sink("s", _options(mode="append"))
    assert caught.value.field == "mode"
    with pytest.raises(ConfigError) as caught:
        declarative.create_sink("s", _options(shards="many"))
    assert caught.value.field == "shards"


def test_create_sink_refuses_a_credential_written_into_an_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(declarative, "_active_session", _no_spark)
    with pytest.raises(ConfigError) as caught:
        declarative.create_sink("s", _options(dsn=DSN))
    assert caught.value.field == "dsn"
    assert "Very-Secret-pw" not in str(caught.value)
    assert "${ENV_VAR}" in str(caught.value)


def test_the_connect_client_passes_over_accumulator_metrics_only() -> None:
    accumulators = PlanObservedMetrics(declarative.ACCUMULATOR_METRICS, [], [])
    observed = PlanObservedMetrics("mine", [], [])
    client = _Client([{"event": 1}, accumulators, observed, {"event": 2}])
    spark: Any = _Session(client)
    declarative.skip_accumulator_metrics(spark)
    declarative.skip_accumulator_metrics(spark)  # once is enough
    assert list(client._execute_and_fetch_as_iterator()) == [{"event": 1}, observed, {"event": 2}]


def _texts(options: dict[str, Any]) -> dict[str, str]:
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in options.items()}


def _no_spark() -> Any:
    raise AssertionError("reached Spark before the settings were checked")


class _Client:
    def __init__(self, responses: list[Any]) -> None:
        self.responses = responses

    def _execute_and_fetch_as_iterator(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        yield from self.responses


class _Session:
    def __init__(self, client: _Client) -> None:
        self.client = client
