"""A Kafka shard task's transactions: the protocol's steps on the control topic, as a small
state machine over one transactional producer.

The producer's transaction is in one :class:`TxnState`: ``IDLE`` (none open: one may begin),
``OPEN`` (begun: produce() goes into it) or ``UNKNOWN`` (its commit's outcome is unknown). A
step called in the wrong state is refused. The steps, in the order a task runs them:

1. :meth:`TransactionSteps._barrier`: commit a record of this attempt to the control
   partition; after ``init_transactions`` fenced older attempts, everything they wrote is
   below it;
2. :meth:`TransactionSteps._earlier_attempts`: read the control partition up to the barrier:
   did an earlier attempt confirm (or, where the broker hides aborted records, commit) the
   shard? Then the task confirms it if needed and writes nothing;
3. the data transaction (begun by :meth:`TransactionSteps._begin`), ended by
   :meth:`TransactionSteps._commit_shard`: the commit marker goes in with the data, the
   commit, then
4. :meth:`TransactionSteps._confirm`: a second small transaction saying this attempt
   committed. Readers count only confirmed attempts.

:meth:`TransactionSteps._end_transaction` ends each: a retriable error retries the commit
(``KafkaTarget.commit_policy``), an abortable one aborts and fails the task (a re-run writes
the shard again), anything else is ambiguous (AmbiguousCommitError): never assumed failed,
the next attempt verifies it in the control topic.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer

from exactlyonce.connectors.kafka.clients import produce_waiting
from exactlyonce.connectors.kafka.consume import consumer, drain, offset_of
from exactlyonce.connectors.kafka.protocol import confirmation_key, marker_key, sync_key
from exactlyonce.connectors.kafka.target import KafkaTarget
from exactlyonce.errors import AmbiguousCommitError, SinkUnavailableError
from exactlyonce.faults import crash_point

log = logging.getLogger("exactlyonce.kafka")

F = TypeVar("F", bound=Callable[..., Any])


class TxnState(enum.Enum):
    IDLE = "idle"
    OPEN = "open"
    UNKNOWN = "unknown"


def requires(state: TxnState) -> Callable[[F], F]:
    """Refuse a step unless the transaction is in ``state`` (a bug, not a broker error)."""

    def decorate(step: F) -> F:
        @functools.wraps(step)
        def guarded(self: TransactionSteps, *args: Any, **kwargs: Any) -> Any:
            if self.txn_state is not state:
                raise RuntimeError(
                    f"{self.where}: {step.__name__} needs a transaction {state.value}, "
                    f"it is {self.txn_state.value}"
                )
            return step(self, *args, **kwargs)

        return guarded  # type: ignore[return-value]

    return decorate


class TransactionSteps:
    """The transaction steps of one shard task attempt (a base of ``KafkaShardTask``)."""

    t: KafkaTarget
    epoch: int
    shard: int | None
    attempt: str  # this attempt's nonce
    producer: Producer | None
    txn_state: TxnState = TxnState.IDLE

    @property
    def where(self) -> str:
        return f"{self.t.query_name} epoch {self.epoch} shard {self.shard}"

    @property
    def in_transaction(self) -> bool:
        """A transaction was begun and not ended for sure: close() must abort it."""
        return self.txn_state is not TxnState.IDLE

    @in_transaction.setter
    def in_transaction(self, value: bool) -> None:
        self.txn_state = TxnState.OPEN if value else TxnState.IDLE

    @requires(TxnState.IDLE)
    def _begin(self) -> None:
        assert self.producer is not None
        self.producer.begin_transaction()
        self.txn_state = TxnState.OPEN

    def _produce_control(self, key: str, value: str, **kwargs: Any) -> None:
        assert self.producer is not None
        produce_waiting(
            self.producer,
            self.t.control_topic,
            value,
            key,
            partition=self.t.control_partition,
            **kwargs,
        )

    def _barrier(self) -> int:
        """Step 1: commit a small record to the control partition; return its offset."""
        assert self.producer is not None and self.shard is not None
        offsets: list[int] = []
        self._begin()
        self._produce_control(
            self._sync_key(),
            self.attempt,
            on_delivery=lambda err, msg: offsets.append(-1 if err else offset_of(msg)),
        )
        self.producer.flush(self.t.timeout_s)
        self._end_transaction("barrier")
        if not offsets or offsets[0] < 0:
            raise SinkUnavailableError(f"{self.where}: the control-topic barrier was not written")
        return offsets[0]

    def _sync_key(self) -> str:
        """The barrier's key: one per transactional id."""
        assert self.shard is not None
        return sync_key(self.t.query_name, self.t.sink_name, self.shard)

    def _earlier_attempts(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Step 2: (confirmation, commit marker) of this shard's epoch from earlier attempts.

        Reads the control partition from the head's ``scan_from`` up to a barrier record
        written now: after ``init_transactions``, anything an older attempt wrote is below
        it. read_committed only where the broker hides aborted records; elsewhere markers
        are not trusted at all, and the read never waits on open transactions.
        """
        assert self.shard is not None
        barrier = self._barrier()
        t = self.t
        marker_k = marker_key(t.query_name, t.sink_name, self.epoch, self.shard).encode()
        prefix = confirmation_key(t.query_name, t.sink_name, self.epoch, self.shard, "").encode()
        confirmed: dict[str, Any] | None = None
        marker: dict[str, Any] | None = None
        isolation = "read_committed" if t.hides_aborted else "read_uncommitted"
        client = consumer(t.bootstrap_servers, t.user_config(), isolation=isolation)
        try:
            ranges = {(t.control_topic, t.control_partition): (t.scan_from, barrier + 1)}
            for msg in drain(client, ranges, t.timeout_s, "the control topic"):
                key, value = msg.key(), msg.value()
                if key == marker_k:
                    marker = json.loads(value) if value else None
                elif key is not None and key.startswith(prefix) and value:
                    confirmed = json.loads(value)
        finally:
            client.close()
        return confirmed, marker

    def _committed_earlier(self) -> bool:
        """Steps 1-2: True when an earlier attempt committed the shard (confirmed now if it
        was not yet): this attempt then writes nothing."""
        confirmed, marker = self._earlier_attempts()
        if confirmed is not None:
            return True
        if marker is not None and self.t.hides_aborted:
            # Committed (this broker hides aborted markers) but not confirmed: confirm it.
            self._confirm(str(marker["attempt"]), marker)
            return True
        return False

    def _commit_shard(self, info: Mapping[str, Any]) -> None:
        """Step 3: the commit marker into the open data transaction, commit, then step 4."""
        assert self.shard is not None
        self._produce_control(
            marker_key(self.t.query_name, self.t.sink_name, self.epoch, self.shard),
            json.dumps(info),
        )
        self._end_transaction("data")
        crash_point("before_confirm", self.epoch)
        self._confirm(self.attempt, info)

    def _confirm(self, attempt: str, info: Mapping[str, Any]) -> None:
        """Step 4: record that ``attempt`` committed. Transactional, so a fenced zombie
        cannot."""
        assert self.shard is not None
        self._begin()
        self._produce_control(
            confirmation_key(self.t.query_name, self.t.sink_name, self.epoch, self.shard, attempt),
            json.dumps({**info, "attempt": attempt, "confirmed_by": self.attempt}),
        )
        self._end_transaction("confirmation")

    @requires(TxnState.OPEN)
    def _end_transaction(self, what: str) -> None:
        """Commit; a retriable error retries the commit, an abortable one aborts and fails
        the task, anything else is ambiguous and left for the next attempt to verify."""
        assert self.producer is not None
        producer = self.producer
        deadline = time.monotonic() + self.t.timeout_s

        def commit() -> None:
            producer.commit_transaction(max(1.0, deadline - time.monotonic()))

        def retried(exc: BaseException, retry: int, wait_s: float) -> None:
            log.warning("%s: %s commit retried: %s", self.where, what, exc.args[0].str())

        try:
            self.t.commit_policy().call(commit, on_retry=retried)
        except KafkaException as exc:
            self._commit_failed(what, exc.args[0])
        self.txn_state = TxnState.IDLE

    def _commit_failed(self, what: str, err: KafkaError) -> NoReturn:
        assert self.producer is not None
        if err.txn_requires_abort():
            with contextlib.suppress(KafkaException):
                self.producer.abort_transaction(self.t.timeout_s)
                self.txn_state = TxnState.IDLE
            raise SinkUnavailableError(
                f"{self.where}: {what} transaction aborted ({err.name()}: "
                f"{self.t.scrubbed(err.str())}); a re-run writes the shard again"
            ) from None
        self.txn_state = TxnState.UNKNOWN
        raise AmbiguousCommitError(
            f"{self.where}: {what} commit outcome unknown ({err.name()}: "
            f"{self.t.scrubbed(err.str())}); the next attempt verifies it in the "
            "control topic"
        ) from None

    def _abort_open(self) -> None:
        """On close: nothing of an open transaction may become visible as confirmed."""
        producer, self.producer = self.producer, None
        if producer is not None and self.in_transaction:
            with contextlib.suppress(Exception):
                producer.abort_transaction(10)
            self.txn_state = TxnState.IDLE
