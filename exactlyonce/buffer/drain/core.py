"""The drainer's working parts, and one step: read a chunk, write it, move the positions.

:class:`DrainerCore` wires the parts together (:mod:`.clients`, :mod:`.control`,
:mod:`.positions`, :mod:`.planner`, :mod:`.chunk`, :mod:`.writer`, :mod:`.dead_letters`,
:mod:`.lag`, one :class:`~.target.DrainTarget` per writer, picked by :mod:`.targets`) and
owns the state
they share: the positions, the lag, the totals. :class:`~.drainer.Drainer` adds the
lifecycle (run, retries, threads, closing).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time

from exactlyonce.buffer.drain.chunk import read_chunk
from exactlyonce.buffer.drain.clients import BufferClients
from exactlyonce.buffer.drain.control import ControlFollower
from exactlyonce.buffer.drain.dead_letters import DeadLetters
from exactlyonce.buffer.drain.lag import Lag, compute_lag
from exactlyonce.buffer.drain.planner import ChunkPlanner
from exactlyonce.buffer.drain.positions import (
    check_positions,
    current_starts,
    read_positions,
    reset_positions,
    start_here,
)
from exactlyonce.buffer.drain.report import DrainReport
from exactlyonce.buffer.drain.retries import drain_retry_policy
from exactlyonce.buffer.drain.targets import target_for
from exactlyonce.buffer.drain.writer import ChunkWriter
from exactlyonce.connectors.base import ExactlyOnceSink
from exactlyonce.connectors.base.drain import Chunk, DrainTarget
from exactlyonce.connectors.kafka.buffer import check_target
from exactlyonce.connectors.kafka.buffer_config import KafkaBuffer
from exactlyonce.connectors.kafka.reader import Commits
from exactlyonce.errors import ConfigError, OffsetsMovedError
from exactlyonce.secrets import scrub, secret_values

log = logging.getLogger("exactlyonce.drainer")

LAG_EVERY_S = 1.0  # how often a busy drainer re-reads the partitions' ends for its lag
CONTROL_EVERY_S = 1.0  # how often a busy drainer folds in new control-topic records


class DrainerCore:
    """The parts of a drainer and :meth:`step`; see :class:`~.drainer.Drainer`."""

    def __init__(
        self,
        sink: ExactlyOnceSink,
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
        self.targets: list[DrainTarget] = [
            target_for(sink, buffer.topic, f"exactlyonce:{self.name}", w, writers, member)
            for w in range(writers)
        ]
        self.target = self.targets[0]
        self.total = DrainReport()
        self.lag = Lag()
        self.positions: dict[int, int] | None = None  # None: to be read from the sink
        self.error: BaseException | None = None
        self._secrets = [*secret_values(buffer.client_config), *sink.config.secrets()]
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

    def load_offsets(self) -> dict[int, int]:
        """Read the stored offsets back from the sink (what a restart resumes from)."""
        self.positions = read_positions(self.targets, self._mine)
        return dict(self.positions)

    def step(self) -> DrainReport:
        """Drain at most one chunk (``batch_size`` records), one target step per writer's
        share. Not thread-safe; a failure leaves the sink as it was for every share
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

    def refresh_lag(self) -> Lag:
        """Read the control topic and the partitions' ends now, and recompute :attr:`lag`."""
        if self.positions is None:
            self._prepare()
        self._refresh_control()
        return self._compute_lag()

    def reset_offsets(self) -> int:
        """Forget the stored offsets (not the data): the next run starts at the topic's start,
        as it is now. Record IDs already in the sink stay no-ops (PostgreSQL in mode insert,
        Elasticsearch; Redis hash and string keys are written again with the same values); a
        Redis stream appends its records again. A PostgreSQL table in mode append refuses
        (ConfigError, nothing forgotten): it would append every record again.

        Records that expired are given up here, knowingly: every partition that starts above
        0 gets its start stored as its offset, so the drain goes on from there instead of
        stopping for them (:mod:`.positions`). Returns how many partitions' offsets went."""
        n = reset_positions(self.targets)
        self.positions = None
        self._ready = False
        self.planner.cancel_prefetch()
        starts = current_starts(
            self._clients.client("data"),
            self.topic,
            self._clients.partitions(),
            self.kafka_timeout_s,
        )
        everything = target_for(self.sink, self.topic, f"exactlyonce:{self.name}:reset")
        try:
            start_here(everything, starts)
        finally:
            everything.close()
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
        stored = read_positions(self.targets, self._mine)
        self._refresh_control()
        self.positions = check_positions(
            self._clients.client("data"),
            self.topic,
            [p for p in self._clients.partitions() if self._mine(p)],
            stored,
            self._frontier(),
            self.commits.origin(self.topic),
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

    def _scrub(self, text: str) -> str:
        """``text`` without any credential of the buffer's clients or the sink's config."""
        return scrub(text, *self._secrets)
