"""Spark's format API for every exactly-once sink: ``df.writeStream.format("exactlyonce")``.

Registered by :func:`exactlyonce.integration.spark.register_data_source` (which
:func:`exactlyonce.integration.spark.session` calls)::

    (df.writeStream.format("exactlyonce")
       .option("sink", "postgres").option("secret.dsn", dsn).option("table", "events")
       .option("id_columns", "event_id").option("query_name", "clicks-to-pg")
       .option("checkpointLocation", ckpt).start())

The options are the sink's own settings, parsed by its one config model (:mod:`.options`).
A setting holding a credential goes as ``secret.<name>`` (``secret.dsn``, ``secret.url``,
``secret.redis_url``, ``secret.api_key``), a name Spark redacts wherever it shows options;
:func:`.options.writer_options` builds them so from a sink's config.

How this path keeps the invariants
----------------------------------
Spark's data source API hands each task the upstream plan's partition as it is: there is no
repartition by record ID, and a re-run of an epoch may split its rows differently
(SPARK-28650). The ``foreachBatch`` path's shard-commit markers say "this shard's rows are
written"; here a shard's rows may sit in several tasks, so a marker would make a re-run skip
rows an earlier attempt never wrote. This path therefore writes NO shard marker and trusts
none (Kafka, append-only, has its own partition markers: see "Kafka" below); each task:

- adds the record ID (invariant 5: the same MD5 of the key columns as the ``foreachBatch``
  path; key columns must be strings or integers, whose text Python renders exactly as Spark
  does) and the ID's catalog shard (``pmod(hash(id), shards)``, deterministic: the catalog's
  Bloom filters and entries of an ID are always in the same shard);
- refuses a head that another Spark checkpoint wrote (invariant 9: the task sees the Spark
  query id; the driver's start also checks it when the checkpoint is a local path, and
  otherwise leaves the check to the tasks), and a head with committed epochs when it sees no
  query id (invariant 13: fails closed, unless the sink's ``allow_unknown_query_id``);
- skips an epoch at or below the head the driver read at the query's start (step 1);
- shapes the rows as the sink's ``foreachBatch`` projection does (its ``datasource`` traits
  in the sink registry), and writes through the sink's own task writer (catalog check, dead
  letters, its atomic step), where a record written twice is a no-op in the destination itself;
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
  whatever task or attempt writes it: each record is inserted once. It is sent again, and
  the index absorbs it, when a run dies after an epoch's tasks committed and before the head
  advanced (the re-run writes the epoch again), and when two tasks of one epoch hold it at
  once (neither sees the other's ID in the catalog yet).
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
- Kafka: served on a broker that hides aborted records from ``read_committed`` consumers
  (Apache Kafka; the sink's preflight measures it), with the catalog (``dedup``, the
  default) and ``value`` ``"json"`` or a string column. Elsewhere refused: a broker that
  delivers aborted records (Tansu) names ``bootstrap_servers``, ``dedup=False`` names
  ``dedup``, ``json-with-schema``/``avro`` name ``value``. See "Kafka" below.

Kafka
-----
A topic is append-only: nothing makes a record's second append a no-op, so this path keeps
the two promises the shard markers keep on ``foreachBatch`` by other means
(:mod:`exactlyonce.connectors.kafka.partition_task`, :mod:`exactlyonce.dedup.claims`,
:mod:`exactlyonce.connectors.kafka.datasource`):

- Transactions per Spark PARTITION: ``transactional.id`` ``eo-<query>-<sha>-p<partition>``.
  A task reads its whole partition first (it is held in memory) and takes the fingerprint
  of its input (row count, sums and XOR of the rows' ID digests: order-independent, every
  row counted, repeats and bad records too). It fences the older attempts of (epoch,
  partition), then reads the control topic up to a barrier of its own. Its partition
  committed before (the marker, trusted on this broker, or the confirmation): with the SAME
  fingerprint it writes nothing and re-marks what that attempt wrote; with ANOTHER one Spark
  split the re-run differently (SPARK-28650): :class:`~exactlyonce.errors.EpochSplitError`,
  the task fails, the query stops, nothing is appended. Otherwise it registers the
  fingerprint (a task retry with other rows is refused the same way), checks each ID in the
  catalog (a hit is a duplicate, confirmed in Redis: invariants 2 and 3), CLAIMS the rest for
  (epoch, partition) (an ID another partition of the epoch claimed is that partition's to
  write), and writes the survivors, its dead letters and the partition's commit marker
  (with the fingerprint) in ONE transaction; commits, confirms, and only then marks its IDs
  (invariant 1).
- The driver, at each start: fences every partition producer that wrote since the head
  (found by their barrier keys in the control topic), marks in the catalog every ID of the
  attempts that committed above the head, read back from the topic (the head and the topic
  are the truth, invariant 4), then drops every claim of earlier runs. At each epoch's
  commit: checks that every partition registered for the epoch ran in this attempt with rows
  (else EpochSplitError: a claim whose partition is gone would leave its IDs unwritten),
  reading the registry together with the catalog's instance marker (a catalog lost since the
  tasks fails the commit), then advances the head with the frontier (the topic's end
  offsets) and tombstones the partitions' markers, as ``foreachBatch`` does.

Why no record is appended twice: within one run, only the partition that claimed an ID
appends it, and its attempts are serialised by fencing and its marker (at most one commits;
a committed partition's re-run appends nothing). Across epochs, an ID is marked before the
head passes its epoch (a task that died between its commit and its marks is re-run, and
re-marks; or the next start marks it from the topic). Across runs, the start marks every ID
a committed attempt above the head holds before any task runs, so it is a catalog hit for
every later task, whatever partition holds it; claims of the earlier run are dropped only
then, and the partitions that held them had committed nothing (what they had committed is
marked). Why none is lost: a task drops an ID only when the catalog holds it (marked only
after the append was durable, or read back from the topic) or when another partition of
this run claimed it, and the head advances only when every claiming partition of the epoch
succeeded in the final attempt. Dead letters go in the partition's transaction: exactly once.

Catalog loss: the tasks' scripts check the catalog's instance and fail (CATALOG_LOST); the
restart rebuilds the catalog from the topic, counting the attempts that committed but were
not confirmed yet (their marker is read ``read_committed``: only committed ones are
visible), and marks above the head as every start does. The claims lost with it were this
run's promises only, and this run ended with the failure. Claims take a Redis hash entry per
ID of the epoch being written, in the ID's catalog shard (``<s>:cl:<epoch>``, one hash tag:
Redis Cluster safe); the head's commit drops them. Not served: a source whose re-run of a
partly committed epoch splits it differently stops with EpochSplitError until a restart
splits it as before (file and Kafka sources split an epoch the same way every time).

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
