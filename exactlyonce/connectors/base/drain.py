"""The drain-target contract: what the drainer needs from a sink, whatever the sink.

A drainer (:mod:`.drainer`) reads the buffer in chunks and hands each writer's SHARE of a chunk
to that writer's target (:class:`DrainTarget`, one connection each). A target writes the
share's records, has the share's dead letters sent, and stores the consumed offsets: as one
step, so that after a crash anywhere the stored offsets say exactly which records are in the
sink. Two ways to make that true; every target states its way in its class docstring:

- ATOMIC: the records and the offsets are written in the same atomic step (a PostgreSQL
  transaction, one Redis Lua script): a crash leaves both or neither;
- IDEMPOTENT, THEN OFFSETS: the sink has no atomic step across records (Elasticsearch), so
  every record is written under its record ID, where a second write is a no-op (``create``
  answers 409); the offsets are written only after every record was acknowledged. A crash
  before the offsets re-sends the share; the re-sent records change nothing.

Offsets compare-and-set: each target keeps ``held``, the offsets of its own partitions as it
last read or wrote them, and writes new offsets only if the stored ones still equal ``held``.
If they moved (another drainer of the same partitions, or this drainer's own commit whose reply
was lost), the write raises :class:`~exactlyonce.errors.OffsetsMovedError`, and the drainer
re-reads the offsets from the sink and resumes from there: it never writes over them.

Who calls what: the drainer calls :meth:`~DrainTarget.ensure` and
:meth:`~DrainTarget.read_offsets` on every (re)start and after every failure,
:meth:`~DrainTarget.write_share` per chunk from its writer threads (one thread per target at a
time), :meth:`~DrainTarget.reset_offsets` when asked to start over, and
:meth:`~DrainTarget.close` after a failure and at the end. ``close`` is not guaranteed to be
called: a SIGKILL leaves the sink as the last completed step left it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from exactlyonce.connectors.base.frames import FrameRecord, split_ids, value_problem

Letter = tuple[Any, str]  # (the Kafka message, or a FrameRecord; why it is a dead letter)


@dataclass(slots=True)
class DrainRow:
    """One buffered record on its way to the sink. ``source`` is the Kafka message."""

    partition: int
    record_id: bytes  # 32 hex digits
    epoch: int
    value: bytes
    source: Any = field(repr=False)


@dataclass
class Chunk:
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

    def records(self, where: list[int]) -> Iterator[tuple[int, int, bytes, bytes]]:
        """``(i, k, record ID, value)`` of every record of the messages at ``where``: ``i``
        the message's position in the chunk, ``k`` the record's place in its frame (-1 for a
        message of one record). A frame is split into its lines and IDs here."""
        for i in where:
            if not self.frames[i]:
                yield i, -1, self.ids[i], self.values[i]
                continue
            lines = self.values[i].split(b"\n")
            for k, (line, rid) in enumerate(zip(lines, split_ids(self.ids[i]), strict=True)):
                yield i, k, rid, line

    def source(self, i: int, k: int, record_id: bytes, value: bytes) -> Any:
        """What a record of :meth:`records` is dead-lettered as: its message, or for a
        record of a frame a :class:`FrameRecord` (its own value, ID and place)."""
        return self.messages[i] if k < 0 else FrameRecord(self.messages[i], k, record_id, value)

    def rows_of(self, where: list[int]) -> tuple[list[DrainRow], list[tuple[Any, str]]]:
        """The records of the messages at ``where`` as rows for the exact path, and the values
        that cannot be a row at all (with why). A frame's records are looked at one by one."""
        rows, bad = [], []
        for i, k, rid, value in self.records(where):
            source = self.source(i, k, rid, value)
            problem = value_problem(value)  # the exact path: the precise look at every value
            if problem:
                bad.append((source, problem))
                continue
            rows.append(DrainRow(self.partitions[i], rid.lower(), self.epochs[i], value, source))
        return rows, bad


Counts = tuple[int, int, int]  # written, duplicates, dead letters


