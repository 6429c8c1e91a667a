"""The drainer: buffer topic -> real sink, exactly once, never dropping a record.

What it guarantees: every record that the buffered query committed to the buffer topic (the
consumption recipe of :mod:`exactlyonce.connectors.kafka_reader`: confirmed attempts, up to
the head's frontier) is written to the sink once, through drainer crashes (SIGKILL anywhere),
sink outages and restarts; a record it cannot write goes to the drain dead-letter topic with
the reason, and the drain goes on. Records of aborted or superseded attempts (which Tansu and
other brokers still deliver) are skipped, never written.

How (one module per part):

- it reads the buffer with ``assign()`` and explicit offsets, never a consumer group
  (:mod:`.clients`);
- where it is (partition -> next offset) lives in the sink, written in the same transaction
  as the rows (:mod:`.postgres_target`), and is read back on (re)start (:mod:`.positions`);
- it follows the recipe incrementally: it folds the control topic as it grows
  (:mod:`.control`), and reads each partition from its stored offset up to the latest head's
  frontier in chunks of about ``batch_size`` records (:mod:`.planner`, :mod:`.chunk`), one
  sink transaction per writer's share of a chunk (:mod:`.writer`);
- a record ID already in the sink is a no-op (the unique index, ``ON CONFLICT DO NOTHING``);
- any failure of the sink or the broker rolls the chunk back, waits (the drainer's
  :class:`~exactlyonce.retry.RetryPolicy`: from 0.25 s doubling up to ``max_backoff_s``),
  re-reads the offsets from the sink (a commit whose reply was lost is seen there, never
  assumed failed) and resumes from them; a configuration error is never retried;
- stored offsets beyond the topic's end or below its start stop it with an error.

Lag: see :mod:`.lag`. Dead letters (at-least-once): see :mod:`.dead_letters`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from exactlyonce.buffer.buffered import KafkaBuffer, check_target
from exactlyonce.buffer.drain.chunk import Chunk, read_chunk
from exactlyonce.buffer.drain.clients import BufferClients
from exactlyonce.buffer.drain.control import ControlFollower
from exactlyonce.buffer.drain.dead_letters import DeadLetters
from exactlyonce.buffer.drain.lag import Lag, compute_lag
from exactlyonce.buffer.drain.planner import ChunkPlanner
from exactlyonce.buffer.drain.positions import check_positions, read_positions, reset_positions
from exactlyonce.buffer.drain.postgres_target import PgDrainTarget
from exactlyonce.buffer.drain.writer import ChunkWriter
from exactlyonce.buffer.tuning import switch_interval
from exactlyonce.connectors.kafka_reader import Commits
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.errors import CheckpointResetError, ConfigError, OffsetsMovedError
from exactlyonce.retry import RetryPolicy
from exactlyonce.secrets import dsn_password, scrub

log = logging.getLogger("exactlyonce.drainer")
T = TypeVar("T")

FATAL = (ConfigError, CheckpointResetError)
LAG_EVERY_S = 1.0  # how often a busy drainer re-reads the partitions' ends for its lag
CONTROL_EVERY_S = 1.0  # how often a busy drainer folds in new control-topic records
FIRST_BACKOFF_S = 0.25  # the first wait after a failure; then doubling up to max_backoff_s
# The GIL switch interval of a process that only drains: its writers waited up to the
# interpreter's 5 ms for the GIL after each PostgreSQL round trip while the reader held it.
DRAIN_PROCESS_SWITCH_INTERVAL_S = 0.0005


def retriable(exc: BaseException) -> bool:
    """Sink and broker failures are retried; a configuration error (FATAL) never is."""
    return isinstance(exc, Exception) and not isinstance(exc, FATAL)


def drain_retry_policy(max_backoff_s: float) -> RetryPolicy:
    """Retry forever (a deadline is added per call), waiting 0.25 s doubling up to
    ``max_backoff_s``."""
    first = min(FIRST_BACKOFF_S, max(0.0, max_backoff_s))
    return RetryPolicy(
        attempts=sys.maxsize,
        initial_s=first,
        max_s=max(first, max_backoff_s),
        transient=retriable,
    )


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


class Drainer:
    """Moves a buffer's records into its sink. Use :meth:`run` (blocking), :meth:`start` /
    :meth:`stop` (a thread), or :meth:`drain_available` (until caught up).

    The cyclic garbage collector is paused while each chunk is read, and with
    ``switch_interval_s`` the process's GIL switch interval is set while it drains: see
    :mod:`exactlyonce.buffer.tuning`. Both are given back as found. The interval is left alone
    by default (a drainer thread inside a Spark driver shares the driver's interpreter); a
    process that only drains (``exactlyonce drain``, :class:`~exactlyonce.buffer.pool.
    DrainerPool` members) uses :data:`DRAIN_PROCESS_SWITCH_INTERVAL_S`.

    Failures are retried with :attr:`retry_policy` (replace it to change the waits).
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
        self.retry_policy = drain_retry_policy(max_backoff_s)
        # One sink connection per writer; of this member's partitions (p % members == member),
        # writer w owns p // members % writers == w (their rows and offsets), so writers
        # commit in parallel, each atomically.
        self.targets = [
            PgDrainTarget(sink, buffer.topic, f"exactlyonce:{self.name}", w, writers, member)
            for w in range(writers)
        ]
        self.target = self.targets[0]
        self.total = DrainReport()
        self.lag = Lag()
        self.positions: dict[int, int] | None = None  # None: to be read from the sink
        self.error: BaseException | None = None
        self._secrets = [
            str(v) for k, v in buffer.client_config.items() if "password" in k or "secret" in k
        ]
        self._build_parts()

    def _build_parts(self) -> None:
        self._clients = BufferClients(self.buffer, self.kafka_timeout_s)
        self.control = ControlFollower(
            self.buffer, self.query_name, self._mine, self.kafka_timeout_s
        )
        self.dead_letters = DeadLetters(
            self.buffer, self.name, self.kafka_timeout_s, self._scrub, self
        )
        self.planner = ChunkPlanner(
            self._read, self.batch_size, float(self.buffer.frame_records), self.name
        )
        self.writer = ChunkWriter(self.targets, self.members, self.name, self.dead_letters.send)
        self._ready = False
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lag_at = 0.0

    @property
    def commits(self) -> Commits:
        """What the control topic says committed, as far as this drainer has read it."""
        return self.control.commits

    # -- public ----------------------------------------------------------------------------

    def load_offsets(self) -> dict[int, int]:
        """Read the stored offsets back from the sink (what a restart resumes from)."""
        self.positions = read_positions(self.targets, self._mine)
        return dict(self.positions)

    def step(self) -> DrainReport:
        """Drain at most one chunk (``batch_size`` records) in one sink transaction per
        writer's share. Not thread-safe; a failure leaves the sink as it was for every share
        that did not commit (the next step re-reads the positions after :meth:`_failed`)."""
        began = time.monotonic()
        self._prepare()
        assert self.positions is not None
        # Records below the known frontier need no newer control records (their attempts'
        # confirmations came before the head that set it): while there is work below it,
        # read the control topic only now and then (it cost ~35 ms a chunk).
        if (
            self.planner.plan(self.positions, self._frontier()) is None
            or began - self.control.read_at >= CONTROL_EVERY_S
        ):
            self._refresh_control()
        chunk = self.planner.next_chunk(self.positions, self._frontier())
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
        self._retrying(self._refresh_control_prepared, began, timeout_s, report)
        target = self._frontier()
        while True:
            done = self.positions is not None and all(
                self.positions.get(p, 0) >= end for p, end in target.items()
            )
            if done:
                break
            report.add(self._retrying(self.step, began, timeout_s, report))
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
        report = DrainReport()
        # Waits end early when ``stop`` is set; a step is not begun after it.
        retrying = self.retry_policy.retrying(self._on_retry(report)).copy(sleep=stop.wait)
        while not stop.is_set():
            try:
                step: DrainReport | None = retrying(lambda: None if stop.is_set() else self.step())
            except FATAL as exc:
                self.error = exc
                raise
            if step is None:
                break
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
        """Release the threads, consumers, producer and sink connections. Safe to call twice;
        the drainer reopens what it needs if used again. Not called on an abrupt exit: the
        sink's transaction then rolls back with the lost connection."""
        self.planner.close()
        self._clients.close()
        self.dead_letters.close()
        self.writer.close()
        for target in self.targets:
            target.close()
        self._ready = False

    def refresh_lag(self) -> Lag:
        """Read the control topic and the partitions' ends now, and recompute :attr:`lag`."""
        if self.positions is None:
            self._prepare()
        self._refresh_control()
        return self._compute_lag()

    def reset_offsets(self) -> int:
        """Forget the stored offsets (not the data): the next run starts at the topic's start.
        Record IDs already in the sink stay no-ops."""
        n = reset_positions(self.targets)
        self.positions = None
        self._ready = False
        return n

    def __repr__(self) -> str:
        return f"Drainer({self.topic!r} -> {self.sink.sink_name!r}, query={self.query_name!r})"

    # -- the parts ---------------------------------------------------------------------------

    def _prepare(self) -> None:
        """(Re)start: positions from the sink, the control topic folded in, the positions
        checked against the topic, the dead-letter topic there. Once, until a failure."""
        if self._ready:
            return
        self.planner.cancel_prefetch()
        self._clients.forget_partitions()
        self.positions = read_positions(self.targets, self._mine)
        self._refresh_control()
        check_positions(
            self._clients.client("data"),
            self.topic,
            self._clients.partitions(),
            self.positions,
            self._frontier(),
            self.kafka_timeout_s,
        )
        self.dead_letters.ensure_topic()
        self._ready = True
        log.info("%s resumes at %s", self, self.positions or "the beginning")

    def _refresh_control_prepared(self) -> None:
        self._prepare()
        self._refresh_control()

    def _refresh_control(self) -> None:
        self.control.refresh(self._clients.client("control"))

    def _mine(self, partition: int) -> bool:
        """Is ``partition`` this drainer's? (Member ``i`` of ``n`` drains ``p % n == i``.)"""
        return partition % self.members == self.member

    def _frontier(self) -> dict[int, int]:
        return self.control.frontier()

    def _read(self, starts: dict[int, int], ends: dict[int, int]) -> Chunk:
        return read_chunk(self._clients.reader(), self.commits, starts, ends)

    def _write(self, chunk: Chunk) -> DrainReport:
        """Each writer's share of the chunk in its own sink transaction, in parallel."""
        assert self.positions is not None
        report = DrainReport(batches=1, read=chunk.read, skipped=chunk.skipped)
        try:
            report.written, report.duplicates, report.dead_letters = self.writer.write(
                chunk, self.positions
            )
        except BaseException:
            self.planner.cancel_prefetch()  # it was read for positions that may not hold now
            raise
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

    def _compute_lag(self) -> Lag:
        """:attr:`lag` from the broker's view and the last known positions (works while the
        sink is down)."""
        if self.positions is None:
            return self.lag
        self._lag_at = time.monotonic()
        mine = [p for p in self._clients.partitions() if self._mine(p)]
        client = self._clients.client("data")
        self.lag = compute_lag(
            client, self.topic, mine, self.positions, self.control, self.kafka_timeout_s
        )
        return self.lag

    # -- failures ----------------------------------------------------------------------------

    def _failed(self, exc: BaseException, backoff: float, report: DrainReport) -> None:
        """After a failure (the retry policy's on_retry, before its wait): forget the chunk
        and the positions (re-read from the sink next time), keep the lag current from the
        broker, and say what happened."""
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
        with contextlib.suppress(Exception):  # the broker may be what failed
            self._refresh_control()
            self._compute_lag()

    def _on_retry(self, report: DrainReport) -> Callable[[BaseException, int, float], None]:
        return lambda exc, _retry, wait_s: self._failed(exc, wait_s, report)

    def _retrying(
        self, fn: Callable[[], T], began: float, timeout_s: float, report: DrainReport
    ) -> T:
        """``fn()``, retried through failures until ``timeout_s`` after ``began``; a
        configuration error is raised at once, the last failure once the time is up."""
        left = max(0.0, timeout_s - (time.monotonic() - began))
        policy = self.retry_policy.replace(deadline_s=left)
        return policy.call(fn, on_retry=self._on_retry(report))

    def _scrub(self, text: str) -> str:
        dsn = self.sink._dsn.reveal()
        return scrub(text, *self._secrets, dsn, dsn_password(dsn))


__all__ = [
    "DRAIN_PROCESS_SWITCH_INTERVAL_S",
    "FATAL",
    "DrainReport",
    "Drainer",
    "Lag",
    "drain_retry_policy",
    "retriable",
]
