"""Fresh state before a demo: nothing left of an earlier run, in the files or the services."""

from __future__ import annotations

import shutil

import psycopg
from psycopg import sql

from exactlyonce.connectors.postgres.schema import (
    DEAD_LETTERS,
    HEADS,
    SHARD_COMMITS,
    TableName,
    regclass,
)
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.lab.demo.pipeline import demo_source, kafka_sink, pg_sink
from exactlyonce.integration.lab.upstream.topics import recreate_topics
from exactlyonce.integration.maintenance import drop_catalog

INPUT_PARTITIONS = 3


def reset_state(pg: PipelineConfig, kafka: PipelineConfig) -> None:
    """No checkpoint, dedup catalog, table, head, shard commits or dead letters of either
    pipeline; the input topic empty; the Kafka sink's topics (data, dead letters, control,
    probe) gone, so its head is gone too (its preflight creates them again).

    Destructive, and idempotent: what is already gone is skipped. Only the PostgreSQL query's
    own rows of the shared head, shard-commit and dead-letter tables are deleted; the Kafka
    sink must have a control topic of its own (not the shared default)."""
    for cfg in (pg, kafka):
        shutil.rmtree(cfg.checkpoint, ignore_errors=True)
        drop_catalog(cfg.build_sink(check=False))  # before the head, as `reset-head` does
    _reset_table(pg)
    out = kafka_sink(kafka)
    control = out.control_topic
    recreate_topics(
        demo_source(pg).bootstrap_servers,
        delete=[out.topic, out.dead_letter_topic_name, control, f"{control}.probe"],
        create={str(demo_source(pg).topic): INPUT_PARTITIONS},
    )


def _reset_table(cfg: PipelineConfig) -> None:
    table = TableName.parse(pg_sink(cfg).table)
    with psycopg.connect(pg_sink(cfg).dsn.get_secret_value(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table.ident()))
        for name in (HEADS, SHARD_COMMITS, DEAD_LETTERS):
            if regclass(conn, TableName(table.schema, name)) is not None:
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE query_name = %s").format(table.sibling(name)),
                    [cfg.query_name],
                )
