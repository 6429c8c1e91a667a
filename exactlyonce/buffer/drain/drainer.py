"""The drainer: buffer topic -> real sink, exactly once, never dropping a record.

What it guarantees: every record that the buffered query committed to the buffer topic (the
consumption recipe of :mod:`exactlyonce.connectors.kafka.reader`: confirmed attempts, up to
the head's frontier) is written to the sink once, through drainer crashes (SIGKILL anywhere),
sink outages and restarts; a record it cannot write goes to the drain dead-letter topic with
the reason, and the drain goes on. Records of aborted or superseded attempts (which Tansu and
other brokers still deliver) are skipped, never written.

How (one module per part):

- it reads the buffer with ``assign()`` and explicit offsets, never a consumer group
  (:mod:`.clients`);
- where it is (partition -> next offset) lives in the sink, written with the records as the
  sink's drain target says (:mod:`.target`: in the same atomic step, or after the records
  were written idempotently), and is read back on (re)start (:mod:`.positions`);
- it follows the recipe incrementally: it folds the control topic as it grows
  (:mod:`.control`), and reads each partition from its stored offset up to the latest head's
  frontier in chunks of about ``batch_size`` records (:mod:`.planner`, :mod:`.chunk`), one
  target step per writer's share of a chunk (:mod:`.writer`);
- a record ID already in the sink is a no-op (PostgreSQL's unique index, Elasticsearch's
  ``_id``; a Redis share, or a PostgreSQL append table's transaction, is never applied twice:
  its offsets are in the same atomic step);
- any failure of the sink or the broker rolls the chunk back, waits (the drainer's
  :class:`~exactlyonce.retry.RetryPolicy`: from 0.25 s doubling up to ``max_backoff_s``),
  re-reads the offsets from the sink (a commit whose reply was lost is seen there, never
  assumed failed) and resumes from them; a configuration error is never retried;
- stored offsets beyond the topic's end stop it with an error; so do records that expired
  before they were drained (:class:`~exactlyonce.errors.ExpiredRecordsError`, naming the
  topic, the partition and the lost range): below a stored offset, below where the query's
  records begin in a partition never drained (the head's ``origin``), or under the running
  drainer (its reader's fetch is out of range). It never skips them (:mod:`.positions`).

Lag: see :mod:`.lag`. Dead letters (at-least-once): see :mod:`.dead_letters`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from exactlyonce.buffer.drain.core import DrainerCore
from exactlyonce.buffer.drain.lag import Lag
from exactlyonce.buffer.drain.report import DrainReport
from exactlyonce.buffer.drain.retries import FATAL
from exactlyonce.buffer.tuning import switch_interval

log = logging.getLogger("exactlyonce.drainer")
T = TypeVar("T")

# The GIL switch interval of a process that only drains: its writers waited up to the
# interpreter's 5 ms for the GIL after each PostgreSQL round trip while the reader held it.
DRAIN_PROCESS_SWITCH_INTERVAL_S = 0.0005


class Drainer(DrainerCore):
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


__all__ = ["DRAIN_PROCESS_SWITCH_INTERVAL_S", "FATAL", "DrainReport", "Drainer", "Lag"]
