"""The drain target of a sink: which :class:`~exactlyonce.buffer.drain.target.DrainTarget`
writes it, picked from the sink's type (see :func:`exactlyonce.buffer.buffered.check_target`
for the sinks and modes a buffer drains into)."""

from __future__ import annotations

from exactlyonce.buffer.buffered import check_target
from exactlyonce.buffer.drain.target import DrainTarget
from exactlyonce.connectors.elasticsearch import ElasticsearchSink
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.connectors.redis import RedisSink


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
    if isinstance(sink, PostgresSink):
        from exactlyonce.buffer.drain.postgres_target import PgDrainTarget

        return PgDrainTarget(sink, topic, application_name, writer, writers, member)
    if isinstance(sink, RedisSink):
        from exactlyonce.buffer.drain.redis_target import RedisDrainTarget

        return RedisDrainTarget(sink, topic, application_name, writer, writers, member)
    if isinstance(sink, ElasticsearchSink):
        from exactlyonce.buffer.drain.es_target import EsDrainTarget

        return EsDrainTarget(sink, topic, application_name, writer, writers, member)
    raise AssertionError(f"check_target let {type(sink).__name__} through")  # pragma: no cover


__all__ = ["target_for"]
