"""mode="upsert": the config refusals (both doors, each naming its field), the dedup default,
and the within-epoch rule's task half (OnePerKey), without services."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from exactlyonce.connectors import ElasticsearchSink, PostgresSink, RedisSink
from exactlyonce.connectors.base.upsert import OnePerKey
from exactlyonce.errors import ConfigError, TaskStateError
from exactlyonce.integration.config import load_config
from exactlyonce.testing import MemorySink, MemoryStore

PG = "postgresql://app@db.example/app"
REDIS = "redis://cache.example:6379/0"
ES = "http://es.example:9200"


def pg(**kw: Any) -> PostgresSink:
    return PostgresSink(PG, "t", ["k"], "q", check=False, **kw)


def redis(template: str = "r:{k}", **kw: Any) -> RedisSink:
    return RedisSink(REDIS, template, ["k"], "q", check=False, **kw)


def es(**kw: Any) -> ElasticsearchSink:
    return ElasticsearchSink(ES, "idx", ["k"], "q", check=False, **kw)


BUILDERS = {"postgres": pg, "redis": redis, "elasticsearch": es}


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_upsert_turns_dedup_off_and_refuses_it_when_asked_for(kind: str) -> None:
    sink = BUILDERS[kind](mode="upsert")
    assert sink.dedup_config is None and sink.config.dedup is False
    assert sink.upsert is not None and sink.upsert.tombstone_column is None
    assert BUILDERS[kind](mode="upsert", dedup=False).config == sink.config
    for dedup in (True, {"retention_epochs": 5}):
        with pytest.raises(ConfigError) as err:
            BUILDERS[kind](mode="upsert", dedup=dedup, redis_url=REDIS)
        assert err.value.field == "dedup" and "upsert" in err.value.reason


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_tombstone_column_needs_upsert_and_is_no_key_column(kind: str) -> None:
    with pytest.raises(ConfigError) as without:
        BUILDERS[kind](tombstone_column="gone", dedup=False)
    assert without.value.field == "tombstone_column" and "upsert" in without.value.reason
    with pytest.raises(ConfigError) as key:
        BUILDERS[kind](mode="upsert", tombstone_column="k")
    assert key.value.field == "tombstone_column" and "id column" in key.value.reason
    assert BUILDERS[kind](mode="upsert", tombstone_column="gone").upsert is not None


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_order_by_needs_upsert_and_is_no_key_column(kind: str) -> None:
    with pytest.raises(ConfigError) as without:
        BUILDERS[kind](order_by="ts", dedup=False)
    assert without.value.field == "order_by" and "upsert" in without.value.reason
    with pytest.raises(ConfigError) as key:
        BUILDERS[kind](mode="upsert", order_by=["ts", "k"])
    assert key.value.field == "order_by" and "id columns" in key.value.reason
    sink = BUILDERS[kind](mode="upsert", order_by="ts")
    assert sink.upsert is not None and sink.upsert.order_by == ("ts",)


@pytest.mark.parametrize("kind", ["postgres", "elasticsearch"])
def test_upsert_needs_a_key_not_content_ids(kind: str) -> None:
    build = PostgresSink if kind == "postgres" else ElasticsearchSink
    target = PG if kind == "postgres" else ES
    with pytest.raises(ConfigError) as err:
        build(target, "t", None, "q", id_from="content", mode="upsert", check=False)
    assert err.value.field == "id_from"


def test_other_modes_are_not_upserts() -> None:
    assert pg(redis_url=REDIS).upsert is None
    assert redis(redis_url=REDIS).upsert is None
    assert es(redis_url=REDIS).upsert is None


def test_each_sinks_own_refusals() -> None:
    with pytest.raises(ConfigError) as stream:
        redis("r:{k}", mode="upsert", write="stream")
    assert stream.value.field == "write"
    with pytest.raises(ConfigError) as template:
        redis("r:{k}:{n}", mode="upsert")
    assert template.value.field == "key_template" and "exactly the id_columns" in (
        template.value.reason
    )
    with pytest.raises(ConfigError) as op_type:
        es(mode="upsert", op_type="create")
    assert op_type.value.field == "op_type"
    with pytest.raises(ConfigError) as memory:
        MemorySink(MemoryStore(), "t", ["k"], "q", mode="upsert", dedup=False)
    assert memory.value.field == "mode"


PIPELINE = """\
query_name: q
checkpoint: .exactlyonce/x/checkpoint
source:
  type: files
  format: json
  path: in/
  schema: "k STRING, n BIGINT, gone BOOLEAN"
sink:
{sink}
"""


@pytest.mark.parametrize(
    ("sink", "field"),
    [
        ("  type: postgres\n  dsn: x\n  table: t\n  id_columns: [k]\n  mode: upsert\n"
         "  dedup: true", "sink.dedup"),
        ("  type: postgres\n  dsn: x\n  table: t\n  id_columns: [k]\n  tombstone_column: gone\n"
         "  dedup: false", "sink.tombstone_column"),
        ("  type: redis\n  url: redis://c\n  key_template: 'r:{k}'\n  id_columns: [k]\n"
         "  mode: upsert\n  write: stream", "sink.write"),
        ("  type: elasticsearch\n  hosts: http://e\n  index: i\n  id_columns: [k]\n"
         "  mode: upsert\n  op_type: index", "sink.op_type"),
    ],
)  # fmt: skip
def test_pipeline_files_name_the_same_fields(tmp_path: Path, sink: str, field: str) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(sink=sink))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.field == field


def test_a_pipeline_file_builds_the_constructors_config(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        PIPELINE.format(
            sink="  type: postgres\n  dsn: postgresql://app@db.example/app\n  table: t\n"
            "  id_columns: [k]\n  mode: upsert\n  tombstone_column: gone"
        )
    )
    built = load_config(path).build_sink(check=False)
    assert built.config == pg(mode="upsert", tombstone_column="gone").config


def batch(ids: list[str], values: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"rid": ids, "v": values})


def test_one_per_key_keeps_the_first_row_of_each_id_across_batches() -> None:
    keep = OnePerKey("rid")
    first, dropped = keep.keep(batch(["a", "a", "b", "c"], [1, 2, 3, 4]))
    assert first.column("v").to_pylist() == [1, 3, 4] and dropped == 1
    second, dropped = keep.keep(batch(["c", "c", "d"], [5, 6, 7]))  # c began in the last batch
    assert second.column("v").to_pylist() == [7] and dropped == 2
    empty, dropped = keep.keep(batch([], []))
    assert empty.num_rows == 0 and dropped == 0


def test_one_per_key_refuses_unsorted_input() -> None:
    with pytest.raises(TaskStateError):
        OnePerKey("rid").keep(batch(["b", "a"], [1, 2]))
    keep = OnePerKey("rid")
    keep.keep(batch(["c"], [1]))
    with pytest.raises(TaskStateError):
        keep.keep(batch(["b"], [2]))  # across batches too
