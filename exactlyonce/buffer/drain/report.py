"""What a drain did: :class:`DrainReport`, summed over chunks, calls and a drainer's life."""

from __future__ import annotations

from dataclasses import dataclass


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
