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
from exactlyonce.integration.config import FilesSourceConfig, PipelineConfig
from exactlyonce.integration.demo.pipeline import pg_sink
from exactlyonce.integration.maintenance import drop_catalog


def reset_state(cfg: PipelineConfig, source: FilesSourceConfig) -> None:
    """No checkpoint, input, table, dedup catalog, head, shard commits or dead letters.

    Destructive, and idempotent: what is already gone is skipped. Only the query's own rows
    of the shared head, shard-commit and dead-letter tables are deleted."""
    shutil.rmtree(cfg.checkpoint, ignore_errors=True)
    shutil.rmtree(source.path, ignore_errors=True)
    drop_catalog(cfg.build_sink(check=False))  # before the head, as `reset-head` does
    table = TableName.parse(pg_sink(cfg).table)
    with psycopg.connect(pg_sink(cfg).dsn.get_secret_value(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table.ident()))
        for name in (HEADS, SHARD_COMMITS, DEAD_LETTERS):
            if regclass(conn, TableName(table.schema, name)) is not None:
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE query_name = %s").format(table.sibling(name)),
                    [cfg.query_name],
                )
