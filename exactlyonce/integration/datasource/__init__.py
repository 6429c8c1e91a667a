"""Spark's format API for every exactly-once sink: ``df.writeStream.format("exactlyonce")``.

Registered by :func:`exactlyonce.integration.spark.register_data_source` (which
:func:`exactlyonce.integration.spark.session` calls)::

    (df.writeStream.format("exactlyonce")
       .option("sink", "postgres").option("dsn", dsn).option("table", "events")
       .option("id_columns", "event_id").option("query_name", "clicks-to-pg")
       .option("checkpointLocation", ckpt).start())

The options are the sink's own settings, parsed by its one config model (:mod:`.options`).

How this path keeps the invariants
----------------------------------
Spark's data source API hands each task the upstream plan's partition as it is: there is no
repartition by record ID, and a re-run of an epoch may split its rows differently
(SPARK-28650). The ``foreachBatch`` path's shard-commit markers say "this shard's rows are
written"; here a shard's rows may sit in several tasks, so a marker would make a re-run skip
rows an earlier attempt never wrote. This path therefore writes NO shard marker and trusts
none; each task:

- adds the record ID (invariant 5: the same MD5 of the key columns as the ``foreachBatch``
  path; key columns must be strings or integers, whose text Python renders exactly as Spark
  does) and the ID's catalog shard (``pmod(hash(id), shards)``, deterministic: the catalog's
  Bloom filters and entries of an ID are always in the same shard);
- refuses a head that another Spark checkpoint wrote (invariant 9: the task sees the Spark
  query id; the driver's start also checks it when the checkpoint is a local path);
- skips an epoch at or below the head the driver read at the query's start (step 1);
- shapes the rows as the sink's ``foreachBatch`` projection does (:mod:`.shapes`), and writes
  through the sink's own task writer (catalog check, dead letters, its atomic step), where a
  record written twice is a no-op in the destination itself;
- marks IDs in the catalog only after its write is durable (invariant 1; a catalog hit
  is confirmed in Redis, never trusted from the Bloom filter alone: invariants 2 and 3).
- keys each dead letter by (Spark partition, digest of the letter, its count among identical
  letters of the task), unique per (query, epoch) in the destination, so a task retry or a
  re-run of the epoch writes none of them twice. Exact when the re-run splits the epoch into
  the same partitions (task retries; file and Kafka sources); a source whose re-run splits
  differently may leave an identical bad record lettered twice (never lost).

The driver's ``commit(messages, batch_id)`` runs only when every task succeeded; it advances
the head (step 5: never from one task). ``abort`` leaves the head alone: the re-run writes
the epoch again and every already-written record is a no-op.

Per sink and mode:

- PostgreSQL ``mode="insert"``: served. The unique index on ``record_id`` makes a second
  write of an ID a no-op (COPY into a savepoint, else ``INSERT ... ON CONFLICT DO NOTHING``),
  whatever task or attempt writes it; an AFTER INSERT trigger sees each record once.
- PostgreSQL ``mode="append"``: refused (ConfigError naming ``mode``). Without a unique index
  exactly-once rests on the shard markers and the catalog: a task that committed and died
  before marking its IDs would have its rows written again by a differently split re-run.
- PostgreSQL ``mode="upsert"``: refused (``mode``) for now: rows of one key in one epoch may
  sit in several tasks, and the within-epoch rule (the row whose canonical form sorts last
  wins) needs them in one task.
- Elasticsearch ``mode="insert"``: served. Each record is a bulk ``create`` (or ``index``
  with ``op_type="index"``) with ``_id`` = its record ID: a second ``create`` of an ID is a
  409, a no-op counted as such; an ``index`` rewrites the same document. The documents are
  the rows as they are (binary, which ``foreachBatch`` base64s, is refused on this path).
  Dead letters have deterministic ``_id`` values too.
- Elasticsearch ``mode="upsert"``: refused (``mode``), as PostgreSQL's.
- Redis ``write="hash"`` and ``write="string"`` (``mode="insert"``): served. A key holds the
  record its template names: writing it again sets the same value. The task shapes the rows
  as the sink's Spark projection does (stored columns as Spark's text, string mode's record
  as Spark's ``to_json``, a null key-template column makes a bad record), on Arrow:
  :func:`exactlyonce.connectors.redis.projection.project_arrow`, byte for byte the same for
  the column types this path takes (strings, integers, booleans; others are refused naming
  ``sink``: cast them). The apply script runs without shard markers and skips a record its
  key holds already (counted a duplicate), so a re-run writes nothing twice.
- Redis ``write="stream"``: refused (``write``), for PostgreSQL append's reason: an append is
  not idempotent by key, so a differently split re-run would append committed records again.
- Redis ``mode="upsert"``: refused (``mode``), as PostgreSQL's.
- Kafka: refused (``sink``). A topic is append-only: a task that committed its transaction
  and died before its IDs reached the catalog would have them appended again by a re-run
  that splits the epoch differently, and nothing in the topic makes that second append a
  no-op. Its transactional ids are per shard (fencing a crashed shard's open transaction),
  which assumes shard-aligned tasks. Use ``foreachBatch`` (or the Kafka buffer ahead of a
  slow sink).

Dead letters are written by the task that meets the bad record, keyed as above: PostgreSQL
inserts them ``ON CONFLICT DO NOTHING`` on a unique ``letter_key``, Elasticsearch uses the key
for the letter's ``_id`` (so identical bad records of two tasks stay two letters). Redis
appends them to its dead-letter stream (``XADD``): a re-run of a task that had committed may
letter its bad records a second time there. Records are never doubled.

A lost catalog fails the epoch's tasks here (the ``foreachBatch`` path recovers between
retries in its driver); the restarted query recovers it at its start, as ``foreachBatch`` does.
"""

from __future__ import annotations

from exactlyonce.integration.datasource.source import NAME, ExactlyOnceDataSource

__all__ = ["NAME", "ExactlyOnceDataSource"]