@dataclass(frozen=True)
class Share:
    """One writer's share of a chunk: what :meth:`DrainTarget.write_share` writes.

    ``where``: the positions in ``chunk`` of the share's messages (a frame, or one record);
    ``bad``: the share's messages already found unwritable (dead letters with why);
    ``positions``: the offsets the drainer holds now; ``ends``: the chunk's ends, the new
    offsets of every partition the chunk read. ``dead_letter`` sends dead letters (it raises
    if they were not all written); ``n`` numbers the chunk (the crash points count it).
    """

    n: int
    chunk: Chunk
    where: list[int]
    bad: list[Letter]
    positions: Mapping[int, int]
    ends: Mapping[int, int]
    dead_letter: Callable[[list[Letter]], None]

    @property
    def offsets(self) -> dict[int, int]:
        """The offsets after this chunk (a target keeps those of the partitions it owns)."""
        return {**self.positions, **self.ends}


class TargetClassDefaults:
    """What a drain target class says of its sink before any target exists, by default
    (``check_target``, ``exactlyonce check``): every mode of the sink is drained, and the
    offsets' storage needs nothing created (a target whose storage is created at the
    drainer's start, PostgreSQL's table, overrides ``offsets_stored``). ``guarantee(sink)``
    each target states itself."""

    @staticmethod
    def check(sink: Any) -> None:
        """Refuse (ConfigError, field ``buffer``) a mode of ``sink`` the drainer does not
        keep exactly-once."""
        return None

    @staticmethod
    def offsets_stored(sink: Any) -> bool:
        """Whether the storage of the drain offsets exists (read-only)."""
        return True


class DrainTarget(Protocol):
    """A sink as the drainer writes it; see the module docstring for the obligations.

    ``held`` is the target's view of its own partitions' stored offsets (partition -> next
    offset), set by :meth:`read_offsets` and moved by each successful :meth:`write_share`.
    """

    held: dict[int, int]

    @property
    def where(self) -> str:
        """The destination, for messages (never a credential)."""
        ...

    def owns(self, partition: int) -> bool:
        """Whether this target writes ``partition``'s records and offsets."""
        ...

    def ensure(self) -> None:
        """Prepare the sink (offsets storage, indices...). A sink that is not ready yet (its
        table not created) raises :class:`~exactlyonce.errors.SinkUnavailableError`, which the
        drainer retries; a sink that can never work raises a ConfigError."""
        ...

    def read_offsets(self) -> dict[int, int]:
        """Every partition's stored offset (partition -> next offset) as the sink holds it
        now (never a cache); keeps its own partitions' as ``held``."""
        ...

    def reset_offsets(self) -> int:
        """Forget every stored offset of this (query, sink, topic), not the data; returns how
        many partitions' offsets went. ``held`` is emptied. A target for which that means
        writing records a second time may refuse (ConfigError, nothing forgotten): a
        PostgreSQL table in mode append."""
        ...

    def write_share(self, share: Share) -> Counts:
        """Write the share's records, send its dead letters (before the offsets are stored),
        and store the offsets of the partitions this target owns, as one step (ATOMIC or
        IDEMPOTENT, THEN OFFSETS: see the class). Passes the ``drain_mid_write`` crash point
        with part of the step done. Raises OffsetsMovedError when the stored offsets are not
        ``held``; on any failure nothing of the offsets moved. Returns (written, duplicates,
        dead letters)."""
        ...

    def close(self) -> None:
        """Drop the connection (an open step rolls back). Safe to call twice; the target
        reconnects when used again."""
        ...


def owned(target: DrainTarget, offsets: Mapping[int, int]) -> dict[int, int]:
    """The offsets of the partitions ``target`` owns."""
    return {p: o for p, o in offsets.items() if target.owns(p)}


@dataclass(frozen=True)
class Ownership:
    """Which partitions a target owns: member ``i`` of ``n`` drainers owns ``p % n == i``;
    its writer ``w`` of ``k``, of those, ``p // n % k == w``."""

    writer: int = 0
    writers: int = 1
    member: int = 0
    members: int = 1

    def owns(self, partition: int) -> bool:
        return (
            partition % self.members == self.member
            and partition // self.members % self.writers == self.writer
        )


__all__ = [
    "Chunk",
    "Counts",
    "DrainRow",
    "DrainTarget",
    "Letter",
    "Ownership",
    "Share",
    "TargetClassDefaults",
    "owned",
]
