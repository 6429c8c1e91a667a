"""What ``exactlyonce rewind`` asks of a sink: :class:`Removal`, the records above an epoch.

A rewind moves a query's head back to an epoch N and removes what the query wrote above N,
so that a re-run of those epochs writes each record once again. A sink can do it only where
every record it wrote carries its epoch and removing it restores the state before it (an
insert, an append); where it cannot, its ``rewind_refusal`` says why, and nothing changes.

The sink's part is a :class:`Rewind` object that
:meth:`~exactlyonce.connectors.base.sink.ExactlyOnceSink.rewinder` composes from the sink's
public parts (its package's ``rewind`` module; it opens its own connections); the command,
the catalog and the Spark checkpoint are :mod:`exactlyonce.integration`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from exactlyonce.errors import ConfigError


@dataclass(frozen=True)
class Removal:
    """Records of one kind in one place above an epoch: how many per epoch.

    ``what`` names them (``"rows of public.events"``, ``"dead letters"``, ``"shard
    commits"``); ``per_epoch`` maps epoch -> count (epochs without any left out).
    """

    what: str
    per_epoch: dict[int, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.per_epoch.values())

    def to_json(self) -> dict[str, object]:
        return {
            "what": self.what,
            "total": self.total,
            "per_epoch": {str(e): n for e, n in sorted(self.per_epoch.items())},
        }


def count_by_epoch(epochs: list[int], above: int) -> dict[int, int]:
    """``epochs`` (one per record) counted per epoch, those above ``above`` only."""
    counts: dict[int, int] = {}
    for epoch in epochs:
        if epoch > above:
            counts[epoch] = counts.get(epoch, 0) + 1
    return counts


class Rewind(Protocol):
    """A sink's records by epoch, as ``exactlyonce rewind`` and ``exactlyonce heads`` see
    them. Called by the CLI only, never while the query runs; each method opens (and
    closes) the connections it needs."""

    def refusal(self) -> str | None:
        """Why this sink cannot remove its records above an epoch exactly (None: it can)."""
        ...

    def shard_commits(self) -> dict[int, list[int]] | None:
        """Shard-commit markers the destination still holds (epoch -> shards), i.e. those of
        epochs above the head; read-only. None when the sink cannot list them cheaply."""
        ...

    def removals_above(self, epoch: int) -> list[Removal]:
        """What :meth:`rewind_to` would remove (read-only): per kind of record, per epoch."""
        ...

    def rewind_to(self, epoch: int) -> list[Removal]:
        """Remove every record of the epochs above ``epoch`` (data, dead letters, shard
        commits), then move the head back to ``epoch`` with its Spark query id cleared
        (:meth:`~exactlyonce.connectors.base.head.HeadStore.rewind_head`), in that order or in
        one atomic step; returns what was removed. Idempotent: a rewind cut short by a crash
        is finished by running it again. Only on a user's explicit request."""
        ...


class Named(Protocol):
    @property
    def sink_name(self) -> str: ...


P = TypeVar("P", bound=Named)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewindOf(Generic[P]):
    """A :class:`Rewind` made of a sink package's ``rewind`` functions over the sink's
    public parts (each opens its own connections), as
    :class:`~exactlyonce.connectors.base.guarantee.CheckOf` is for ``check``."""

    sink: P
    refusal_of: Callable[[P], str | None]
    shard_commits_of: Callable[[P], dict[int, list[int]]]
    removals_of: Callable[[P, int], list[Removal]]
    rewind: Callable[[P, int], list[Removal]]

    def refusal(self) -> str | None:
        return self.refusal_of(self.sink)

    def shard_commits(self) -> dict[int, list[int]] | None:
        return self.shard_commits_of(self.sink)

    def removals_above(self, epoch: int) -> list[Removal]:
        return self.removals_of(self.sink, epoch)

    def rewind_to(self, epoch: int) -> list[Removal]:
        removed = self.rewind(self.sink, epoch)
        log.warning("%s: head rewound to epoch %d", self.sink.sink_name, epoch)
        return removed


@dataclass(frozen=True)
class Refused:
    """The :class:`Rewind` of a sink that cannot remove its records by epoch: ``reason``
    says why; lists nothing, removes nothing."""

    reason: str

    def refusal(self) -> str | None:
        return self.reason

    def shard_commits(self) -> dict[int, list[int]] | None:
        return None

    def removals_above(self, epoch: int) -> list[Removal]:
        raise ConfigError("rewind", self.reason)

    def rewind_to(self, epoch: int) -> list[Removal]:
        raise ConfigError("rewind", self.reason)


__all__ = ["Refused", "Removal", "Rewind", "RewindOf", "count_by_epoch"]
