"""What a record header costs a Python producer: the Kafka sink's wire format against plain.

``python -m bench kafka_headers --messages 300000`` produces the same JSON values (the shape
:mod:`bench.kafka` writes) from one confluent-kafka producer (the sink's batching settings,
idempotent, ``acks=all``) into a fresh topic, four ways, ``--repeat`` times each:

``plain``            ``produce(topic, value)``: Spark's and the plain producer's wire format;
``header``           plus the sink's one ``eo`` header (wire format 1: attempt prefix + ID);
``plain_txn``        ``plain`` inside one transaction;
``header_txn``       ``header`` inside one transaction: what a shard task does per record;
``header_dict_txn``  the same header passed as a dict, not a list of pairs;
``header_raw_id_txn`` a header of the raw 16-byte ID only (the shortest a record ID can be);
``key_id_txn``       the prefix and ID as the message key instead of a header (no user key);
``header_from_arrow_txn`` ``header_txn`` from Arrow columns (made lists first, timed): the
                     sink's Python loop;
``native_txn``       the same messages from the same Arrow columns, the loop in C
                     (:mod:`exactlyonce.connectors.kafka.arrowproduce`): the sink's native loop.

``header_dict_txn``, ``header_raw_id_txn`` and ``key_id_txn`` are the levers a Python
producer has within confluent-kafka: whether the header's container, its length, or its
being a header is the cost; ``native_txn`` is the lever outside it.

Per way: the produce loop's CPU and the process's total CPU (librdkafka's threads included)
in microseconds per message, median run, and the best rate. No Spark: this isolates the one
per-record cost the sink's format adds (issue 34: the header is per record, so no batching
setting removes it). Results: ``bench/results/kafka_headers.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from bench.common import add_results_dir_argument, progress, read_results, service, write_figures
from bench.kafka import PRODUCER_TUNING, create_topic

NAME = "kafka_headers"
PREFIX = b"1|0|0|abcdef0123456789|"  # the shape of a shard task's compact prefix


def produce_all(values: list[bytes], ids: list[bytes] | None) -> Callable[[Any, str], None]:
    def body(producer: Any, topic: str) -> None:
        produce = producer.produce
        if ids is None:
            for value in values:
                produce(topic, value)
        else:
            for value, rid in zip(values, ids, strict=True):
                produce(topic, value, None, headers=[("eo", PREFIX + rid)])

    return body


def produce_dict_headers(values: list[bytes], ids: list[bytes]) -> Callable[[Any, str], None]:
    def body(producer: Any, topic: str) -> None:
        produce = producer.produce
        for value, rid in zip(values, ids, strict=True):
            produce(topic, value, None, headers={"eo": PREFIX + rid})

    return body


def produce_raw_id_header(values: list[bytes], ids: list[bytes]) -> Callable[[Any, str], None]:
    raw = [bytes.fromhex(rid.decode()) for rid in ids]

    def body(producer: Any, topic: str) -> None:
        produce = producer.produce
        for value, rid in zip(values, raw, strict=True):
            produce(topic, value, None, headers=[("eo", rid)])

    return body


def produce_id_as_key(values: list[bytes], ids: list[bytes]) -> Callable[[Any, str], None]:
    def body(producer: Any, topic: str) -> None:
        produce = producer.produce
        for value, rid in zip(values, ids, strict=True):
            produce(topic, value, PREFIX + rid)

    return body


def produce_from_arrow(values: list[bytes], ids: list[bytes]) -> Callable[[Any, str], None]:
    """The sink's Python path: the Arrow columns made lists, then the per-record loop."""
    import pyarrow as pa

    value_column, id_column = pa.array(values, pa.binary()), pa.array(ids, pa.binary())

    def body(producer: Any, topic: str) -> None:
        produce_all(value_column.to_pylist(), id_column.to_pylist())(producer, topic)

    return body


def produce_native(values: list[bytes], ids: list[bytes]) -> Callable[[Any, str], None]:
    """The sink's native path (:mod:`exactlyonce.connectors.kafka.arrowproduce`): the same
    messages and header from the Arrow columns, the loop in C."""
    import pyarrow as pa

    from exactlyonce.connectors.kafka.arrowproduce import native_loop, produce_columns

    module = native_loop()
    if module is None:
        raise RuntimeError("the native produce loop is not built here (pip install -e .)")
    value_column, id_column = pa.array(values, pa.binary()), pa.array(ids, pa.string())

    def refused(i: int) -> bool:
        raise RuntimeError(f"row {i} refused")

    def body(producer: Any, topic: str) -> None:
        produce_columns(
            module, producer, topic, value_column, None, ("eo", PREFIX), id_column, refused
        )

    return body


