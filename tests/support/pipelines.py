"""Pipeline files the tests hand to the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

BUFFERED_PIPELINE = """\
query_name: {name}
checkpoint: {workdir}/checkpoint
source: {{type: files, format: json, path: {workdir}/input, schema: "{schema}"}}
sink:
{sink}  buffer:
    topic: {name}
    bootstrap_servers: ${{KAFKA_BOOTSTRAP_SERVERS}}
    partitions: {partitions}
{shards}{frames}    batch_size: {batch_size}
"""

POSTGRES_SINK = """\
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  id_columns: [event_id]
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
    sink: str | None = None,
) -> str:
    """A JSON-files -> sink pipeline with a Kafka buffer; query and topic are ``name``, the
    input is ``<workdir>/input``. ``sink``: the sink section's lines (without ``buffer:``,
    indented two spaces); by default PostgreSQL, table ``name``. ``frame_records``: records
    per buffer message (the buffer's default when None)."""
    return BUFFERED_PIPELINE.format(
        name=name,
        workdir=workdir,
        schema=schema,
        partitions=partitions,
        batch_size=batch_size,
        sink=sink if sink is not None else POSTGRES_SINK.format(name=name),
        shards=f"    shards: {shards}\n" if shards is not None else "",
        frames=f"    frame_records: {frame_records}\n" if frame_records is not None else "",
    )


def fill_buffer(spark: Any, config: Path, schema: str) -> Any:
    """Write every input file of ``config``'s pipeline into its buffer, one epoch per file,
    in order, through the pipeline's own ``Buffered`` sink (its preflight first, with the
    stream's schema); returns that sink, its reports filled."""
    from exactlyonce.integration.config import load_config

    cfg = load_config(config)
    buffered = cfg.build_sink()
    files = sorted(Path(cfg.source.path).glob("part-*.json"))  # type: ignore[union-attr]
    buffered.preflight(spark.read.schema(schema).json(str(files[0])).schema)
    for epoch, path in enumerate(files):
        buffered(spark.read.schema(schema).json(str(path)), epoch)
    return buffered
