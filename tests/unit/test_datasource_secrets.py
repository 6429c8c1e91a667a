"""format("exactlyonce"): no credential travels in a Spark option whose name Spark does not
redact (Spark shows options in plans, the UI and the event log unless their name matches
``spark.redaction.regex``)."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pytest
from pydantic import SecretStr

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.config import DedupSettings, SinkConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration.datasource.options import (
    exposed_options,
    sink_config,
    warn_exposed,
    writer_options,
)
from exactlyonce.secrets import scrub

# Spark's default spark.redaction.regex (core/.../internal/config/package.scala), written out
# here rather than taken from the code under test.
SPARK_DEFAULT_REDACTION = re.compile(r"(?i)secret|password|token|access[.]?key")
PW = "p@ss/w+rd s3cret"
CATALOG_PW = "catalog-pw%1"


def _url_pw(password: str = PW) -> str:
    return quote(password, safe="")


def _configs() -> dict[str, SinkConfig]:
    """One config per sink, each with every credential its settings take."""
    common = {
        "query_name": "q",
        "id_columns": ["event_id"],
        "redis_url": f"redis://:{_url_pw(CATALOG_PW)}@catalog:6379/0",
        "dedup": DedupSettings(expected_ids=1000),
    }
    models = {kind.name: kind.config for kind in registry.kinds()}
    return {
        "postgres": models["postgres"](
            dsn=f"postgresql://app:{_url_pw()}@db:5432/app?sslmode=disable",
            table="events",
            **common,
        ),
        "postgres, keyword DSN": models["postgres"](
            dsn=f"host=db dbname=app user=app password='{PW}'", table="events", **common
        ),
        "redis": models["redis"](
            url=f"redis://:{_url_pw()}@sink:6379/0", key_template="k:{event_id}", **common
        ),
        "elasticsearch": models["elasticsearch"](
            hosts=["http://es:9200"], index="i", username="u", password=PW, **common
        ),
        "elasticsearch, api key": models["elasticsearch"](
            hosts=["http://es:9200"], index="i", api_key=PW, **common
        ),
        "kafka": models["kafka"](
            bootstrap_servers="k:9092",
            topic="t",
            producer_config={"sasl.username": "u", "sasl.password": PW},
            **common,
        ),
    }


def _holds(value: str, *secrets: str) -> bool:
    return scrub(value, *secrets) != value


@pytest.mark.parametrize("name", list(_configs()))
def test_every_credential_goes_under_an_option_name_spark_redacts(name: str) -> None:
    config = _configs()[name]
    options = writer_options(config)
    holding = [key for key, value in options.items() if _holds(value, PW, CATALOG_PW)]
    assert holding, "the credentials travel somewhere: the test must see them"
    exposed = [key for key in holding if not SPARK_DEFAULT_REDACTION.search(key)]
    assert not exposed, f"credentials under names Spark shows: {exposed}"
    assert exposed_options(options) == []


@pytest.mark.parametrize("name", list(_configs()))
def test_the_options_build_the_same_config_again(name: str) -> None:
    config = _configs()[name]
    assert sink_config(writer_options(config)) == config


def test_the_old_option_names_are_still_accepted_and_named_as_exposed() -> None:
    dsn = f"postgresql://app:{_url_pw()}@db/app"
    old = {"sink": "postgres", "dsn": dsn, "table": "t", "id_columns": "event_id"}
    new = {**old, "secret.dsn": old["dsn"]}
    del new["dsn"]
    assert sink_config({**old, "query_name": "q"}) == sink_config({**new, "query_name": "q"})
    assert exposed_options({**old, "query_name": "q"}) == ["dsn"]
    assert exposed_options({**new, "query_name": "q"}) == []
    no_password = {**old, "dsn": "postgresql://app@db/app", "query_name": "q"}
    assert exposed_options(no_password) == []


def test_a_setting_given_by_both_names_is_refused_without_its_value() -> None:
    dsn = f"postgresql://app:{_url_pw()}@db/app"
    options = {"sink": "postgres", "dsn": dsn, "secret.dsn": dsn, "table": "t"}
    with pytest.raises(ConfigError) as caught:
        sink_config({**options, "id_columns": "event_id", "query_name": "q"})
    assert caught.value.field == "secret.dsn" and "dsn" in caught.value.reason
    assert not _holds(str(caught.value), PW)


def test_a_secret_prefixed_option_naming_no_setting_is_refused() -> None:
    options = {"sink": "postgres", "dsn": "postgresql://db/app", "table": "t", "query_name": "q"}
    with pytest.raises(ConfigError) as caught:
        sink_config({**options, "id_columns": "event_id", "secret.nonsense": PW})
    assert caught.value.field == "secret.nonsense"
    assert not _holds(str(caught.value), PW)


def test_a_catalog_given_as_an_object_cannot_travel_as_options() -> None:
    from exactlyonce.dedup.catalog import DedupConfig

    model = registry.kind_named("postgres").config
    config = model(
        dsn="postgresql://db/app",
        table="t",
        id_columns=["event_id"],
        query_name="q",
        dedup=DedupConfig(redis_url=f"redis://:{_url_pw()}@catalog/0"),
    )
    with pytest.raises(ConfigError) as caught:
        writer_options(config)
    assert caught.value.field == "dedup" and not _holds(str(caught.value), PW)


def test_option_values_are_the_strings_spark_takes() -> None:
    options = writer_options(_configs()["postgres"])
    assert all(isinstance(value, str) for value in options.values())
    assert json.loads(options["dedup"]) == {"expected_ids": 1000}
    assert options["sink"] == "postgres" and options["id_columns"] == '["event_id"]'
    assert isinstance(_configs()["postgres"].dsn, SecretStr)  # type: ignore[attr-defined]


def test_the_warning_names_exposed_options_never_their_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dsn = f"postgresql://app:{_url_pw()}@db/app"
    options = {"sink": "postgres", "dsn": dsn, "table": "t", "id_columns": "e", "query_name": "q"}
    with caplog.at_level("WARNING", logger="exactlyonce"):
        warn_exposed(options)
        warn_exposed({**writer_options(sink_config(options))})
    assert len(caplog.records) == 1 and "secret.dsn" in caplog.text
    assert not _holds(caplog.text, PW)