def timed_way(bootstrap: str, topic: str, body: Callable[[Any, str], None], n: int,
              txn: bool) -> dict[str, float]:  # fmt: skip
    from confluent_kafka import Producer

    config = {**PRODUCER_TUNING, "bootstrap.servers": bootstrap, "enable.idempotence": True,
              "acks": "all"}  # fmt: skip
    if txn:
        config["transactional.id"] = f"{topic}-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    if txn:
        producer.init_transactions(30)
        producer.begin_transaction()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    body(producer, topic)
    cpu_loop = time.process_time() - cpu0
    if txn:
        producer.commit_transaction(120)
    elif producer.flush(120):
        raise RuntimeError("messages left undelivered")
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {"loop_us": 1e6 * cpu_loop / n, "total_us": 1e6 * cpu / n, "msgs_per_s": n / wall}


def run(messages: int, repeat: int) -> dict[str, Any]:
    bootstrap = service("KAFKA_BOOTSTRAP_SERVERS")
    topic = f"bench-headers-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    values = [
        b'{"id":"%032x","value":%d,"note":"abcdefghijklmno"}' % (i, i) for i in range(messages)
    ]
    ids = [b"%032x" % i for i in range(messages)]
    ways = {
        "plain": (produce_all(values, None), False),
        "header": (produce_all(values, ids), False),
        "plain_txn": (produce_all(values, None), True),
        "header_txn": (produce_all(values, ids), True),
        "header_dict_txn": (produce_dict_headers(values, ids), True),
        "header_raw_id_txn": (produce_raw_id_header(values, ids), True),
        "key_id_txn": (produce_id_as_key(values, ids), True),
        "header_from_arrow_txn": (produce_from_arrow(values, ids), True),
        "native_txn": (produce_native(values, ids), True),
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
    for i in range(repeat):  # interleaved: every way sees the same load
        for name, (body, txn) in ways.items():
            progress(f"run {i + 1}/{repeat}: {name}")
            runs[name].append(timed_way(bootstrap, topic, body, messages, txn))
    paths = {
        name: {
            "loop_cpu_us_per_msg": round(statistics.median(r["loop_us"] for r in rs), 2),
            "total_cpu_us_per_msg": round(statistics.median(r["total_us"] for r in rs), 2),
            "best_msgs_per_s": round(max(r["msgs_per_s"] for r in rs)),
        }
        for name, rs in runs.items()
    }
    header, plain = paths["header_txn"], paths["plain_txn"]
    return {
        "messages": messages,
        "repeat": repeat,
        "paths": paths,
        "header_cpu_us_per_msg": round(
            header["total_cpu_us_per_msg"] - plain["total_cpu_us_per_msg"], 2
        ),
        "header_cpu_ratio": round(
            header["total_cpu_us_per_msg"] / plain["total_cpu_us_per_msg"], 2
        ),
        "levers_cpu_us_per_msg_vs_header_txn": {
            name: round(paths[name]["total_cpu_us_per_msg"] - header["total_cpu_us_per_msg"], 2)
            for name in ("header_dict_txn", "header_raw_id_txn", "key_id_txn", "plain_txn")
        },
        "native_vs_python_from_arrow": round(
            paths["header_from_arrow_txn"]["total_cpu_us_per_msg"]
            / paths["native_txn"]["total_cpu_us_per_msg"],
            2,
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_headers", description=__doc__)
    parser.add_argument("--messages", type=int, default=300_000, dest="rows")
    parser.add_argument("--repeat", type=int, default=3)
    add_results_dir_argument(parser)
    args = parser.parse_args(argv)
    path = write_figures(NAME, run, args, "confluent_kafka")
    figures = read_results(NAME, args.results_dir)
    for name, p in figures["paths"].items():
        print(
            f"{name:<12} {p['total_cpu_us_per_msg']:>6} us/msg CPU {p['best_msgs_per_s']:>9,} msg/s"
        )
    print(
        f"the header: +{figures['header_cpu_us_per_msg']} us/msg ({figures['header_cpu_ratio']}x)"
    )
    print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
