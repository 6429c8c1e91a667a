"""The demo's input, generated up front from a seed (a replayable source, so the expected set
is known): JSON-lines files in which about a quarter of the records repeat an earlier one and
a few have a null ``event_id`` (dead letters)."""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from exactlyonce.dedup.ids import record_id

DUPLICATE_RATE = 0.25
NULL_KEYS = 3
FIELDS = ("event_id", "user_id", "action", "ts")
ACTIONS = ("view", "click", "cart", "buy", "share")

Record = dict[str, Any]


def generate(rng: random.Random, files: int, rows_per_file: int) -> list[list[Record]]:
    """Records per file. A duplicate repeats a whole earlier record, from the same file or an
    earlier one; ``NULL_KEYS`` records with a null key are mixed in at random places."""
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    earlier: list[Record] = []
    out: list[list[Record]] = []
    n = 0
    for _ in range(files):
        batch: list[Record] = []
        for _ in range(rows_per_file):
            pool = batch if batch and (not earlier or rng.random() < 0.5) else earlier
            if pool and rng.random() < DUPLICATE_RATE:
                batch.append(dict(rng.choice(pool)))
            else:
                batch.append(_record(f"evt-{n:07d}", rng, start + timedelta(seconds=n)))
                n += 1
        out.append(batch)
        earlier.extend(_first_of_each(batch, earlier))
    for i in range(NULL_KEYS):
        target = out[rng.randrange(len(out))]
        target.insert(rng.randrange(len(target) + 1), _record(None, rng, start, salt=i))
    return out


def _first_of_each(batch: list[Record], earlier: list[Record]) -> list[Record]:
    known = {r["event_id"] for r in earlier}
    fresh = []
    for r in batch:
        if r["event_id"] not in known:
            known.add(r["event_id"])
            fresh.append(r)
    return fresh


def _record(event_id: str | None, rng: random.Random, ts: datetime, salt: int = 0) -> Record:
    return {
        "event_id": event_id,
        "user_id": rng.randrange(1, 5000) + salt,
        "action": rng.choice(ACTIONS),
        "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_files(input_dir: Path, files: list[list[Record]]) -> None:
    """Each file is written beside the directory, then renamed in: Spark never sees half."""
    staging = input_dir.with_name(input_dir.name + ".staging")
    staging.mkdir(parents=True, exist_ok=True)
    input_dir.mkdir(parents=True, exist_ok=True)
    for i, records in enumerate(files):
        name = f"part-{i:05d}.json"
        tmp = staging / name
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        os.rename(tmp, input_dir / name)
    staging.rmdir()


@dataclass(frozen=True)
class Expected:
    """What the sink must hold once the input is written exactly once."""

    files: int
    records: int
    ids: set[str]
    null_keys: int

    @classmethod
    def of(cls, files: list[list[Record]]) -> Expected:
        keys = [r["event_id"] for batch in files for r in batch]
        ids = {record_id([k]) for k in keys if k is not None}
        return cls(files=len(files), records=len(keys), ids=ids, null_keys=keys.count(None))

    def describe(self) -> str:
        duplicates = self.records - self.null_keys - len(self.ids)
        return (
            f"input: {self.files} files, {self.records} records, {len(self.ids)} distinct IDs, "
            f"{duplicates} duplicates, {self.null_keys} null keys"
        )
