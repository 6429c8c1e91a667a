"""Sink URLs (``exactlyonce heads postgresql://...``): each scheme builds the sink's own config
model, errors name the field, and no password is ever shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from exactlyonce.connectors.elasticsearch.config import ElasticsearchSinkConfig
from exactlyonce.connectors.kafka.config import KafkaSinkConfig
from exactlyonce.connectors.postgres.config import PostgresSinkConfig
from exactlyonce.connectors.redis.config import RedisSinkConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration import cli
from exactlyonce.integration.config.urls import is_sink_url, sink_config_from_url
from exactlyonce.secrets import redact_dsn

PW = "s3cr3t-pw"


def test_postgres_url_keeps_the_clients_options_in_the_dsn_and_takes_the_models() -> None:
    config = sink_config_from_url(
        f"postgresql://u:{PW}@db.example:5433/app?sslmode=require&table=s.events"
        "&shards=4&dedup=false&id_columns=a,b",
        query_name="q",
    )
    assert isinstance(config, PostgresSinkConfig)
    assert (
        config.dsn.get_secret_value() == f"postgresql://u:{PW}@db.example:5433/app?sslmode=require"
    )
    assert (config.table, config.shards, config.dedup) == ("s.events", 4, False)
    assert config.id_columns == ("a", "b") and config.query_name == "q"
    assert PW not in repr(config)


def test_record_identity_may_be_left_out() -> None:
    config = sink_config_from_url("postgres://h/db?table=t&query_name=q&dedup=false")
    assert config.id_from == "content" and config.query_name == "q"


def test_redis_kafka_and_elasticsearch_urls() -> None:
    catalog = "redis://cat:6379/1"
    redis = sink_config_from_url(
        "redis://:pw@h:6379/2?key_template=ev:%7Bid%7D&write=stream&prefix=p",
        query_name="q",
        catalog=catalog,
    )
    assert isinstance(redis, RedisSinkConfig)
    assert redis.url.get_secret_value() == "redis://:pw@h:6379/2"
    assert (redis.key_template, redis.write, redis.prefix) == ("ev:{id}", "stream", "p")
    assert redis.redis_url is not None and redis.redis_url.get_secret_value() == catalog

    kafka = sink_config_from_url(
        "kafka://k1:9092,k2:9092?topic=ev&control_topic=ev-ctl&dedup=false", query_name="q"
    )
    assert isinstance(kafka, KafkaSinkConfig)
    assert (kafka.bootstrap_servers, kafka.topic, kafka.control_topic) == (
        "k1:9092,k2:9092",
        "ev",
        "ev-ctl",
    )

    es = sink_config_from_url(
        f"elasticsearch+https://elastic:{PW}@es:9200?index=ev&dedup=false", query_name="q"
    )
    assert isinstance(es, ElasticsearchSinkConfig)
    assert es.hosts == ("https://es:9200",) and es.username == "elastic"
    assert es.password is not None and es.password.get_secret_value() == PW
    plain = sink_config_from_url("elasticsearch://es:9200/?index=ev&dedup=false&query_name=q")
    assert isinstance(plain, ElasticsearchSinkConfig) and plain.hosts == ("http://es:9200",)


@pytest.mark.parametrize(
    ("url", "query_name", "field", "words"),
    [
        ("mysql://h/db?table=t", "q", "sink URL", "unknown scheme 'mysql'"),
        ("postgresql://h/db?dedup=false", "q", "?table", "required"),
        ("postgresql://h/db?table=t&table=u&dedup=false", "q", "?table", "given twice"),
        ("postgresql://h/db?table=t&dsn=x", "q", "?dsn", "the URL itself gives it"),
        ("postgresql://h/db?table=t&shards=0&dedup=false", "q", "?shards", "greater than"),
        ("postgresql://h/db?table=t&dedup=false", None, "--query-name", "required"),
        ("postgresql://h/db?table=t&query_name=a", "b", "--query-name", "differs"),
        ("postgresql://h/db?table=t&redis_url=redis://x", "q", "?redis_url", "--catalog"),
        ("kafka://u:p@k:9092?topic=t&dedup=false", "q", "sink URL", "no user or password"),
        ("kafka://k:9092?topic=t&bogus=1", "q", "?bogus", "unknown setting"),
        ("kafka://k:9092?topic=t&producer_config=x", "q", "?producer_config", "nested"),
        ("elasticsearch://es?index=ev&api_key=k", "q", "?api_key", "would be echoed"),
        ("redis://h/0?key_template=k&write=stream&dedup=false", "q", "?dedup", "catalog"),
    ],
)
def test_a_bad_url_is_a_config_error_naming_the_field(
    url: str, query_name: str | None, field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        sink_config_from_url(url, query_name=query_name)
    assert raised.value.field == field, raised.value
    assert words in raised.value.reason


def test_a_missing_catalog_names_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXACTLYONCE_REDIS_URL", raising=False)
    from exactlyonce.integration.config.urls import sink_from_url

    with pytest.raises(ConfigError) as raised:
        sink_from_url(f"postgresql://u:{PW}@h/db?table=t", query_name="q")
    assert raised.value.field == "--catalog" and PW not in str(raised.value)


def test_cli_exits_2_on_a_bad_url_and_never_prints_the_password(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"postgresql://u:{PW}@h/db?table=t&shards=zero&dedup=false"
    assert cli.main(["heads", url, "--query-name", "q"]) == 2
    out = capsys.readouterr()
    assert "?shards" in out.err and PW not in out.err + out.out
    config = tmp_path / "p.yaml"
    config.write_text("query_name: q\n")
    assert cli.main(["heads", str(config), "--catalog", "redis://h"]) == 2
    assert "--catalog: only with a sink URL" in capsys.readouterr().err


def test_targets_and_redaction() -> None:
    assert is_sink_url("postgresql://h/db") and is_sink_url("kafka://k:9092?topic=t")
    assert not is_sink_url("examples/pipeline.yaml") and not is_sink_url("C:/p.yaml")
    shown = redact_dsn(f"postgresql://u:{PW}@h/db?sslpassword={PW}&table=t")
    assert PW not in shown and "table=t" in shown and "u:***@h" in shown
