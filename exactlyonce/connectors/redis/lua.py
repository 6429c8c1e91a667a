"""The sink's Lua scripts, read from ``scripts/*.lua`` (package data) once, on import.

Each file's header comment says its KEYS, ARGV and reply.
"""

from __future__ import annotations

from importlib.resources import files


def _load(name: str) -> str:
    return (
        files(__package__).joinpath("scripts").joinpath(f"{name}.lua").read_text(encoding="utf-8")
    )


APPLY = _load("apply")
"""One task's shards, atomically: checks, markers, records, dead letters (executor side)."""
ADVANCE = _load("advance")
"""The head moves to an epoch; spent shard markers and leftover staging go (driver side)."""
CREATE_HEAD = _load("create_head")
"""The head, created unless it exists (driver side)."""
