"""The expected-ID file of ``exactlyonce audit``: one record per line, its key value (a bare
value) or its key values (a JSON array, in ``id_columns`` order). Each line's record ID is
computed as the sink computes it (:func:`exactlyonce.dedup.ids.record_id`); the key values
are kept to name IDs in the report and to render Redis keys."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from exactlyonce.dedup.ids import record_id

Expected = dict[str, list[Any]]  # record ID (32 hex digits) -> the record's key values


def read_expected(path: str | os.PathLike[str]) -> Expected:
    """Record ID -> key values of every line of the file (blank lines skipped)."""
    expected: Expected = {}
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line:
            continue
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError:
            parsed = line
        values = parsed if isinstance(parsed, list) else [parsed]
        expected[record_id(values)] = values
    return expected


def spark_text(value: Any) -> str:
    """A key value as Spark casts it to a string (what a Redis key template is filled with):
    exact for strings, integers and booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
