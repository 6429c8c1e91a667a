"""What the Real-time Mode tests share: a 2-partition topic, a producer that stamps each
event, the job (tests/crash/realtime_job.py) run by the crash harness, and the audit, read
with psycopg and confluent-kafka (clients we did not write)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from psycopg import sql

from tests.crash.harness import Job, wait_until

REALTIME_JOB = Path(__file__).resolve().parents[1] / "crash" / "realtime_job.py"
PARTITIONS = 2


def source_schema() -> Any:
    """The schema of :func:`rows`: the Kafka source's coordinates and ``event_id``."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("event_id", StringType()),
        ]
    )


def rows(offsets: range, partition: int = 0, topic: str = "t") -> list[Any]:
    """Rows as a Kafka source hands them on: coordinates and ``event_id`` ``e<offset>``."""
    from pyspark.sql import Row

    return [Row(topic=topic, partition=partition, offset=o, event_id=f"e{o}") for o in offsets]


def run_epoch(writer: Any, epoch: int, rows: list[Any], partition_id: int = 0) -> None:
    """Drive a Real-time Mode writer through one epoch as Spark's task does: ``open``,
    ``process`` each row, ``close`` (with the error, when one was raised)."""
    writer.open(partition_id, epoch)
    error: BaseException | None = None
    try:
        for row in rows:
            writer.process(row)
    except BaseException as exc:
        error = exc
        raise
    finally:
        writer.close(error)


def event_stream(spark: Any, bootstrap: str, topic: str, starting_offsets: str = "earliest") -> Any:
    """The Real-time Mode jobs' stream: Spark's Kafka source, each row's coordinates and
    ``event_id``."""
    from pyspark.sql import functions as F

    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .load()
    )
    event_id = F.get_json_object(F.col("value").cast("string"), "$.event_id")
    return source.select("topic", "partition", "offset", event_id.alias("event_id"))


