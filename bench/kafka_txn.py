"""How soon a Kafka write becomes visible to a ``read_committed`` reader: a transaction against
a plain produce, on the same broker, in one run.

``python -m bench kafka_txn --writes 300 --every 0.05`` writes one small record every
``--every`` seconds two ways, ``--writes`` times each, into fresh topics, and a confluent-kafka
``read_committed`` consumer (``fetch.wait.max.ms`` 5, as ``bench realtime``'s reader) notes
when each one arrives:

``plain``        ``produce`` then ``flush`` from an idempotent producer (``acks=all``): what
                 Spark's own (at-least-once) Kafka sink pays per record;
``transaction``  ``begin_transaction``, ``produce``, ``commit_transaction``: what each chunk
                 of our Real-time Mode Kafka writer pays on top of its commit interval (its
                 chunks also carry a frontier record to the control topic).

Per way: ``p50_s``/``p99_s`` of visible minus the write's start and, for the transaction, of
``commit_transaction`` alone. No Spark: this is the floor of a transactional Kafka sink's
latency on this broker (issue 33: why the Kafka writer's p99 stays above PostgreSQL's).
Results: ``bench/results/kafka_txn.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from bench.common import (
    add_results_arguments,
    machine_with_load,
    now_utc,
    progress,
    ratio,
    save_results,
    service,
    versions,
)
from bench.realtime import make_topic, percentile

NAME = "kafka_txn"


class Arrivals:
    """A ``read_committed`` consumer of ``topic`` noting when each key first arrives."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.seen: dict[bytes, float] = {}
        self.stop = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 5,
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for msg in self.consumer.consume(num_messages=1000, timeout=0.01):
                key = msg.key() if msg.error() is None else None
                if isinstance(key, bytes):
                    self.seen.setdefault(key, time.monotonic())

    def wait_for(self, keys: Sequence[bytes], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(k in self.seen for k in keys):
            time.sleep(0.05)
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()


def latencies(started: dict[bytes, float], seen: dict[bytes, float]) -> dict[str, Any]:
    """p50/p99/max of visible minus started, and how many never arrived."""
    values = [seen[k] - t for k, t in started.items() if k in seen]
    if not values:
        return {"writes": len(started), "missing": len(started)}
    return {
        "writes": len(started),
        "missing": len(started) - len(values),
        "p50_s": round(percentile(values, 0.5), 4),
        "p99_s": round(percentile(values, 0.99), 4),
        "max_s": round(max(values), 4),
    }


def write_way(bootstrap: str, writes: int, every: float, txn: bool) -> dict[str, Any]:
    from confluent_kafka import Producer

    topic = f"bench-txn-{'txn' if txn else 'plain'}-{uuid.uuid4().hex[:8]}"
    make_topic(bootstrap, topic, partitions=1)
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": True,
                              "acks": "all", "linger.ms": 5}  # fmt: skip
    if txn:
        config["transactional.id"] = topic
    producer = Producer(config)
    if txn:
        producer.init_transactions(30)
    reader = Arrivals(bootstrap, topic)
    time.sleep(1.0)  # the reader is assigned and fetching
    started: dict[bytes, float] = {}
    commits: list[float] = []
    begin = time.monotonic()
    for i in range(writes):
        delay = begin + i * every - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        key = b"%d" % i
        started[key] = time.monotonic()
        if txn:
            producer.begin_transaction()
        producer.produce(topic, b'{"e": %d}' % i, key)
        if txn:
            at = time.monotonic()
            producer.commit_transaction(30)
            commits.append(time.monotonic() - at)
        else:
            producer.flush(30)
    reader.wait_for(list(started))
    out = latencies(started, reader.seen)
    if commits:
        out["commit_p50_s"] = round(percentile(commits, 0.5), 4)
        out["commit_p99_s"] = round(percentile(commits, 0.99), 4)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench kafka_txn", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--writes", type=int, default=300, help="writes per way")
    p.add_argument("--every", type=float, default=0.05, help="seconds between writes")
    add_results_arguments(p, NAME)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bootstrap = service("KAFKA_BOOTSTRAP_SERVERS")
    load_start = os.getloadavg()[0]
    ways: dict[str, dict[str, Any]] = {}
    for way, txn in (("plain", False), ("transaction", True)):
        progress(f"{way}: {args.writes} writes, one every {args.every:g} s")
        ways[way] = write_way(bootstrap, args.writes, args.every, txn)
        progress(f"{way}: {ways[way]}")
    result = {
        "benchmark": NAME,
        "date": now_utc(),
        "parameters": {"writes": args.writes, "every_s": args.every},
        "measure": "visible to a read_committed consumer minus the write's start, per write; "
        "commit_*: commit_transaction alone",
        "ways": ways,
        **{
            f"transaction_vs_plain_{q}": ratio(
                ways["transaction"][f"{q}_s"], ways["plain"][f"{q}_s"]
            )
            for q in ("p50", "p99")
            if f"{q}_s" in ways["transaction"] and f"{q}_s" in ways["plain"]
        },
        "machine": machine_with_load(load_start),
        "versions": versions("confluent_kafka"),
    }
    save_results(args, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
