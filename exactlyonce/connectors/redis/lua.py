"""The sink's Lua scripts, read from ``scripts/*.lua`` (package data) once, on import.

Each file's header comment says its KEYS, ARGV and reply. :data:`RECORDS` (``records.lua``,
how records are applied) is no script of its own: it goes in front of the scripts that apply
records, the sink's :data:`APPLY` and the buffer drainer's (:func:`with_records`).
"""

from __future__ import annotations

from importlib.resources import files


def _load(name: str) -> str:
    return (
        files(__package__).joinpath("scripts").joinpath(f"{name}.lua").read_text(encoding="utf-8")
    )


RECORDS = _load("records")
"""``eo_records``: how records are applied (hash, string, stream; TTL; dead letters)."""


def with_records(script: str) -> str:
    """``script`` with :data:`RECORDS` in front: it may call ``eo_records``."""
    return RECORDS + "\n" + script


APPLY = with_records(_load("apply"))
"""One task's shards, atomically: checks, markers, records, dead letters (executor side)."""
ADVANCE = _load("advance")
"""The head moves to an epoch; spent shard markers and leftover staging go (driver side)."""
CREATE_HEAD = _load("create_head")
"""The head, created unless it exists (driver side)."""
REWIND = _load("rewind")
"""The head moves back to an epoch; shard markers and staging above it go (exactlyonce
rewind)."""
FRONTIER = with_records(_load("frontier"))
"""Spark Real-time Mode: one chunk of rows and its source frontiers, atomically (executor
side)."""
