"""format("exactlyonce") into Kafka: a real streaming query, Apache Kafka and the real catalog.

Kafka appends, so a second write of a record is a second record: plain read_committed
consumers (kafka-python and librdkafka, no recipe) count every record per ``eo-record-id``;
any record of the query without one, or of an unexpected ID, fails the test.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from exactlyonce.connectors.kafka import KafkaSink
from exactlyonce.connectors.kafka.reader import drain, exact_end_offsets, head_key, offset_of
from exactlyonce.dedup.ids import record_id
from tests.crash.harness import Input, make_input
from tests.support.datasource_streams import through_both_paths
from tests.support.kafka_audit import (
    assert_plain_exactly_once,
    audit,
    named_headers,
    plain_counts,
    read_topic,
)

pytestmark = pytest.mark.integration

SCHEMA = "event_id STRING, amount BIGINT, action STRING"


def kafka_options(bootstrap: str, name: str, **extra: str) -> dict[str, str]:
    return {
        "sink": "kafka",
        "bootstrap_servers": bootstrap,
        "topic": name,
        "id_columns": "event_id",
        "query_name": name,
        "shards": "3",
        "dedup": json.dumps({"expected_ids": 5000}),
        "redis_url": os.environ["EXACTLYONCE_REDIS_URL"],
        **extra,
    }


def start(spark: Any, source: Path, checkpoint: Path, files: int, **options: str) -> Any:
    """``files`` input files per epoch, each its own Spark partition (small files)."""
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", files).json(str(source))
    writer = df.writeStream.format("exactlyonce").option("checkpointLocation", str(checkpoint))
    for name, value in options.items():
        writer = writer.option(name, value)
    return writer.trigger(availableNow=True).start()


def shared_within_epochs(source: Path, files_per_epoch: int) -> int:
    """Record IDs that sit in two files (two Spark partitions) of one epoch."""
    names = sorted(source.glob("part-*.json"))
    shared = 0
    for at in range(0, len(names), files_per_epoch):
        counts: Counter[str] = Counter()
        for path in names[at : at + files_per_epoch]:
            lines = [json.loads(line) for line in path.read_text().splitlines()]
            counts.update({record_id([x["event_id"]]) for x in lines if x["event_id"]})
        shared += sum(1 for n in counts.values() if n > 1)
    return shared


def verify(bootstrap: str, name: str, data: Input) -> None:
    assert_plain_exactly_once(bootstrap, name, name, data.expected_ids)
    for client in ("kafka-python", "confluent-kafka"):
        letters = plain_counts(bootstrap, f"{name}.dead-letters", name, client)
        assert letters == Counter({"<none>": data.null_keys}), f"{client}: {letters}"
    result = audit(bootstrap, name, name, read_committed=True)
    result.assert_exactly_once(data.expected_ids)


def test_writes_every_record_once(
    spark: Any, tmp_path: Path, bootstrap: str, unique_name: str
) -> None:
    """Duplicates within a file, across the two files (partitions) of an epoch and across
    epochs; then Spark re-runs the last epoch (its commit log lost it): nothing new."""
    data = make_input(tmp_path / "in", files=6, rows=50, seed=11, dup_fraction=0.3)
    assert shared_within_epochs(tmp_path / "in", 2) > 10, "IDs in both partitions of an epoch"
    KafkaSink(bootstrap, unique_name, ["event_id"], unique_name, create_topic=True, partitions=3)
    options = kafka_options(bootstrap, unique_name)
    query = start(spark, tmp_path / "in", tmp_path / "ck", 2, **options)
    query.awaitTermination()
    result = audit(bootstrap, unique_name, unique_name, read_committed=True)
    assert result.head is not None and result.head["epoch"] == 2
    assert {shard for _, shard, _ in result.confirmed} == {0, 1}, "two partitions per epoch"
    verify(bootstrap, unique_name, data)
    for name in ("2", ".2.crc"):
        (tmp_path / "ck" / "commits" / name).unlink(missing_ok=True)
    start(spark, tmp_path / "in", tmp_path / "ck", 2, **options).awaitTermination()
    assert (tmp_path / "ck" / "commits" / "2").exists(), "Spark re-ran epoch 2"
    verify(bootstrap, unique_name, data)


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [("dedup", "false", "dedup"), ("value", "avro", "value")],
)
def test_refused_options_name_their_field(
    spark: Any,
    tmp_path: Path,
    bootstrap: str,
    unique_name: str,
    option: str,
    value: str,
    field: str,
) -> None:
    make_input(tmp_path / "in", files=1, rows=5, seed=6)
    options = kafka_options(bootstrap, unique_name, **{option: value})
    with pytest.raises(Exception, match=rf"ConfigError: {field}\b"):
        start(spark, tmp_path / "in", tmp_path / "ck", 1, **options).awaitTermination(60)


def head_records(sink: KafkaSink) -> list[tuple[int, bytes]]:
    """Every head record of the sink's query in its control partition: (offset, value)."""
    heads = sink._heads  # the sink's own control-topic reader, not a second implementation
    heads.find()
    key = head_key(sink.query_name, sink.sink_name).encode()
    client = heads.clients.reader()
    end = exact_end_offsets(client, heads.control_topic, [heads.partition], 30)[heads.partition]
    ranges = {(heads.control_topic, heads.partition): (0, end)}
    return [
        (offset_of(m), m.value() or b"")
        for m in drain(client, ranges, 60, "control")
        if m.key() == key
    ]


