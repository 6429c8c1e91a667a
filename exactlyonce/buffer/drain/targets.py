"""The drain target of a sink: the class its registry entry names (``drain``), built for one
writer of one drainer member (see :func:`exactlyonce.connectors.kafka.buffer.check_target` for the
sinks and modes a buffer drains into)."""

from __future__ import annotations

from typing import cast

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.drain import DrainTarget
from exactlyonce.connectors.kafka.buffer import check_target


def target_for(
    sink: object,
    topic: str,
    application_name: str = "",
    writer: int = 0,
    writers: int = 1,
    member: tuple[int, int] = (0, 1),
) -> DrainTarget:
    """The drain target writing ``sink`` for the buffer ``topic``: writer ``writer`` of
    ``writers`` of drainer member ``member`` (index, members). ``application_name`` names the
    connection where the sink shows one (PostgreSQL's ``pg_stat_activity``)."""
    sink = check_target(sink)
    target_class = registry.kind_of(sink).drain_target()
    assert target_class is not None, "check_target lets only drained sinks through"
    target = target_class(sink, topic, application_name, writer, writers, member)
    return cast(DrainTarget, target)


__all__ = ["target_for"]