def make_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def end_offsets(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"audit-{topic}"})
    try:
        return {p: high_watermark(consumer, TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        consumer.close()


# A new topic's partitions answer these until their leader is known to the client: transient.
NO_LEADER_YET = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)


def high_watermark(
    consumer: Consumer, tp: TopicPartition, wait_s: float = 0.2, deadline_s: float = 30.0
) -> int:
    """The partition's high watermark, read again while it has no leader yet (a topic just
    created); any other error, or no leader after ``deadline_s``, is raised."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return int(consumer.get_watermark_offsets(tp, timeout=10)[1])
        except KafkaException as exc:
            if exc.args[0].code() not in NO_LEADER_YET or time.monotonic() > deadline:
                raise
        time.sleep(wait_s)


@dataclass
class EventProducer:
    """Produces ``events`` events (``e0``, ``e1``, ...; another ``prefix`` for another set)
    at ``rate`` per second, partition ``i % 2``, in a thread; ``sent[i]`` is when event i was
    acknowledged. :meth:`finish` ends it early (a stream that must outlive a kill schedule of
    unknown length)."""

    bootstrap: str
    topic: str
    events: int
    rate: float
    prefix: str = "e"
    sent: dict[str, float] = field(default_factory=dict)
    thread: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> EventProducer:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        start = time.monotonic()
        for i in range(self.events):
            if self.done.is_set():
                break
            delay = start + i / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            event_id = f"{self.prefix}{i}"
            producer.produce(
                self.topic, json.dumps({"event_id": event_id}).encode(), partition=i % PARTITIONS
            )
            producer.poll(0)
            self.sent[event_id] = time.time()
        producer.flush(30)

    def join(self, timeout: float = 120) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the producer did not finish"

    def finish(self) -> None:
        """Stop producing; :attr:`expected` is then what was sent."""
        self.done.set()
        self.join()
        self.events = len(self.sent)

    @property
    def expected(self) -> set[str]:
        return {f"{self.prefix}{i}" for i in range(self.events)}


def event_counts(conn: psycopg.Connection[Any], table: str) -> Counter[str]:
    rows = conn.execute(
        sql.SQL("SELECT event_id, count(*) FROM {} GROUP BY event_id").format(sql.Identifier(table))
    ).fetchall()
    return Counter({str(e): int(n) for e, n in rows})


def distinct_events(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(DISTINCT event_id) FROM {}").format(sql.Identifier(table))
    ).fetchone()
    return int(row[0]) if row else 0


def frontiers(conn: psycopg.Connection[Any], query_name: str) -> dict[int, int]:
    rows = conn.execute(
        "SELECT partition, next_offset FROM exactlyonce_frontiers WHERE query_name = %s",
        [query_name],
    ).fetchall()
    return {int(p): int(n) for p, n in rows}


def create_plain_table(conn: psycopg.Connection[Any], table: str) -> None:
    """The negative control's table: the same columns, no unique index, no frontier."""
    conn.execute(
        sql.SQL(
            'CREATE TABLE {} (topic text, partition integer, "offset" bigint, event_id text, '
            "record_id uuid NOT NULL, epoch bigint NOT NULL)"
        ).format(sql.Identifier(table))
    )


@dataclass
class RealtimeJob(Job):
    """tests/crash/realtime_job.py under the crash harness (SIGKILL of its session,
    restarts from its checkpoint)."""

    topic: str = ""
    writer: str = "frontier"
    sink: str = "postgres"  # "kafka": ``table`` names the output topic; "redis": its stream
    transport: str = "foreach"  # or "arrow" (exactlyonce.integration.spark.start_realtime)
    master: str = "local[4]"
    spark_leftovers: list[str] = field(default_factory=list)  # temp files removed before runs
    script: ClassVar[Path] = REALTIME_JOB

    def sink_args(self) -> list[str]:
        return [
            *("--table", self.table, "--topic", self.topic),
            *("--writer", self.writer, "--sink", self.sink),
            *("--transport", self.transport),
        ]

    def start(self, crash_at: str | None = None, hold_at: str | None = None) -> None:
        """Start a run, first removing a temp offset file a kill in the first epoch left
        (``remove_first_epoch_leftovers``); each removal is printed and kept."""
        for name in remove_first_epoch_leftovers(self.checkpoint):
            print(f"run {self.runs + 1}: removed Spark's leftover {name}", flush=True)
            self.spark_leftovers.append(name)
        super().start(crash_at, hold_at)

    def wait_started(self, timeout: float = 120) -> None:
        self._wait(lambda: "JOB STARTED" in self.log(), timeout, "the query's start")

    def log(self) -> str:
        return (self.workdir / f"run-{self.runs}.log").read_text(errors="replace")

    def stop(self, timeout: float = 120) -> None:
        """Ask the live run to stop its query and exit 0."""
        Path(f"{self.checkpoint}.stop").touch()
        self.finish(timeout)
        Path(f"{self.checkpoint}.stop").unlink()


def remove_first_epoch_leftovers(checkpoint: Path) -> list[str]:
    """Remove the temp files Spark left in ``offsets/`` or ``commits/`` when that log has no
    written batch yet; return them as ``<log>/<name>``.

    In Real-time Mode Spark writes ``offsets/N`` at epoch N's end, then ``commits/N``: each a
    temp file, then a rename. A SIGKILL between the two leaves only ``.0.<uuid>.tmp`` (and its
    ``.crc``), which Spark never reads, yet its new-checkpoint check refuses the directory
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY): with ``offsets/0`` written and no
    ``commits/0``, Spark first drops ``offsets/0`` (nothing committed) and then checks
    ``commits/`` too. What a user does then (the guide says so) is start again without them:
    the query starts from the beginning, which the frontiers make exactly once. Leftovers
    beside a written batch are Spark's to ignore, and stay.
    """
    removed: list[str] = []
    for log in ("offsets", "commits"):
        folder = checkpoint / log
        if not folder.is_dir():
            continue
        names = [p.name for p in folder.iterdir()]
        if any(name.isdigit() for name in names):
            continue
        for name in names:
            if name.endswith((".tmp", ".tmp.crc")):
                (folder / name).unlink()
                removed.append(f"{log}/{name}")
    return removed


def wait_for_events(
    conn: psycopg.Connection[Any], table: str, events: int, timeout: float = 120
) -> None:
    wait_until(lambda: distinct_events(conn, table) >= events, f"{events} events", timeout)
