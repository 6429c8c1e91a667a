"""Config written once: the catalog's sizing is checked by the catalog's own rules whichever
door it comes through, and a setting has one name across sinks."""

from __future__ import annotations

import pytest

from exactlyonce.connectors.elasticsearch.config import ElasticsearchSinkConfig
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.connectors.redis.config import RedisSinkConfig
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import parse_config

PIPELINE = {
    "query_name": "q",
    "checkpoint": "ckpt",
    "source": {"type": "rate"},
    "sink": {
        "type": "postgres",
        "dsn": "postgresql://app:pw@db/app",
        "table": "events",
        "id_columns": ["value"],
        "redis_url": "redis://catalog:6379/0",
    },
}


@pytest.mark.parametrize(
    ("sizing", "field"),
    [
        ({"fp_rate": 0.7}, "fp_rate"),  # the Bloom filter's rule (was accepted up to 1)
        ({"expected_ids": 0}, "expected_ids"),
        ({"retention_epochs": 0}, "retention_epochs"),
        ({"on_catalog_loss": "ignore"}, "on_catalog_loss"),
    ],
)
def test_the_catalogs_rules_refuse_a_sizing_at_every_door(sizing: dict, field: str) -> None:
    with pytest.raises(ConfigError) as python_door:
        DedupConfig(redis_url="redis://catalog", **sizing)
    with pytest.raises(ConfigError) as constructor:
        PostgresSink(
            "postgresql://app:pw@db/app",
            "events",
            ["value"],
            "q",
            dedup=sizing,
            redis_url="redis://catalog",
            check=False,
        )
    with pytest.raises(ConfigError) as file_door:
        parse_config({**PIPELINE, "sink": {**PIPELINE["sink"], "dedup": sizing}})
    assert python_door.value.field == field
    assert constructor.value.field == f"dedup.{field}"
    assert file_door.value.field == f"sink.dedup.{field}"


def test_a_dedup_switch_that_is_not_one_says_so() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({**PIPELINE, "sink": {**PIPELINE["sink"], "dedup": "maybe"}})
    assert refused.value.field == "sink.dedup"
    assert "boolean" in refused.value.reason


def test_request_retries_have_one_name_across_sinks() -> None:
    common = {"query_name": "q", "id_columns": ["a"], "dedup": False}
    es = ElasticsearchSinkConfig(hosts=["http://es:9200"], index="i", retries=2, **common)
    redis = RedisSinkConfig(url="redis://r", key_template="k:{a}", retries=2, **common)
    assert es.retries == redis.retries == 2
    former = ElasticsearchSinkConfig(hosts=["http://es:9200"], index="i", max_retries=7, **common)
    assert former.retries == 7, "the former name is still read"
