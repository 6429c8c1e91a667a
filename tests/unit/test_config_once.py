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


# -- sinks read self.config ------------------------------------------------------------------


def _copies_in_configure(sink_class: type) -> list[str]:
    """``self.x = config.f`` statements in the sink's ``_configure`` where ``f`` is a field of
    its config model: a second home for a setting."""
    import ast
    import inspect
    import textwrap

    from exactlyonce.connectors import registry

    fields = set(registry.kind_of_class(sink_class).config.model_fields)
    tree = ast.parse(textwrap.dedent(inspect.getsource(sink_class._configure)))
    copies = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Attribute):
            value = node.value
            by_config = isinstance(value.value, ast.Name) and value.value.id == "config"
            if by_config and value.attr in fields:
                copies.append(f"{sink_class.__name__}._configure copies config.{value.attr}")
    return copies


def test_sinks_read_their_settings_from_self_config() -> None:
    from exactlyonce.connectors import registry

    copies = [c for kind in registry.kinds() for c in _copies_in_configure(kind.sink_class())]
    assert copies == [], "read it from self.config (connectors.base.config.Setting):\n" + "\n".join(
        copies
    )


def test_a_setting_is_the_configs_and_cannot_be_assigned() -> None:
    sink = PostgresSink(
        "postgresql://app:pw@db/app", "events", ["id"], "q", dedup=False, check=False
    )
    assert sink.mode == sink.config.mode == "insert"
    assert sink.query_name == "q" and sink.shards is None
    with pytest.raises(AttributeError, match="config"):
        sink.mode = "append"  # type: ignore[misc]
