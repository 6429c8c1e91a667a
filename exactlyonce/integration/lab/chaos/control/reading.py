"""What an independent reader found, and its tally against what was expected.

A :class:`Reading` is the count of records per key that a plain client (psycopg SQL, raw
RESP, kafka-python ``read_committed``, raw HTTP) read back from a :class:`~.target.Target`.
:func:`tally` compares it with the expected keys:

- for our sink every expected key must be there once: a second record of a key is a
  duplicate;
- for the control (a plain at-least-once writer) each key may be there as often as the
  input SENT it (``sent``): the control writes re-sent records again, by design, so only
  the writes beyond that, the re-runs' writes, are duplicates.

Keys are compared as text (a key value as Spark casts it to a string).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from exactlyonce.connectors.base.expected import Expected, spark_text
from exactlyonce.integration.lab.chaos.control.target import Key

NAMED = 20  # keys named per kind in the JSON


@dataclass
class Reading:
    """Records per key found at ``target`` by ``reader``; ``nulls``: records without a key;
    ``rewritten``: records written more than once in place (Elasticsearch ``_version`` > 1)."""

    reader: str
    target: str
    found: Counter[Key]
    nulls: int = 0
    rewritten: int = 0


@dataclass
class Tally:
    """A reading against the expected keys (and, for the control, the records sent)."""

    reading: Reading
    expected: int
    duplicate_keys: dict[Key, int] = field(default_factory=dict)  # key -> writes too many
    missing_keys: list[Key] = field(default_factory=list)
    unexpected_keys: list[Key] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return sum(self.duplicate_keys.values())

    @property
    def ok(self) -> bool:
        return not (self.duplicate_keys or self.missing_keys or self.unexpected_keys)

    def json(self) -> dict[str, Any]:
        return {
            "reader": self.reading.reader,
            "target": self.reading.target,
            "expected_ids": self.expected,
            "read": sum(self.reading.found.values()),
            "distinct_ids": len(self.reading.found),
            "duplicates": self.duplicates,
            "missing": len(self.missing_keys),
            "unexpected": len(self.unexpected_keys),
            "without_key": self.reading.nulls,
            "rewritten": self.reading.rewritten,
            "duplicate_ids": {_name(k): n for k, n in sorted(self.duplicate_keys.items())[:NAMED]},
            "missing_ids": [_name(k) for k in self.missing_keys[:NAMED]],
            "unexpected_ids": [_name(k) for k in self.unexpected_keys[:NAMED]],
        }


def expected_keys(expected: Expected) -> set[Key]:
    return {tuple(spark_text(v) for v in values) for values in expected.values()}


def tally(reading: Reading, expected: set[Key], sent: Counter[Key] | None = None) -> Tally:
    """``reading`` against ``expected``; with ``sent``, a key may be found as often as it was
    sent (the control), else once (our sink)."""
    out = Tally(reading, len(expected))
    for key, n in reading.found.items():
        if key not in expected:
            out.unexpected_keys.append(key)
            continue
        allowed = 1 if sent is None else max(1, sent.get(key, 1))
        if n > allowed:
            out.duplicate_keys[key] = n - allowed
    out.missing_keys = sorted(k for k in expected if k not in reading.found)
    out.unexpected_keys.sort()
    return out


def _name(key: Key) -> str:
    return key[0] if len(key) == 1 else "|".join(key)
