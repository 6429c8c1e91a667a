"""Pipeline files the tests hand to the CLI."""

from __future__ import annotations

from pathlib import Path

BUFFERED_PIPELINE = """\
query_name: {name}
checkpoint: {workdir}/checkpoint
source: {{type: files, format: json, path: {workdir}/input, schema: "{schema}"}}
sink:
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  id_columns: [event_id]
  buffer:
    topic: {name}
    bootstrap_servers: ${{KAFKA_BOOTSTRAP_SERVERS}}
    partitions: {partitions}
{shards}{frames}    batch_size: {batch_size}
"""


def buffered_pipeline(
    name: str,
    workdir: Path,
    *,
    schema: str,
    partitions: int,
    batch_size: int,
    shards: int | None = None,
    frame_records: int | None = None,
) -> str:
    """A JSON-files -> PostgreSQL pipeline with a Kafka buffer; table, query and topic are
    ``name``, the input is ``<workdir>/input``. ``frame_records``: records per buffer message
    (the buffer's default when None)."""
    return BUFFERED_PIPELINE.format(
        name=name,
        workdir=workdir,
        schema=schema,
        partitions=partitions,
        batch_size=batch_size,
        shards=f"    shards: {shards}\n" if shards is not None else "",
        frames=f"    frame_records: {frame_records}\n" if frame_records is not None else "",
    )
