"""format("exactlyonce"): options through the sink's config model, and the task's columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from exactlyonce.connectors.base.columns import ERROR_COLUMN, PAYLOAD_COLUMN, SHARD_COLUMN
from exactlyonce.connectors.base.projection import json_like_spark
from exactlyonce.connectors.redis.projection import project_arrow
from exactlyonce.connectors.redis.task import VALUE_COLUMN
from exactlyonce.connectors.redis.template import KeyTemplate
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
        (
            {
                "sink": "kafka",
                "dsn": None,
                "table": None,
                "bootstrap_servers": "k:9092",
                "topic": "t",
                "dedup": "false",
            },
            "dedup",
        ),
        (
            {
                "sink": "kafka",
                "dsn": None,
                "table": None,
                "bootstrap_servers": "k:9092",
                "topic": "t",
                "value": "json-with-schema",
            },
            "value",
        ),
        (
            {
                "sink": "redis",
                "dsn": None,
                "table": None,
                "url": "redis://r",
                "key_template": "k:{event_id}",
                "write": "stream",
            },
            "write",
        ),
        (
            {
                "sink": "redis",
                "dsn": None,
                "table": None,
                "url": "redis://r",
                "key_template": "k:{event_id}",
                "mode": "upsert",
            },
            "mode",
        ),
        (
            {
                "sink": "elasticsearch",
                "dsn": None,
                "table": None,
                "hosts": "http://es:9200",
                "index": "i",
                "mode": "upsert",
            },
            "mode",
        ),
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


@pytest.mark.parametrize(
    "options",
    [
        {"sink": "elasticsearch", "hosts": "http://es:9200", "index": "i"},
        {"sink": "redis", "url": "redis://r", "key_template": "k:{event_id}"},
        {"sink": "redis", "url": "redis://r", "key_template": "k:{event_id}", "write": "string"},
    ],
)
def test_sinks_idempotent_by_key_are_served(options: dict[str, str]) -> None:
    check_supported(sink_config({**options, "id_columns": "event_id", "query_name": "q"}))


def test_json_like_spark_writes_what_spark_to_json_writes() -> None:
    """Spark 4.1's to_json (Jackson) writes "\\x1f" as '\\u001F': upper-case hex, unlike Python."""
    record = {"s": 'é "q" \\u001f \x01\x1f\n\t', "n": -5, "b": True, "z": None}
    assert json_like_spark(record) == (
        '{"s":"é \\"q\\" \\\\u001f \\u0001\\u001F\\n\\t","n":-5,"b":true,"z":null}'
    )


def test_redis_arrow_projection_text_and_bad_records() -> None:
    batch = pa.record_batch(
        {"event_id": ["a", "b", None], "n": [1, None, 3], "ok": [True, False, None]}
    )
    rows = ProtocolColumns(("event_id",), "record_id", "epoch", 4).add(batch, 2)
    template = KeyTemplate.parse("p:{event_id}:{n}")
    out = project_arrow(rows, ("event_id", "n", "ok"), template, "string", "record_id", "epoch")
    assert out.schema.names == [
        "event_id", "n", "record_id", "epoch", VALUE_COLUMN,
        ERROR_COLUMN, PAYLOAD_COLUMN, SHARD_COLUMN,
    ]  # fmt: skip
    assert out.column("n").to_pylist() == ["1", None, "3"]
    assert out.column(VALUE_COLUMN).to_pylist()[0] == '{"event_id":"a","n":1,"ok":true}'
    assert out.column(ERROR_COLUMN).to_pylist() == [
        None,
        "null key template column(s): n",
        "null key column(s): event_id",
    ]
    assert out.column(PAYLOAD_COLUMN).to_pylist()[1] == '{"event_id":"b","n":null,"ok":false}'
    hashed = project_arrow(rows, ("event_id", "n", "ok"), template, "hash", "record_id", "epoch")
    assert hashed.column("ok").to_pylist() == ["true", "false", None]


def test_a_known_sink_imports_no_other_sinks_package() -> None:
    """A data source call runs in a new Python process each time: building PostgreSQL's
    config and sink must not import the other sinks' packages and clients (a subprocess, so
    nothing this test session imported counts)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from exactlyonce.integration.datasource.options import sink_config\n"
        "from exactlyonce.integration.datasource.writer import build_sink\n"
        f"build_sink(sink_config({ {**BASE, 'redis_url': 'redis://127.0.0.1:9/0'}!r}))\n"
        "others = ('elasticsearch', 'opensearch', 'redis', 'kafka')\n"
        "loaded = [m for m in sys.modules if any(f'exactlyonce.connectors.{o}' in m "
        "for o in others) or m.split('.')[0] in ('elasticsearch', 'opensearchpy')]\n"
        "print(sorted(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({k: v for k, v in BASE.items() if k != "sink"}, "required: which sink to write"),
        ({**BASE, "sink": "mongo"}, "unknown sink 'mongo'; expected one of"),
    ],
)
def test_a_missing_or_unknown_sink_lists_the_known_ones(options: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        sink_config(options)
    assert caught.value.field == "sink"
    assert says in str(caught.value)
    for name in ("postgres", "kafka", "elasticsearch", "opensearch", "redis"):
        assert name in str(caught.value)
