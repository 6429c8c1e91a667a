"""The Kafka sink's native produce loop (:mod:`exactlyonce.connectors.kafka.arrowproduce`)
writes what the Python loop writes, byte for byte: value, key and the ``eo`` header, read back
with kafka-python (a client we did not write), on the genuine broker of ``make services``.

Both loops run the same :class:`KafkaShardTask` over the same hand-made Arrow batches: keys
(one null), a null value (a tombstone), a batch sliced at an offset, and large_binary /
large_string columns; one run also with a local queue of 50 messages, which the native loop
must wait out (librdkafka refuses a produce with QUEUE_FULL many times over).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from exactlyonce.connectors.base import ERROR_COLUMN, PAYLOAD_COLUMN, SHARD_COLUMN, TaskResult
from exactlyonce.connectors.kafka import ID_COLUMN, KEY_COLUMN, VALUE_COLUMN, KafkaSink
from exactlyonce.connectors.kafka import task as task_module
from exactlyonce.connectors.kafka.arrowproduce import QUEUE_FULL, native_loop
from exactlyonce.connectors.kafka.target import KafkaTarget
from exactlyonce.connectors.kafka.task import KafkaShardTask
from tests.support.events import BATCH_QUERY_ID, events
from tests.support.kafka_audit import named_headers, read_topic

pytestmark = pytest.mark.integration

ROWS = 3000


def _batch(start: int, end: int, large: bool = False) -> pa.RecordBatch:
    n = end - start
    values: list[bytes | None] = [
        f'{{"i":{i},"pad":"{"x" * (i % 50)}"}}'.encode() for i in range(start, end)
    ]
    keys: list[bytes | None] = [f"k{i}".encode() for i in range(start, end)]
    if start == 0:
        values[5] = None  # a tombstone
        keys[9] = None  # no key
    binary, string = (pa.large_binary(), pa.large_string()) if large else (pa.binary(), pa.string())
    return pa.RecordBatch.from_pydict(
        {
            ID_COLUMN: pa.array(
                [hashlib.md5(b"n%d" % i).hexdigest() for i in range(start, end)], string
            ),
            KEY_COLUMN: pa.array(keys, binary),
            VALUE_COLUMN: pa.array(values, binary),
            SHARD_COLUMN: pa.array([0] * n, pa.int32()),
            ERROR_COLUMN: pa.array([None] * n, pa.string()),
            PAYLOAD_COLUMN: pa.array([None] * n, pa.string()),
        }
    )


def _batches() -> Iterator[pa.RecordBatch]:
    yield _batch(0, 1000)
    yield _batch(990, 2010).slice(10)  # an offset into its buffers: rows 1000..2009
    yield _batch(2010, ROWS, large=True)


def _write(spark: SparkSession, sink: KafkaSink, config: dict[str, Any] | None = None) -> None:
    def write(epoch: int, shards: int) -> list[TaskResult]:
        writer = sink._task_writer(epoch, [ID_COLUMN, KEY_COLUMN, VALUE_COLUMN])
        target: KafkaTarget = writer.target  # type: ignore[attr-defined]
        task = KafkaShardTask(target, epoch)
        if config:
            base = task._producer_config
            task._producer_config = lambda: {**base(), **config}  # type: ignore[method-assign]
        return [task.run(_batches())]

    report = sink.run_epoch(1, BATCH_QUERY_ID, events(spark, 0, 1).schema, lambda: 1, write)
    assert report.written == ROWS


def _messages(bootstrap: str, topic: str) -> list[tuple[Any, ...]]:
    """Every record as (value, key, its ``eo`` header's fields but the attempt)."""
    out = []
    for r in read_topic(bootstrap, topic):
        headers = named_headers(r.headers)
        assert set(headers) == {"eo-query", "eo-epoch", "eo-shard", "eo-attempt", "eo-record-id"}
        headers.pop("eo-attempt")
        out.append((r.value, r.key, tuple(sorted(headers.items()))))
    return sorted(out, key=repr)


def _sink(bootstrap: str, name: str) -> KafkaSink:
    return KafkaSink(
        bootstrap,
        name,
        ["event_id"],
        query_name="q",
        key_column="event_id",
        create_topic=True,
        partitions=1,
        shards=1,
        dedup=False,
    )


def test_the_native_loop_writes_what_the_python_loop_writes(
    spark: SparkSession, bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert native_loop() is not None, "the native produce loop must be built and usable here"
    native, python = _sink(bootstrap, f"{unique_name}_n"), _sink(bootstrap, f"{unique_name}_p")
    _write(spark, native)
    with monkeypatch.context() as m:
        m.setattr(task_module, "native_loop", lambda: None)
        _write(spark, python)
    written = _messages(bootstrap, native.topic)
    assert len(written) == ROWS
    assert written == _messages(bootstrap, python.topic)
    assert sum(1 for value, _, _ in written if value is None) == 1
    assert sum(1 for _, key, _ in written if key is None) == 1
    ids = {dict(h)["eo-record-id"] for _, _, h in written}
    assert ids == {hashlib.md5(b"n%d" % i).hexdigest().encode() for i in range(ROWS)}


def test_the_native_loop_waits_out_a_full_local_queue(
    spark: SparkSession, bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert native_loop() is not None
    refusals: list[int] = []
    real = task_module.produce_columns

    def counting(module: Any, *args: Any) -> list[int]:
        class Counted:
            def produce(self, *produce_args: Any) -> tuple[int, int]:
                at, code = module.produce(*produce_args)
                refusals.append(code) if code else None
                return at, code

        return real(Counted(), *args)

    monkeypatch.setattr(task_module, "produce_columns", counting)
    sink = _sink(bootstrap, unique_name)
    _write(spark, sink, {"queue.buffering.max.messages": 50, "linger.ms": 0})
    assert refusals and set(refusals) == {QUEUE_FULL}, (
        f"the queue of 50 messages never filled ({refusals}): the test did not test the wait"
    )
    assert len(_messages(bootstrap, sink.topic)) == ROWS
