"""The drainer: buffer topic -> real sink, exactly once, never dropping a record.

What it guarantees: every record that the buffered query committed to the buffer topic (the
consumption recipe of :mod:`exactlyonce.connectors.kafka_reader`: confirmed attempts, up to
the head's frontier) is written to the sink once, through drainer crashes (SIGKILL anywhere),
sink outages and restarts; a record it cannot write goes to the drain dead-letter topic with
the reason, and the drain goes on. Records of aborted or superseded attempts (which Tansu and
other brokers still deliver) are skipped, never written.

How:

- it reads the buffer with ``assign()`` and explicit offsets, never a consumer group;
- where it is (partition -> next offset) lives in the sink, written in the same transaction
  as the rows (:mod:`exactlyonce.buffer.postgres`), and is read back on (re)start: Kafka
  Connect's ``SinkTaskContext.offset()`` pattern;
- it follows the recipe incrementally: it folds the control topic (heads, confirmations) as it
  grows, and reads each partition from its stored offset up to the latest head's frontier, in
  chunks of about ``batch_size`` records (whole frames: a buffer message holds up to
  ``frame_records`` records, see :mod:`exactlyonce.buffer.kafka_buffer`), one sink
  transaction per chunk; a frame is split into its records only on the exact path;
- a record ID already in the sink is a no-op (the unique index, ``ON CONFLICT DO NOTHING``);
- any failure of the sink or the broker rolls the chunk back, waits (exponential backoff up to
  ``max_backoff_s``), re-reads the offsets from the sink (a commit whose reply was lost is
  seen there, never assumed failed) and resumes from them;
- stored offsets beyond the topic's end (the topic was re-created) or below its start
  (records expired before they were drained) stop it with an error: it never skips silently.

Lag: ``lag.records`` is the number of offsets between the stored positions and the end of
each partition (committed records, plus records of epochs still in flight), in records: times
the buffer's records per offset (every confirmed attempt's record count over the head's
frontier; a frame holds many records, transaction markers none). ``lag.seconds`` is how long
ago the oldest committed-but-undrained epoch was committed to the buffer (0 when caught up).

Dead letters (at-least-once): they are flushed to the dead-letter topic before the sink
transaction commits, so a crash between the two may write one again; each carries its source
coordinates (``eo-source-topic``/``-partition``/``-offset`` headers) to tell repeats apart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from exactlyonce.buffer.kafka_buffer import KafkaBuffer, check_target
from exactlyonce.buffer.postgres import (
    HEX_DIGITS,
    DrainRow,
    PgDrainTarget,
    valid_record_id,
)
from exactlyonce.buffer.tuning import gc_paused, switch_interval
from exactlyonce.connectors.kafka.reader import (
    H_EPOCH,
    H_ERROR,
    H_RECORD_ID,
    H_RECORD_IDS,
    RECORD_ID_BYTES,
    START,
    Commits,
    RangeReader,
    consumer,
    control_prefix,
    drain,
    exact_end_offsets,
    headers_of,
    log_start_offset,
    offset_of,
    partitions_of,
    shared_config,
    where_of,
)
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.errors import (
    CheckpointResetError,
    ConfigError,
    OffsetsMovedError,
    SinkUnavailableError,
)
from exactlyonce.faults import crash_point
from exactlyonce.secrets import dsn_password, scrub

log = logging.getLogger("exactlyonce.drainer")

H_SOURCE_TOPIC = "eo-source-topic"
H_SOURCE_PARTITION = "eo-source-partition"
H_SOURCE_OFFSET = "eo-source-offset"
H_DRAINER = "eo-drainer"
H_FRAME_INDEX = "eo-frame-index"  # a dead letter from a frame: the record's place in it

FATAL = (ConfigError, CheckpointResetError)
LAG_EVERY_S = 1.0  # how often a busy drainer re-reads the partitions' ends for its lag
PARTITIONS_EVERY_S = 10.0  # how often it lists the buffer topic's partitions again
CONTROL_EVERY_S = 1.0  # how often a busy drainer folds in new control-topic records
# The GIL switch interval of a process that only drains: its writers waited up to the
# interpreter's 5 ms for the GIL after each PostgreSQL round trip while the reader held it.
DRAIN_PROCESS_SWITCH_INTERVAL_S = 0.0005


@dataclass
class Lag:
    """How far the sink is behind the buffer."""

    records: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        return f"{self.records} records, {self.seconds:.1f}s behind"


@dataclass
class DrainReport:
    """What a drain did (one chunk, one call, or the drainer's whole life)."""

    batches: int = 0
    read: int = 0
    written: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    skipped: int = 0  # records of aborted/superseded attempts or of other queries
    retries: int = 0
    seconds: float = 0.0

    def add(self, other: DrainReport) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class _Chunk:
    """What one read of the buffer returned: accepted messages (column-wise: a frame, or a
    message of one record), bad messages and new positions. ``ids[i]`` holds message i's
    record IDs, 32 bytes each; ``counts[i]`` how many."""

    starts: dict[int, int]
    ends: dict[int, int]
    messages: list[Any] = field(default_factory=list)
    ids: list[bytes] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    frames: list[bool] = field(default_factory=list)
    bad: list[tuple[Any, str]] = field(default_factory=list)
    read: int = 0  # records (a frame counts its records)
    skipped: int = 0

    @property
    def offsets(self) -> int:
        return sum(self.ends[p] - s for p, s in self.starts.items())

    def rows_of(self, where: list[int]) -> tuple[list[DrainRow], list[tuple[Any, str]]]:
        """The records of the messages at ``where`` as rows for the exact path, and the values
        that cannot be a row at all (with why). A frame's records are looked at one by one."""
        rows, bad = [], []
        for i in where:
            msg, ids, epoch = self.messages[i], self.ids[i], self.epochs[i]
            partition = self.partitions[i]
            if not self.frames[i]:
                lines = [(self.values[i], ids, msg)]
            else:
                lines = [
                    (line, rid, FrameRecord(msg, k, rid, line))
                    for k, (line, rid) in enumerate(
                        zip(self.values[i].split(b"\n"), _split_ids(ids), strict=True)
                    )
                ]
            for value, rid, source in lines:
                problem = _value_problem(value)  # the exact path: the precise look at every value
                if problem:
                    bad.append((source, problem))
                    continue
                rows.append(DrainRow(partition, rid.lower(), epoch, value, source))
        return rows, bad


def _split_ids(blob: bytes) -> list[bytes]:
    return [blob[i : i + RECORD_ID_BYTES] for i in range(0, len(blob), RECORD_ID_BYTES)]


class FrameRecord:
    """One record of a frame, shaped like the Kafka message it came from (for dead letters):
    its own value and ``eo-record-id``, and its place in the frame (``eo-frame-index``)."""

    __slots__ = ("frame", "index", "record_id", "line")

    def __init__(self, frame: Any, index: int, record_id: bytes, line: bytes) -> None:
        self.frame, self.index, self.record_id, self.line = frame, index, record_id, line

    def topic(self) -> str:
        return str(self.frame.topic())

    def partition(self) -> int:
        return int(self.frame.partition())

    def offset(self) -> int:
        return int(self.frame.offset())

    def key(self) -> bytes | None:
        return self.frame.key()  # type: ignore[no-any-return]

    def value(self) -> bytes:
        return self.line

    def headers(self) -> list[tuple[str, bytes]]:
        kept = [(k, v) for k, v in self.frame.headers() or [] if k != H_RECORD_IDS]
        return [
            *kept,
            (H_RECORD_ID, self.record_id),
            (H_FRAME_INDEX, str(self.index).encode()),
        ]


def _ids_problem(frame: bool, ids: Any, value: Any) -> str | None:
    """Why a message's record IDs (and, for a frame, its lines) do not hold together."""
    if not frame:
        if ids is None:
            return f"missing record-ID header ({H_RECORD_ID})"
        if not isinstance(ids, bytes) or not valid_record_id(ids):
            return f"malformed record-ID header ({H_RECORD_ID})"
        return None
    if (
        not isinstance(ids, bytes)
        or not ids
        or len(ids) % RECORD_ID_BYTES
        or ids.translate(None, HEX_DIGITS)
    ):
        return f"malformed record-IDs header ({H_RECORD_IDS}): not 32 hex digits per record"
    if not isinstance(value, bytes):
        return "a frame without a value"
    lines = value.count(b"\n") + 1
    if lines != len(ids) // RECORD_ID_BYTES:
        return (
            f"malformed frame: {len(ids) // RECORD_ID_BYTES} record IDs ({H_RECORD_IDS}) but "
            f"{lines} lines of values"
        )
    return None


_UNKNOWN = object()
_ID_HEADERS = (H_RECORD_IDS, H_RECORD_ID)


class Drainer:
    """Moves a buffer's records into its sink. Use :meth:`run` (blocking), :meth:`start` /
    :meth:`stop` (a thread), or :meth:`drain_available` (until caught up).

    The cyclic garbage collector is paused while each chunk is read, and with
    ``switch_interval_s`` the process's GIL switch interval is set while it drains: see
    :mod:`exactlyonce.buffer.tuning`. Both are given back as found. The interval is left alone
    by default (a drainer thread inside a Spark driver shares the driver's interpreter); a
    process that only drains (``exactlyonce drain``, :class:`~exactlyonce.buffer.pool.
    DrainerPool` members) uses :data:`DRAIN_PROCESS_SWITCH_INTERVAL_S`.
    """

    def __init__(
        self,
        sink: PostgresSink,
        buffer: KafkaBuffer,
        *,
        batch_size: int = 10_000,
        poll_interval_s: float = 0.5,
        max_backoff_s: float = 10.0,
        kafka_timeout_s: float = 60.0,
        writers: int = 2,
        name: str | None = None,
        member: tuple[int, int] = (0, 1),
        switch_interval_s: float | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError("batch_size", f"a positive integer, got {batch_size!r}")
        if not isinstance(writers, int) or not 1 <= writers <= 64:
            raise ConfigError("writers", f"an integer from 1 to 64, got {writers!r}")
        if switch_interval_s is not None and not 0 < switch_interval_s <= 1:
            raise ConfigError(
                "switch_interval_s", f"seconds in (0, 1], or None, got {switch_interval_s!r}"
            )
        self.switch_interval_s = switch_interval_s
        index, members = member
        if not 1 <= members <= 256 or not 0 <= index < members:
            raise ConfigError("member", f"(index, members) with 0 <= index < members, got {member}")
        self.member = index
        self.members = members
        self.sink = check_target(sink)
        self.buffer = buffer
        self.topic = buffer.topic
        self.query_name = sink.query_name
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self.max_backoff_s = max_backoff_s
        self.kafka_timeout_s = kafka_timeout_s
        self.name = name or f"drainer:{os.getpid()}"
        # One sink connection per writer; of this member's partitions (p % members == member),
        # writer w owns p // members % writers == w (their rows and offsets), so writers
        # commit in parallel, each atomically.
        self.targets = [
            PgDrainTarget(sink, buffer.topic, f"exactlyonce:{self.name}", w, writers, member)
            for w in range(writers)
        ]
        self.target = self.targets[0]
        self._writers: ThreadPoolExecutor | None = None
        self._dead_letter_lock = threading.Lock()
        self.commits = Commits(self.query_name, buffer.sink_name)
        self.total = DrainReport()
        self.lag = Lag()
        self.positions: dict[int, int] | None = None  # None: to be read from the sink
        self.error: BaseException | None = None
        self._control_pos: dict[int, int] = {}
        self._heads: deque[tuple[float, dict[int, int]]] = deque()
        self._ready = False
        self._clients: dict[str, Any] = {}
        self._range_reader: RangeReader | None = None
        self._producer: Producer | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._prefetch: Future[_Chunk] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._chunks = 0
        self._lag_at = 0.0
        self._control_at = 0.0
        self._partitions_cache: tuple[float, list[int]] | None = None
        self._records_per_offset = float(buffer.frame_records)  # until a chunk says
        self._secrets = [
            str(v) for k, v in buffer.client_config.items() if "password" in k or "secret" in k
        ]

    # -- public ----------------------------------------------------------------------------

    def load_offsets(self) -> dict[int, int]:
        """Read the stored offsets back from the sink (what a restart resumes from)."""
        self.positions = self._read_offsets()
        return dict(self.positions)

    def _read_offsets(self) -> dict[int, int]:
        stored: dict[int, int] = {}
        for target in self.targets:
            target.ensure()
            stored.update(target.read_offsets())
        return {p: o for p, o in stored.items() if self._mine(p)}

    def step(self) -> DrainReport:
        """Drain at most one chunk (``batch_size`` records) in one sink transaction."""
        began = time.monotonic()
        self._prepare()
        # Records below the known frontier need no newer control records (their attempts'
        # confirmations came before the head that set it): while there is work below it,
        # read the control topic only now and then (it cost ~35 ms a chunk).
        if self._plan() is None or began - self._control_at >= CONTROL_EVERY_S:
            self._refresh_control()
        chunk = self._next_chunk()
        report = DrainReport()
        if chunk is not None:
            report = self._write(chunk)
            report.seconds = time.monotonic() - began
            self.total.add(report)
        if chunk is None or time.monotonic() - self._lag_at >= LAG_EVERY_S:
            self._compute_lag()  # a broker round trip per partition: not after every chunk
        return report

    def caught_up(self) -> bool:
        """Every record up to the latest head's frontier is in the sink."""
        frontier = self._frontier()
        positions = self.positions or {}
        return all(positions.get(p, 0) >= end for p, end in frontier.items())

    def drain_available(self, timeout_s: float = 300.0) -> DrainReport:
        """Drain until the sink holds everything the buffer committed when this call began
        (retrying through failures until ``timeout_s``)."""
        with switch_interval(self.switch_interval_s):
            return self._drain_available(timeout_s)

    def _drain_available(self, timeout_s: float) -> DrainReport:
        began = time.monotonic()
        report = DrainReport()
        self._retrying(lambda: self._refresh_control_prepared(), began, timeout_s, report)
        target = self._frontier()
        while True:
            done = self.positions is not None and all(
                self.positions.get(p, 0) >= end for p, end in target.items()
            )
            if done:
                break
            step = self._retrying(self.step, began, timeout_s, report)
            if step is not None:
                report.add(step)
        report.seconds = time.monotonic() - began
        self._compute_lag()
        return report

    def run(
        self,
        stop: threading.Event | None = None,
        until_idle_s: float | None = None,
        on_step: Callable[[DrainReport], None] | None = None,
    ) -> DrainReport:
        """Drain until ``stop`` is set (or, with ``until_idle_s``, once caught up and idle
        that long). Sink and broker failures are retried forever with backoff; a
        configuration error (or offsets the topic cannot hold) ends the run with it."""
        with switch_interval(self.switch_interval_s):
            return self._run(stop or self._stop, until_idle_s, on_step)

    def _run(
        self,
        stop: threading.Event,
        until_idle_s: float | None,
        on_step: Callable[[DrainReport], None] | None,
    ) -> DrainReport:
        began = time.monotonic()
        last_work = time.monotonic()
        backoff = 0.0
        report = DrainReport()
        while not stop.is_set():
            try:
                step = self.step()
            except FATAL as exc:
                self.error = exc
                raise
            except Exception as exc:
                backoff = min(self.max_backoff_s, max(0.25, backoff * 2))
                self._failed(exc, backoff, report)
                stop.wait(backoff)
                continue
            backoff = 0.0
            report.add(step)
            if on_step is not None:
                on_step(step)
            if step.batches:
                last_work = time.monotonic()
                continue
            idle = time.monotonic() - last_work
            if until_idle_s is not None and idle >= until_idle_s and self.caught_up():
                break
            stop.wait(self.poll_interval_s)
        report.seconds = time.monotonic() - began
        return report

    def start(self) -> threading.Thread:
        """Run in a daemon thread until :meth:`stop`."""
        if self._thread is not None and self._thread.is_alive():
            return self._thread
        self._stop.clear()
        self.error = None

        def body() -> None:
            try:
                self.run(self._stop)
            except BaseException as exc:  # kept for the owner to see
                self.error = exc
                log.error("%s stopped: %s", self, self._scrub(str(exc)))

        self._thread = threading.Thread(target=body, name=self.name, daemon=True)
        self._thread.start()
        return self._thread

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Drainer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the drain thread (if :meth:`start` ran one) and :meth:`close`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.close()

    def close(self) -> None:
        self._cancel_prefetch()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
        self._range_reader = None
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None
        if self._writers is not None:
            self._writers.shutdown(wait=True)
            self._writers = None
        for target in self.targets:
            target.close()
        self._ready = False

    def refresh_lag(self) -> Lag:
        """Read the control topic and the partitions' ends now, and recompute :attr:`lag`."""
        if self.positions is None:
            self._prepare()
        self._refresh_control()
        return self._compute_lag()

    def _compute_lag(self) -> Lag:
        """:attr:`lag` from the broker's view and the last known positions (works while the
        sink is down)."""
        if self.positions is None:
            return self.lag
        self._lag_at = time.monotonic()
        client = self._client("data")
        frontier = self._frontier()
        offsets = 0
        for p in filter(self._mine, self._partitions()):
            _, high = client.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=self.kafka_timeout_s, cached=False
            )
            end = max(high, frontier.get(p, 0))
            offsets += max(0, end - self.positions.get(p, 0))
        records = round(offsets * self._records_per_offset_committed())
        seconds = 0.0
        while self._heads and all(
            self.positions.get(p, 0) >= o for p, o in self._heads[0][1].items()
        ):
            self._heads.popleft()
        if self._heads and records:
            seconds = max(0.0, time.time() - self._heads[0][0])
        self.lag = Lag(records, seconds)
        return self.lag

    def _records_per_offset_committed(self) -> float:
        """Records per offset of the buffer so far: every confirmed attempt's records over
        the offsets up to the head's frontier (all partitions: attempts span them)."""
        offsets = sum(self.commits.frontier(self.topic).values())
        return self.commits.records / offsets if offsets and self.commits.records else 1.0

    def __repr__(self) -> str:
        return f"Drainer({self.topic!r} -> {self.sink.sink_name!r}, query={self.query_name!r})"

    # -- preparation -----------------------------------------------------------------------

    def _prepare(self) -> None:
        if self._ready:
            return
        self._cancel_prefetch()
        self._partitions_cache = None  # (re)start, or after a failure: list them afresh
        self.positions = self._read_offsets()
        self._refresh_control()
        self._check_positions(self.positions)
        self._ensure_dead_letter_topic()
        self._ready = True
        log.info("%s resumes at %s", self, self.positions or "the beginning")

    def _refresh_control_prepared(self) -> None:
        self._prepare()
        self._refresh_control()

    def _client(self, role: str) -> Any:
        if role not in self._clients:
            # read_uncommitted everywhere: the recipe decides by confirmations (correct on
            # every broker), and an open transaction past the frontier cannot hold reads back.
            self._clients[role] = consumer(
                self.buffer.bootstrap_servers,
                self.buffer.client_config,
                isolation="read_uncommitted",
            )
        return self._clients[role]

    def _reader(self) -> RangeReader:
        """The buffer's reader: one consumer, assigned across chunks (see RangeReader)."""
        if self._range_reader is None:
            what = f"buffer topic {self.topic!r}"
            self._range_reader = RangeReader(
                self._client("read"), self.topic, self.kafka_timeout_s, what
            )
        return self._range_reader

    def _mine(self, partition: int) -> bool:
        """Is ``partition`` this drainer's? (Member ``i`` of ``n`` drains ``p % n == i``.)"""
        return partition % self.members == self.member

    def _writer_of(self, partition: int) -> int:
        return partition // self.members % len(self.targets)

    def _frontier(self) -> dict[int, int]:
        """The latest head's frontier of this drainer's partitions."""
        return {p: e for p, e in self.commits.frontier(self.topic).items() if self._mine(p)}

    def _partitions(self) -> list[int]:
        """The buffer topic's partitions, listed again at most every PARTITIONS_EVERY_S."""
        now = time.monotonic()
        if self._partitions_cache is None or now - self._partitions_cache[0] >= PARTITIONS_EVERY_S:
            found = partitions_of(self._client("data"), self.topic, self.kafka_timeout_s)
            self._partitions_cache = (now, found)
        return self._partitions_cache[1]

    def _check_positions(self, positions: Mapping[int, int]) -> None:
        """Stored offsets must lie inside what the topic holds (DESIGN invariant 9's kind)."""
        client = self._client("data")
        parts = set(self._partitions())
        for p, offset in sorted(positions.items()):
            if p not in parts:
                raise ConfigError(
                    "buffer.topic",
                    f"the sink holds drain offsets for partition {p} of {self.topic!r}, which "
                    "has no such partition: the topic was re-created. Run `exactlyonce "
                    "drain --reset-offsets` (or Drainer.reset_offsets()) if you mean to start over",
                )
            # Exact: some brokers' ListOffsets answers lie below the end and above the
            # start (Tansu); a false "expired" would stop the drain for nothing.
            low = log_start_offset(client, self.topic, p, self.kafka_timeout_s)
            end = exact_end_offsets(client, self.topic, [p], self.kafka_timeout_s)[p]
            end = max(end, self._frontier().get(p, 0))
            if offset > end:
                raise ConfigError(
                    "buffer.topic",
                    f"the sink's drain offset {offset} of {self.topic}[{p}] is past the end of "
                    f"the partition ({end}): the topic was re-created (or the broker lost its "
                    "data), and draining on would skip records. Run `exactlyonce drain "
                    "--reset-offsets` (or Drainer.reset_offsets()) if you mean to start over",
                )
            if offset < low:
                raise ConfigError(
                    "buffer.topic",
                    f"records {offset}..{low - 1} of {self.topic}[{p}] expired before they were "
                    "drained (topic retention is shorter than the drainer's lag). They are "
                    "lost to the sink; reset the drain offsets to go on knowingly",
                )

    def reset_offsets(self) -> int:
        """Forget the stored offsets (not the data): the next run starts at the topic's start.
        Record IDs already in the sink stay no-ops."""
        self.target.ensure()
        n = self.target.reset_offsets()
        for target in self.targets:
            target.held = {}
        self.positions = None
        self._ready = False
        return n

    def _ensure_dead_letter_topic(self) -> None:
        topic = self.buffer.drain_dead_letter_topic
        errors: list[str] = []
        config: dict[str, Any] = {
            **shared_config(self.buffer.client_config),
            "bootstrap.servers": self.buffer.bootstrap_servers,
            "error_cb": lambda err: errors.append(err.str()),
        }
        admin = AdminClient(config)
        try:
            meta = admin.list_topics(timeout=self.kafka_timeout_s)
        except KafkaException as exc:
            raise SinkUnavailableError(
                f"Kafka at {self.buffer.bootstrap_servers}: {self._scrub(str(exc))}"
            ) from None
        if topic in meta.topics and meta.topics[topic].error is None:
            return
        futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1)])
        try:
            futures[topic].result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise SinkUnavailableError(
                    f"cannot create dead-letter topic {topic!r}: {self._scrub(str(exc))}"
                ) from None

    # -- the recipe, incrementally -----------------------------------------------------------

    def _refresh_control(self) -> None:
        """Fold the control topic's new records into :attr:`commits` (recipe step 1)."""
        client = self._client("control")
        control = self.buffer.control_topic
        if not self._control_pos:
            parts = partitions_of(client, control, self.kafka_timeout_s)
            self._control_pos = {p: START for p in parts}
        ranges: dict[tuple[str, int], tuple[int, int | None]] = {
            (control, p): (start, None) for p, start in self._control_pos.items()
        }
        head_key = (control_prefix(self.query_name, self.buffer.sink_name) + "head").encode()
        self._control_at = time.monotonic()
        for msg in drain(client, ranges, self.kafka_timeout_s, f"control topic {control!r}"):
            _, p = where_of(msg)
            self._control_pos[p] = offset_of(msg) + 1
            self.commits.add(msg)
            value = msg.value()
            if value and msg.key() == head_key:
                self._note_head(value)

    def _note_head(self, value: bytes) -> None:
        try:
            data = json.loads(value)
            frontier = {int(p): int(o) for p, o in data["frontier"].get(self.topic, {}).items()}
            written_at = float(data.get("written_at") or time.time())
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        self._heads.append((written_at, {p: o for p, o in frontier.items() if self._mine(p)}))
        while len(self._heads) > 10_000:
            self._heads.popleft()

    def _plan(self) -> tuple[dict[int, int], dict[int, int]] | None:
        """Offset ranges of the next chunk: from the positions toward the frontier."""
        assert self.positions is not None
        frontier = self._frontier()
        todo = {
            p: (self.positions.get(p, 0), end)
            for p, end in sorted(frontier.items())
            if self.positions.get(p, 0) < end
        }
        if not todo:
            return None
        # Offsets to read for about batch_size records: a frame holds up to
        # frame_records of them; what the last chunk held per offset is the estimate.
        share = max(1, int(self.batch_size / self._records_per_offset) // len(todo))
        starts = {p: s for p, (s, _) in todo.items()}
        ends = {p: min(end, s + share) for p, (s, end) in todo.items()}
        return starts, ends

    def _next_chunk(self) -> _Chunk | None:
        """The next chunk: the prefetched one if it starts where we are, else read now; then
        prefetch the one after it (reading overlaps the sink's work on this one)."""
        assert self.positions is not None
        planned = self._plan()
        if planned is None:
            self._cancel_prefetch()
            return None
        starts, ends = planned
        chunk: _Chunk | None = None
        if self._prefetch is not None:
            future, self._prefetch = self._prefetch, None
            got = future.result()  # a failed read raises here, like a direct one
            if got.starts == starts:
                chunk = got
        if chunk is None:
            chunk = self._read(starts, ends)
        if chunk.offsets:
            self._records_per_offset = max(1.0, chunk.read / chunk.offsets)
        after = {**self.positions, **chunk.ends}
        follow = self._plan_from(after)
        if follow is not None:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}-read")
            self._prefetch = self._pool.submit(self._read, *follow)
        return chunk

    def _plan_from(self, positions: dict[int, int]) -> tuple[dict[int, int], dict[int, int]] | None:
        saved, self.positions = self.positions, positions
        try:
            return self._plan()
        finally:
            self.positions = saved

    def _cancel_prefetch(self) -> None:
        future, self._prefetch = self._prefetch, None
        if future is not None:
            with contextlib.suppress(Exception):
                future.result()

    def _read(self, starts: dict[int, int], ends: dict[int, int]) -> _Chunk:
        """Recipe steps 2-3 over ``[starts, ends)``: the records of confirmed attempts.

        The recipe's verdict is asked once per (query, epoch, shard, attempt) of the chunk:
        every record below the frontier was written before its confirmation, which was folded
        in before the head that put it below the frontier. A record as the sink writes it has
        exactly five headers, the record ID last: its first four are the key of that verdict.
        Anything else takes the general look (:func:`headers_of`).
        """
        with gc_paused():
            return self._read_chunk(starts, ends)

    def _read_chunk(self, starts: dict[int, int], ends: dict[int, int]) -> _Chunk:
        chunk = _Chunk(dict(starts), dict(ends))
        verdicts: dict[Any, int | None] = {}  # attempt -> its epoch, or None
        messages, ids, epochs, counts = chunk.messages, chunk.ids, chunk.epochs, chunk.counts
        values, partitions, frames, bad = chunk.values, chunk.partitions, chunk.frames, chunk.bad
        ranges = {p: (s, ends[p]) for p, s in starts.items()}
        for batch in self._reader().read(ranges):
            msg: Any
            for msg in batch:
                h: Any = msg.headers()
                if h is not None and len(h) == 5 and h[4][0] in _ID_HEADERS:
                    key = (h[0], h[1], h[2], h[3])
                    epoch = verdicts.get(key, _UNKNOWN)
                    if epoch is _UNKNOWN:
                        epoch = verdicts[key] = self._verdict(msg)
                    name, found = h[4]
                else:
                    epoch = self._verdict(msg)
                    named = dict(h or ())
                    name = H_RECORD_IDS if H_RECORD_IDS in named else H_RECORD_ID
                    found = named.get(name)
                frame = name == H_RECORD_IDS
                n = len(found) // RECORD_ID_BYTES if frame and isinstance(found, bytes) else 1
                chunk.read += n
                if epoch is None:
                    chunk.skipped += n
                    continue
                value = msg.value()
                problem = _ids_problem(frame, found, value)
                if problem:
                    bad.append((msg, problem))
                    continue
                messages.append(msg)
                ids.append(found)
                epochs.append(epoch)  # type: ignore[arg-type]
                values.append(value)
                partitions.append(msg.partition())
                counts.append(n)
                frames.append(frame)
        return chunk

    def _verdict(self, msg: Any) -> int | None:
        """The record's epoch if the recipe accepts it (its attempt is confirmed), else None."""
        headers = headers_of(msg)
        return int(headers[H_EPOCH]) if self.commits.accepts(headers) else None

    def _by_writer(self, partitions: list[int]) -> dict[int, list[int]]:
        """Positions in the chunk of each writer's records."""
        n = len(self.targets)
        if n == 1:
            return {0: list(range(len(partitions)))} if partitions else {}
        out: dict[int, list[int]] = {}
        members = self.members
        for i, p in enumerate(partitions):  # _writer_of, inline: this runs once per record
            out.setdefault(p // members % n, []).append(i)
        return out

    # -- writing -----------------------------------------------------------------------------

    def _write(self, chunk: _Chunk) -> DrainReport:
        """Each writer's share of the chunk in its own sink transaction, in parallel: its
        rows, its dead letters (flushed before it commits) and its partitions' offsets."""
        assert self.positions is not None
        self._chunks += 1
        n = self._chunks
        report = DrainReport(batches=1, read=chunk.read, skipped=chunk.skipped)
        rows = self._by_writer(chunk.partitions)
        bad: dict[int, list[tuple[Any, str]]] = {}
        for msg, why in chunk.bad:
            bad.setdefault(self._writer_of(where_of(msg)[1]), []).append((msg, why))
        jobs = [
            w
            for w, target in enumerate(self.targets)
            if w in rows
            or w in bad
            or any(target.owns(p) and self.positions.get(p) != e for p, e in chunk.ends.items())
        ]
        try:
            results = self._run_shares(n, jobs, rows, bad, chunk)
        except BaseException:
            self._cancel_prefetch()  # it was read for positions that may not hold now
            raise
        for written, duplicates, letters in results:
            report.written += written
            report.duplicates += duplicates
            report.dead_letters += letters
        if report.written or report.dead_letters:
            log.info(
                "%s: %d written, %d duplicates, %d dead letters, %d skipped; lag %s",
                self,
                report.written,
                report.duplicates,
                report.dead_letters,
                report.skipped,
                self.lag,
            )
        return report

    def _run_shares(
        self,
        n: int,
        jobs: list[int],
        rows: dict[int, list[int]],
        bad: dict[int, list[tuple[Any, str]]],
        chunk: _Chunk,
    ) -> list[tuple[int, int, int]]:
        if len(jobs) == 1:
            return [self._write_share(n, jobs[0], rows, bad, chunk)]
        if self._writers is None:
            self._writers = ThreadPoolExecutor(
                len(self.targets), thread_name_prefix=f"{self.name}-write"
            )
        futures = [self._writers.submit(self._write_share, n, w, rows, bad, chunk) for w in jobs]
        results, failure = [], None
        for future in futures:  # wait for all: a share that committed is kept
            try:
                results.append(future.result())
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return results

    def _write_share(
        self,
        n: int,
        w: int,
        rows: dict[int, list[int]],
        bad: dict[int, list[tuple[Any, str]]],
        chunk: _Chunk,
    ) -> tuple[int, int, int]:
        assert self.positions is not None
        target = self.targets[w]
        crash_point("drain_before_write", n)
        try:
            target.begin()
            written, duplicates, letters = self._insert(target, rows.get(w, []), chunk)
            crash_point("drain_mid_write", n)
            letters = bad.get(w, []) + letters
            if letters:
                self._dead_letter(letters)
            target.commit({**self.positions, **chunk.ends})
        except BaseException:
            target.rollback()
            raise
        crash_point("drain_after_commit", n)
        self.positions.update({p: e for p, e in chunk.ends.items() if target.owns(p)})
        return written, duplicates, len(letters)

    def _insert(
        self, target: PgDrainTarget, where: list[int], chunk: _Chunk
    ) -> tuple[int, int, list[tuple[Any, str]]]:
        """Write the records at ``where``: COPY when the fast path holds, else the exact path.
        Returns (written, duplicates, dead letters)."""
        if not where:
            return 0, 0, []
        # In the writer's thread: Arrow works without the GIL, and the reader is the busier.
        counts = [chunk.counts[i] for i in where]
        data = target.csv(
            [chunk.ids[i] for i in where],
            [chunk.epochs[i] for i in where],
            [chunk.values[i] for i in where],
            counts,
        )
        if data is not None and target.copy(data):
            return sum(counts), 0, []
        rows, letters = chunk.rows_of(where)
        result = target.insert(rows)
        letters += [(r.source, f"refused by the sink: {why}") for r, why in result.refused]
        return result.written, result.duplicates, letters

    def _dead_letter(self, letters: list[tuple[Any, str]]) -> None:
        """Produce and flush (before the sink commits): never lost, at worst repeated."""
        with self._dead_letter_lock:
            self._produce_dead_letters(letters)

    def _produce_dead_letters(self, letters: list[tuple[Any, str]]) -> None:
        if self._producer is None:
            self._producer = Producer(
                {
                    **shared_config(self.buffer.client_config),
                    "bootstrap.servers": self.buffer.bootstrap_servers,
                    "enable.idempotence": True,
                    "acks": "all",
                }
            )
        failures: list[str] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err.str())

        for msg, reason in letters:
            topic, partition = where_of(msg)
            raw = msg.headers() or []
            headers = [(k, v) for k, v in raw if k != H_ERROR]
            headers += [
                (H_ERROR, reason.encode()),
                (H_SOURCE_TOPIC, topic.encode()),
                (H_SOURCE_PARTITION, str(partition).encode()),
                (H_SOURCE_OFFSET, str(offset_of(msg)).encode()),
                (H_DRAINER, self.name.encode()),
            ]
            self._producer.produce(
                self.buffer.drain_dead_letter_topic,
                msg.value(),
                msg.key(),
                headers=headers,
                on_delivery=delivered,
            )
        left = self._producer.flush(self.kafka_timeout_s)
        if left or failures:
            why = failures[0] if failures else f"{left} not acknowledged"
            raise SinkUnavailableError(f"dead letters not written: {self._scrub(why)}")
        for msg, reason in letters:
            log.warning(
                "%s: dead letter %s[%d]@%d: %s",
                self,
                *where_of(msg),
                offset_of(msg),
                reason,
            )

    # -- failures ----------------------------------------------------------------------------

    def _failed(self, exc: BaseException, backoff: float, report: DrainReport) -> None:
        """After a failure: forget the chunk and the positions (re-read from the sink next
        time), keep the lag current from the broker, and say what happened."""
        self.total.retries += 1
        report.retries += 1
        self._ready = False
        for target in self.targets:
            target.close()
        if isinstance(exc, OffsetsMovedError):
            log.warning("%s: %s; re-reading the offsets from the sink", self, exc)
        else:
            log.warning(
                "%s: %s: %s; retry in %.1fs (lag %s)",
                self,
                type(exc).__name__,
                self._scrub(str(exc)).strip().splitlines()[0] if str(exc).strip() else "",
                backoff,
                self.lag,
            )
        with contextlib.suppress(Exception):
            self._refresh_control()
            self._compute_lag()

    def _retrying(
        self, fn: Callable[[], Any], began: float, timeout_s: float, report: DrainReport
    ) -> Any:
        backoff = 0.0
        while True:
            try:
                return fn()
            except FATAL:
                raise
            except Exception as exc:
                if time.monotonic() - began > timeout_s:
                    raise
                backoff = min(self.max_backoff_s, max(0.25, backoff * 2))
                self._failed(exc, backoff, report)
                time.sleep(backoff)

    def _scrub(self, text: str) -> str:
        dsn = self.sink._dsn.reveal()
        return scrub(text, *self._secrets, dsn, dsn_password(dsn))


def _value_problem(value: bytes | None) -> str | None:
    """Why a value cannot be a row (cheap checks; PostgreSQL parses the JSON itself)."""
    if value is None:
        return "no value (a tombstone)"
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"undecodable value: not valid UTF-8 ({exc.reason} at byte {exc.start})"
    body = value.strip()
    if not body.startswith(b"{") or not body.endswith(b"}"):
        return "undecodable value: not a JSON object"
    if b"\x00" in body:
        return "undecodable value: contains a NUL byte"
    return None


__all__ = ["DrainReport", "Drainer", "Lag"]
