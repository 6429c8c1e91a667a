"""format("exactlyonce"): options through the sink's config model, and the task's columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from exactlyonce.connectors.base.columns import ERROR_COLUMN, SHARD_COLUMN
from exactlyonce.dedup.ids import record_id
from exactlyonce.dedup.murmur3 import spark_shard
from exactlyonce.errors import ConfigError
from exactlyonce.integration.datasource.options import sink_config
from exactlyonce.integration.datasource.records import ProtocolColumns
from exactlyonce.integration.datasource.support import check_supported

DSN = "postgresql://app:s3cret-pw@db/app"
BASE = {"sink": "postgres", "dsn": DSN, "table": "t", "id_columns": "event_id", "query_name": "q"}


def test_options_build_the_sinks_own_model() -> None:
    config = sink_config(
        {**BASE, "shards": "4", "dedup": '{"expected_ids": 10}', "checkpointlocation": "/x"}
    )
    assert config.shards == 4
    assert config.id_columns == ("event_id",)
    assert config.dedup.expected_ids == 10  # type: ignore[union-attr]
    assert sink_config({**BASE, "table": "123"}).table == "123"  # type: ignore[attr-defined]
    assert sink_config({**BASE, "id_columns": '["a", "b"]'}).id_columns == ("a", "b")


@pytest.mark.parametrize(
    ("option", "value"),
    [("shards", "x"), ("dedup", "{oops"), ("mode", "sideways"), ("nonsense", "1"), ("sink", "s3")],
)
def test_a_bad_option_is_named_and_no_secret_shown(option: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        sink_config({**BASE, option: value})
    assert caught.value.field.split(".")[0] == option
    assert "s3cret-pw" not in str(caught.value)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"mode": "append"}, "mode"),
        ({"mode": "upsert"}, "mode"),
        ({"id_columns": None, "id_from": "content"}, "id_from"),
    ],
)
def test_modes_this_path_cannot_serve_are_refused(options: dict[str, str], field: str) -> None:
    given = {k: v for k, v in {**BASE, **options}.items() if v is not None}
    with pytest.raises(ConfigError) as caught:
        check_supported(sink_config(given))
    assert caught.value.field == field


def test_task_columns_match_the_foreachbatch_ids_and_shards() -> None:
    batch = pa.record_batch({"event_id": ["a", None, "c"], "n": [1, 2, 3]})
    out = ProtocolColumns(("event_id",), "record_id", "epoch", 4).add(batch, 7)
    ids = out.column("record_id").to_pylist()
    assert ids == [record_id(["a"]), None, record_id(["c"])]
    assert out.column("epoch").to_pylist() == [7, 7, 7]
    expected = spark_shard([record_id(["a"]), record_id(["c"])], 4).tolist()
    shards = out.column(SHARD_COLUMN).to_pylist()
    assert [shards[0], shards[2]] == expected
    assert out.column(ERROR_COLUMN).to_pylist() == [None, "null key column(s): event_id", None]
