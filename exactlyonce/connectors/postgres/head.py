"""The PostgreSQL sink's :class:`~exactlyonce.connectors.base.head.HeadStore`: one row per
(query, sink) in ``exactlyonce_heads`` next to the table, shard commits in
``exactlyonce_shard_commits``; every change is one transaction."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from exactlyonce.connectors.base.head import Head
from exactlyonce.connectors.postgres.schema import HEADS, SHARD_COMMITS, TableName

log = logging.getLogger("exactlyonce")


class PostgresHeadStore:
    """The head of (``query_name``, ``sink_name``) in the schema of ``table``; ``connect``
    opens a connection (autocommit, closed by the caller's ``with``)."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        table: TableName,
        query_name: str,
        sink_name: str,
    ) -> None:
        self.connect = connect
        self.heads = table.sibling(HEADS)
        self.shard_commits = table.sibling(SHARD_COMMITS)
        self.key = [query_name, sink_name]

    def read_head(self) -> Head | None:
        """The head row; None before the first epoch, including before any query created the
        sink's tables."""
        try:
            with self.connect() as conn:
                row = conn.execute(
                    sql.SQL(
                        "SELECT epoch, spark_query_id, num_shards, extract(epoch FROM updated_at) "
                        "FROM {} WHERE query_name = %s AND sink = %s"
                    ).format(self.heads),
                    self.key,
                ).fetchone()
        except psycopg.errors.UndefinedTable:
            return None
        if row is None:
            return None
        advanced_at = float(row[3]) if row[3] is not None else None
        return Head(int(row[0]), row[1], int(row[2]), advanced_at)

    def create_head(self, head: Head) -> None:
        with self.connect() as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (query_name, sink, epoch, spark_query_id, num_shards) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
                ).format(self.heads),
                [*self.key, head.epoch, head.spark_query_id, head.num_shards],
            )

    def bind_query_id(self, spark_query_id: str) -> None:
        with self.connect() as conn:
            conn.execute(
                sql.SQL(
                    "UPDATE {} SET spark_query_id = %s, updated_at = now() "
                    "WHERE query_name = %s AND sink = %s AND spark_query_id IS NULL"
                ).format(self.heads),
                [spark_query_id, *self.key],
            )

    def advance_head(self, epoch: int, spark_query_id: str | None) -> None:
        """One transaction: the head moves to ``epoch``; shard commits at or below it go."""
        with self.connect() as conn, conn.transaction():
            conn.execute(
                sql.SQL(
                    "UPDATE {} SET epoch = %s, spark_query_id = COALESCE(%s, spark_query_id), "
                    "updated_at = now() WHERE query_name = %s AND sink = %s AND epoch < %s"
                ).format(self.heads),
                [epoch, spark_query_id, *self.key, epoch],
            )
            conn.execute(
                sql.SQL(
                    "DELETE FROM {} WHERE query_name = %s AND sink = %s AND epoch <= %s"
                ).format(self.shard_commits),
                [*self.key, epoch],
            )

    def reset_head(self) -> None:
        """One transaction: the head row and every shard commit of (query, sink) go."""
        with self.connect() as conn, conn.transaction():
            for table in (self.heads, self.shard_commits):
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE query_name = %s AND sink = %s").format(table),
                    self.key,
                )