def back_to_first_head(sink: KafkaSink) -> None:
    """The state a kill at ``before_head`` of epoch 0 leaves: its tasks committed and
    confirmed, the head still the first one (epoch -1, tasks scanning from it)."""
    offset, value = head_records(sink)[0]
    first = json.loads(value)
    assert first["epoch"] == -1
    sink._heads._write({**first, "scan_from": offset})


def test_differently_split_rerun_is_refused(
    spark: Any, tmp_path: Path, bootstrap: str, unique_name: str
) -> None:
    """Epoch 0 committed in two partitions (its two files), the head not moved; the re-run
    round-robins it into three: refused (EpochSplitError), nothing appended. A restart that
    splits it as before continues, exactly once."""
    data = make_input(tmp_path / "in", files=2, rows=40, seed=12)
    sink = KafkaSink(bootstrap, unique_name, ["event_id"], unique_name, create_topic=True)
    options = kafka_options(bootstrap, unique_name)
    start(spark, tmp_path / "in", tmp_path / "ck", 2, **options).awaitTermination()
    back_to_first_head(sink)
    for name in ("0", ".0.crc"):
        (tmp_path / "ck" / "commits" / name).unlink()
    written = plain_counts(bootstrap, unique_name, unique_name, "confluent-kafka")
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 2).json(str(tmp_path / "in"))
    writer = df.repartition(3).writeStream.format("exactlyonce")
    for name, value in options.items():
        writer = writer.option(name, value)
    split = writer.option("checkpointLocation", str(tmp_path / "ck"))
    with pytest.raises(Exception, match="EpochSplitError"):
        split.trigger(availableNow=True).start().awaitTermination(120)
    assert plain_counts(bootstrap, unique_name, unique_name, "confluent-kafka") == written
    start(spark, tmp_path / "in", tmp_path / "ck", 2, **options).awaitTermination()
    assert (tmp_path / "ck" / "commits" / "0").exists(), "Spark re-ran epoch 0"
    verify(bootstrap, unique_name, data)


def test_a_broker_that_shows_aborted_records_is_refused(
    spark: Any, tmp_path: Path, tansu_bootstrap: str, unique_name: str
) -> None:
    """Tansu delivers aborted records to read_committed consumers (the sink's preflight
    measures it): a plain consumer could not read this path's topic exactly once there."""
    make_input(tmp_path / "in", files=1, rows=5, seed=7)
    options = kafka_options(tansu_bootstrap, unique_name, create_topic="true")
    with pytest.raises(Exception, match=r"ConfigError: bootstrap_servers\b.*aborted"):
        start(spark, tmp_path / "in", tmp_path / "ck", 1, **options).awaitTermination(120)


def records_by_id(bootstrap: str, topic: str, query: str) -> dict[str, tuple[Any, Any]]:
    """(key, value) per record ID, as a plain read_committed consumer reads them."""
    out: dict[str, tuple[Any, Any]] = {}
    for record in read_topic(bootstrap, topic):
        headers = named_headers(record.headers)
        if headers.get("eo-query", b"").decode() == query:
            out[headers["eo-record-id"].decode()] = (record.key, record.value)
    return out


def test_records_are_those_foreach_batch_writes(
    spark: Any, tmp_path: Path, bootstrap: str, unique_name: str
) -> None:
    """The same rows (awkward text, nulls, booleans, null keys) through foreachBatch(sink)
    and through format("exactlyonce"): the same IDs, keys and values, byte for byte, and
    the same dead letters."""
    fb = f"{unique_name}fb"
    sink = KafkaSink(bootstrap, fb, ["event_id"], fb, key_column="event_id", create_topic=True)
    KafkaSink(bootstrap, unique_name, ["event_id"], unique_name, create_topic=True)
    options = kafka_options(bootstrap, unique_name, key_column="event_id")
    through_both_paths(spark, tmp_path, sink, options, 23)
    expected = records_by_id(bootstrap, fb, fb)
    assert len(expected) > 40
    assert records_by_id(bootstrap, unique_name, unique_name) == expected
    letters = [
        sorted(r.value for r in read_topic(bootstrap, f"{topic}.dead-letters"))
        for topic in (fb, unique_name)
    ]
    assert letters[0] == letters[1] and len(letters[0]) == 2
