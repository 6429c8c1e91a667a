"""A Redis key template never reaches the sink's control keys (DESIGN invariant 14).

The sink's own keys live under ``<prefix>:`` (head, shard markers, staging, dead letters,
drain offsets, upsert companions) and every catalog's under ``eo:{``. A template whose
literal start puts EVERY key there is refused when the config is built, naming
``key_template``; a template that only MAY render there (its start is a prefix of a control
namespace) is guarded per record at write time (tests/integration/test_redis_sink.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exactlyonce.connectors import RedisSink
from exactlyonce.connectors.redis.config import RedisSinkConfig
from exactlyonce.dedup.keys import NAMESPACE_ROOT, namespace
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import load_config

URL = "redis://cache.example:6379/0"


def config(template: str, **kw: object) -> RedisSinkConfig:
    return RedisSinkConfig(url=URL, key_template=template, id_columns=["id"], query_name="q", **kw)


@pytest.mark.parametrize(
    ("template", "kw"),
    [
        ("eo:{{q}}:{id}", {}),  # every catalog's namespace
        ("eo:{{x:1}}:sink:head", {"write": "stream"}),  # one constant key in it
        ("app:{id}", {"prefix": "app"}),  # the sink's own namespace
        ("app:head", {"prefix": "app", "write": "stream"}),  # its very head
        ("app:done:{id}", {"prefix": "app"}),  # its shard markers
    ],
)
def test_a_template_whose_every_key_is_a_control_key_is_refused(
    template: str, kw: dict[str, object]
) -> None:
    with pytest.raises(ConfigError, match="control") as refused:
        config(template, **kw)
    assert refused.value.field == "key_template"
    with pytest.raises(ConfigError) as by_constructor:
        RedisSink(URL, template, ["id"], "q", dedup=False, check=False, **kw)  # type: ignore[arg-type]
    assert by_constructor.value.field == "key_template"


def test_the_default_prefix_is_refused_too() -> None:
    """The default prefix is ``namespace(query, sink) + ":sink"``: under ``eo:{`` as well."""
    prefix = f"{namespace('q', 'mine')}:sink"
    literal = prefix.replace("{", "{{").replace("}", "}}")
    with pytest.raises(ConfigError, match="control") as refused:
        config(f"{literal}:head:{{id}}", sink_name="mine")
    assert refused.value.field == "key_template"


@pytest.mark.parametrize(
    ("template", "kw", "guarded"),
    [
        ("user:{id}", {}, ()),  # cannot reach any control namespace: no per-record check
        ("user:{id}", {"prefix": "user"}, None),  # refused above: every key is in it
        ("{id}", {"prefix": "app"}, ("app:", NAMESPACE_ROOT)),  # any value may land there
        ("ap{id}", {"prefix": "app"}, ("app:",)),  # "ap" + "p:head" would
        ("e{id}", {"prefix": "app"}, (NAMESPACE_ROOT,)),  # "e" + "o:{..." would
        ("{id}:x", {"prefix": "app"}, ("app:", NAMESPACE_ROOT)),
    ],
)
def test_templates_that_may_reach_a_control_namespace_are_guarded_per_record(
    template: str, kw: dict[str, object], guarded: tuple[str, ...] | None
) -> None:
    if guarded is None:
        with pytest.raises(ConfigError):
            config(template, **kw)
        return
    assert config(template, **kw).guarded_namespaces == guarded


def test_the_sink_keeps_its_control_keys_under_the_config_prefix() -> None:
    sink = RedisSink(URL, "user:{id}", ["id"], "q", dedup=False, check=False)
    assert sink.prefix == sink.config.key_prefix
    assert sink.head_key.startswith(sink.config.key_prefix + ":")
    assert sink.config.control_namespaces == (sink.prefix + ":", NAMESPACE_ROOT)


def test_a_pipeline_file_names_the_field_by_its_path(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        "query_name: q\n"
        "checkpoint: .exactlyonce/x/checkpoint\n"
        "source:\n  type: rate\n"
        "sink:\n"
        "  type: redis\n"
        f"  url: {URL}\n"
        '  key_template: "app:{value}"\n'
        "  prefix: app\n"
        "  id_columns: [value]\n"
        "  dedup: false\n"
    )
    with pytest.raises(ConfigError, match="control") as refused:
        load_config(path)
    assert refused.value.field == "sink.key_template"
