"""The soak's input: ``events`` distinct events as an at-least-once producer sends them,
with at least ``replay_fraction`` of them sent again.

``exactlyonce chaos --events N`` writes the demo's input
(:mod:`exactlyonce.integration.lab.events`): 8% retries and 3 replayed blocks of 150-400
events, so about 9% re-sent records at 100,000 events (13% at 20,000). The soak wants at
least 20%: it starts from the same plan and re-sends more blocks of earlier records (a
producer restarted from an old position) until the re-sent records reach ``replay_fraction``
of the distinct events. The files are JSON lines named ``soak-part-*``, which chaos reads as
the user's own input (its expected IDs, the null keys as dead letters).

A cell whose pipeline reads a Kafka source (``pg-ks-source``, ``pg-ks-columns``) gets its
input from chaos itself (``--events N``: the demo's plan, produced into a fresh topic):
:func:`produced_input` says what that plan holds, without the extra replays (about 9%
re-sent at 100,000 events).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from exactlyonce.integration.lab.events import generate

FILE_PREFIX = "soak-part-"
EXTRA_BLOCK = (0.005, 0.02)  # records per extra replayed block, as a share of the events


@dataclass(frozen=True)
class SoakInput:
    """What was written: distinct events, records sent, re-sent records, null keys, files
    (or, for a Kafka source, the batches its runs read them in)."""

    events: int
    records: int
    resent: int
    null_keys: int
    files: int
    unit: str = "files"

    @property
    def replay_fraction(self) -> float:
        """Re-sent records per distinct event."""
        return self.resent / self.events if self.events else 0.0

    def describe(self) -> str:
        return (
            f"{self.events} events, {self.records} records "
            f"({self.resent} re-sent: {self.replay_fraction:.0%}, {self.null_keys} null keys) "
            f"in {self.files} {self.unit}"
        )


def write_input(
    directory: Path, events: int, seed: int, files: int, replay_fraction: float
) -> SoakInput:
    """The seeded input in ``directory`` (created; must hold no other file)."""
    rng = random.Random(seed)
    plan = generate(rng, events)
    records = list(plan.records)
    resent = plan.retries + plan.replayed
    while resent < replay_fraction * events:
        low, high = (max(1, int(f * events)) for f in EXTRA_BLOCK)
        size = min(rng.randint(low, high), len(records))
        begin = rng.randrange(len(records) - size + 1)
        at = rng.randrange(begin + size, len(records) + 1)  # sent again later, never earlier
        block = [dict(r) for r in records[begin : begin + size] if r["event_id"] is not None]
        records[at:at] = block
        resent += len(block)
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise SystemExit(f"soak: {directory} is not empty")
    per_file = -(-len(records) // max(1, files))
    written = 0
    for n, start in enumerate(range(0, len(records), per_file)):
        chunk = records[start : start + per_file]
        tmp = directory / f".{FILE_PREFIX}{n:05d}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in chunk))
        tmp.rename(directory / f"{FILE_PREFIX}{n:05d}.json")
        written += 1
    nulls = sum(1 for r in records if r["event_id"] is None)
    return SoakInput(events, len(records), resent, nulls, written)


def produced_input(events: int, seed: int, batches: int) -> SoakInput:
    """What ``exactlyonce chaos --events`` produces into a Kafka source for ``seed`` (the
    same plan, from the same seed), read in about ``batches`` batches."""
    plan = generate(random.Random(seed), events)
    nulls = sum(1 for r in plan.records if r["event_id"] is None)
    resent = plan.retries + plan.replayed
    unit = "batches from a Kafka topic (chaos --events)"
    return SoakInput(events, len(plan.records), resent, nulls, batches, unit)


def records_per_batch(made: SoakInput) -> int:
    """The source's ``max_offsets_per_trigger`` that reads ``made`` in its batches."""
    return max(1, -(-made.records // max(1, made.files)))
