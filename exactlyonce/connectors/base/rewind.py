"""What ``exactlyonce rewind`` asks of a sink: :class:`Removal`, the records above an epoch.

A rewind moves a query's head back to an epoch N and removes what the query wrote above N,
so that a re-run of those epochs writes each record once again. A sink can do it only where
every record it wrote carries its epoch and removing it restores the state before it (an
insert, an append); where it cannot, its ``rewind_refusal`` says why, and nothing changes.

The sink's part (:meth:`~exactlyonce.connectors.base.sink.ExactlyOnceSink.removals_above`,
``rewind_to``, ``shard_commits``) lives in each sink's package; the command, the catalog
and the Spark checkpoint are :mod:`exactlyonce.integration`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


__all__ = ["Removal", "count_by_epoch"]
