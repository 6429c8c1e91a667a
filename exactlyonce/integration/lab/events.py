"""The seeded input of the demo (and of ``exactlyonce chaos --events``, and the soak
benchmark), planned up front from a seed (Kafka is replayable, so the expected set is known):
the events an at-least-once producer sends, in send order, duplicates included.

Two kinds of duplicate, as a producer without idempotence makes them: a *retry* (an event
whose acknowledgement was "lost" is sent again a few sends later, at a later offset) and a
*replay* (a producer restarted from an old position sends a block of earlier events again).
``NULL_KEYS`` records have a null ``event_id``: bad records the sinks must dead-letter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from exactlyonce.dedup.ids import record_id

RETRY_RATE = 0.08  # share of events sent a second time, 1-30 sends later
REPLAYS = 3  # blocks of earlier events sent again
REPLAY_BLOCK = (150, 400)  # events per replayed block
NULL_KEYS = 3
FIELDS = ("event_id", "user_id", "action", "ts")
ACTIONS = ("view", "click", "cart", "buy", "share")

Record = dict[str, Any]


@dataclass(frozen=True)
class Plan:
    """The records in send order, and how many of them are retries and replays."""

    records: list[Record]
    retries: int
    replayed: int


def generate(rng: random.Random, events: int) -> Plan:
    """``events`` distinct events, sent in order with retries, replays and null keys mixed in.

    Deterministic from ``rng``'s state. Every duplicate is a whole earlier record."""
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    fresh = [_record(f"evt-{n:07d}", rng, start + timedelta(seconds=n)) for n in range(events)]
    replay_at = sorted(rng.sample(range(events // 4, events), REPLAYS)) if events >= 8 else []
    sent: list[Record] = []
    pending: dict[int, list[Record]] = {}  # retries due at a later send
    retries = replayed = 0
    for n, record in enumerate(fresh):
        sent.append(record)
        if rng.random() < RETRY_RATE:
            pending.setdefault(n + rng.randint(1, 30), []).append(record)
        for again in pending.pop(n, []):
            sent.append(dict(again))
            retries += 1
        if n in replay_at:
            size = min(rng.randint(*REPLAY_BLOCK), len(sent))
            begin = rng.randrange(len(sent) - size + 1)
            sent.extend(dict(r) for r in sent[begin : begin + size])
            replayed += size
    for later in pending.values():  # retries due past the last event
        sent.extend(dict(r) for r in later)
        retries += len(later)
    for i in range(NULL_KEYS):
        sent.insert(rng.randrange(len(sent) + 1), _record(None, rng, start, salt=i))
    return Plan(sent, retries, replayed)


def _record(event_id: str | None, rng: random.Random, ts: datetime, salt: int = 0) -> Record:
    return {
        "event_id": event_id,
        "user_id": rng.randrange(1, 5000) + salt,
        "action": rng.choice(ACTIONS),
        "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


@dataclass(frozen=True)
class Expected:
    """What each sink must hold once the input is written exactly once."""

    records: int
    ids: set[str]
    null_keys: int
    retries: int
    replayed: int

    @classmethod
    def of(cls, plan: Plan) -> Expected:
        keys = [r["event_id"] for r in plan.records]
        return cls(
            records=len(keys),
            ids={record_id([k]) for k in keys if k is not None},
            null_keys=keys.count(None),
            retries=plan.retries,
            replayed=plan.replayed,
        )

    @property
    def duplicates(self) -> int:
        return self.records - self.null_keys - len(self.ids)

    def describe(self) -> str:
        return (
            f"input: {self.records} records, {len(self.ids)} distinct IDs, {self.duplicates} "
            f"duplicates ({self.retries} retries, {self.replayed} replayed), "
            f"{self.null_keys} null keys"
        )
