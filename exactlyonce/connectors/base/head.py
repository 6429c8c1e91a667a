"""The sink head: what the destination durably says was committed, and how it is kept.

Every sink keeps its head in the destination itself (a row, a document, a hash, a compacted
control-topic record), next to the data, and reads it back on every (re)start. The driver is
the only writer of a head; executor tasks write shard-commit markers, never the head.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

NO_EPOCH = -1


@dataclass(frozen=True)
class Head:
    """What the destination durably says was committed for one (query, sink)."""

    epoch: int
    spark_query_id: str | None
    num_shards: int
    # When the head was last written (seconds since the epoch; advanced, created, rewound,
    # and in PostgreSQL also when a query id was bound), as the destination stores it; None
    # for a head written before the store kept one. Informative only: never compared.
    advanced_at: float | None = field(default=None, compare=False)

    def covers(self, epoch: int) -> bool:
        """Whether ``epoch`` was committed whole: at or below the head, it is skipped."""
        return epoch <= self.epoch


class HeadStore(Protocol):
    """Where a sink keeps its head. :class:`~exactlyonce.connectors.base.sink.ExactlyOnceSink`
    calls these in the driver only, in this order: ``read_head`` once per query start,
    ``create_head`` when there is none, ``bind_query_id`` when the head has no Spark query id
    yet, then ``advance_head`` once per epoch after every task of it committed.
    ``reset_head`` runs only on a user's explicit request (``exactlyonce reset-head``), never
    while the query runs. A sink returns its store from ``ExactlyOnceSink.head_store()``.

    Obligations (each is a way real systems lost or doubled data):

    - **durable before it returns**: a method that returned has changed the destination, so a
      driver SIGKILLed right after it finds the change on restart;
    - **idempotent**: every method may be called again after a crash or a lost reply and
      must leave the same state (``create_head`` does not overwrite an existing head;
      ``advance_head`` to an epoch the head already reached changes nothing);
    - **monotonic**: ``advance_head`` never moves the head backwards, even when an older
      driver or a re-run calls it late; only ``reset_head`` forgets, and only
      ``rewind_head`` moves it back;
    - **shard commits go with the head**: ``advance_head`` drops shard-commit markers at or
      below the new epoch, in the same atomic step where the destination allows it, and
      never drops markers above it (an epoch that is still being written needs them).
    """

    def read_head(self) -> Head | None:
        """The head as the destination has it now; None before the query's first epoch.
        Never from a cache: this is what a restart trusts."""
        ...

    def create_head(self, head: Head) -> None:
        """Create the head at ``NO_EPOCH`` with the shard count and Spark query id of the
        query's first start. If one exists (a racing start), leave it as it is."""
        ...

    def bind_query_id(self, spark_query_id: str) -> None:
        """Record the Spark query id on a head that has none (one written by an older
        version or a start without Spark). Never replaces an id already there: a different
        id is a reset checkpoint (DESIGN invariant 9), which the caller refuses."""
        ...

    def advance_head(self, epoch: int, spark_query_id: str | None) -> None:
        """Move the head to ``epoch`` after every shard of it committed. Monotonic and
        idempotent (see the class docstring); drops shard-commit markers at or below it."""
        ...

    def reset_head(self) -> None:
        """Forget the head and the shard commits of this (query, sink), not the data: for a
        deliberate fresh start. Only ever on a user's explicit request."""
        ...


class RewindableHeadStore(HeadStore, Protocol):
    """A head store that can also move back (``exactlyonce rewind``): the sinks whose records
    can be removed by epoch. Same obligations as :class:`HeadStore`."""

    def rewind_head(self, epoch: int) -> None:
        """Move the head back to ``epoch`` (``NO_EPOCH`` allowed) and clear its Spark query id,
        so the next run binds its own (a rewound checkpoint keeps its id, a new one brings a
        new id: either is accepted once). Drops the shard-commit markers above ``epoch``.

        Only for ``exactlyonce rewind``, after the records of the epochs above ``epoch`` were
        removed from the destination (or in the same atomic step): a head moved back over
        records still there would make the re-run write them a second time. Durable and
        idempotent like the others; never moves the head forward (a head at or below
        ``epoch`` is left as it is, markers above it still dropped)."""
        ...
