"""``exactlyonce heads`` and ``exactlyonce rewind`` against real services and real Spark.

Each rewind test runs a small file-source query (one input file per epoch) into the sink,
rewinds it to epoch 1 through the CLI (first without ``--yes``: refused, nothing changed),
re-runs the query from the checkpoint the rewind moved back, and audits: every expected
record once, and every record of the epochs above 1 written exactly twice (once before the
rewind removed it, once by the re-run), the others exactly once.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from exactlyonce.dedup.ids import record_id
from exactlyonce.integration import cli
from exactlyonce.integration.config import load_config
from exactlyonce.integration.spark import start_stream
from tests.support.audit import insert_counts, install_audit, sink_ids, write_counts
from tests.support.es_fixtures import EsHandle
from tests.support.pipelines import buffered_pipeline, fill_buffer

pytestmark = pytest.mark.integration

SCHEMA = "event_id STRING, n BIGINT"
PIPELINE = """\
query_name: {name}
checkpoint: {workdir}/checkpoint
source: {{type: files, format: json, path: {workdir}/input, schema: "{schema}",
          max_files_per_trigger: 1}}
sink:
{sink}"""
# Three epochs of events; epoch 2 repeats one event of epoch 0 and one of epoch 1.
EPOCHS = [
    [f"e{i}" for i in range(0, 5)],
    [f"e{i}" for i in range(5, 10)],
    [*(f"e{i}" for i in range(10, 15)), "e0", "e7"],
]
TO = 0


def ids_of(events: list[str]) -> set[str]:
    return {record_id([e]) for e in events}


FIRST = ids_of([e for epoch in EPOCHS[: TO + 1] for e in epoch])  # kept by the rewind
ALL = ids_of([e for epoch in EPOCHS for e in epoch])
REWOUND = ALL - FIRST  # first written above epoch TO: removed, then written again
RERUN = ids_of([e for epoch in EPOCHS[TO + 1 :] for e in epoch])  # what the re-run reads
# Kept by the rewind and read again by the re-run (e0): the rewind drops the catalog, so the
# re-run sends it again and the sink's unique key (PostgreSQL's index, a 409) absorbs it.
ABSORBED = FIRST & RERUN


def batch_number(name: str) -> int:
    """The batch of a checkpoint log file (``3``, or its checksum ``.3.crc``)."""
    return int(name.removesuffix(".crc").lstrip("."))


def write_pipeline(workdir: Path, name: str, sink: str) -> Path:
    (workdir / "input").mkdir(parents=True)
    for n, events in enumerate(EPOCHS):
        lines = [json.dumps({"event_id": e, "n": n}) for e in events]
        path = workdir / "input" / f"part-{n:03d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))  # Spark reads oldest first
    config = workdir / "pipeline.yaml"
    config.write_text(PIPELINE.format(name=name, workdir=workdir, schema=SCHEMA, sink=sink))
    return config


def postgres_pipeline(
    tmp_path: Path, pg: psycopg.Connection[Any], name: str, *, unique: bool = True
) -> Path:
    """A table (with the unique index on record_id unless ``unique`` is off: an append
    table) and its audit trigger, and a pipeline file writing it."""
    pg.execute(
        f'CREATE TABLE "{name}" (event_id text, n bigint, record_id uuid NOT NULL, '
        "epoch bigint NOT NULL)"
    )
    if unique:
        pg.execute(f'CREATE UNIQUE INDEX ON "{name}" (record_id)')
    install_audit(pg, name)
    mode = "" if unique else "  mode: append\n"
    sink = (
        "  type: postgres\n  dsn: ${EXACTLYONCE_PG_DSN}\n"
        f"  table: {name}\n  id_columns: [event_id]\n  shards: 2\n{mode}"
    )
    return write_pipeline(tmp_path, name, sink)


def run_query(spark: Any, config: Path) -> Any:
    """The pipeline's query, run in this process until it has read every file."""
    cfg = load_config(config)
    sink = cfg.build_sink()
    query = start_stream(cfg.source.build(spark), sink, cfg.checkpoint, available_now=True)
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return sink


def heads_json(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert cli.main(["heads", str(config), "--json"]) == 0
    state: dict[str, Any] = json.loads(capsys.readouterr().out)
    return state


def checkpoint_batches(config: Path) -> dict[str, list[str]]:
    root = Path(load_config(config).checkpoint)
    return {log: sorted(p.name for p in (root / log).iterdir()) for log in ("offsets", "commits")}


def rewind_and_rerun(
    spark: Any,
    config: Path,
    capsys: pytest.CaptureFixture[str],
    held: Any,
    rebuilds: bool = False,
) -> dict[str, Any]:
    """The procedure the README gives, checked step by step; ``held()`` is what the sink
    holds (compared before and after the refused rewind). ``rebuilds``: the sink rebuilds a
    dropped catalog from its records (else it starts empty). Returns heads after the re-run."""
    state = heads_json(config, capsys)
    assert state["head"]["epoch"] == len(EPOCHS) - 1
    assert state["head"]["spark_query_id"] and state["head"]["advanced_at"]
    assert state["shard_commits"] == {}
    assert state["catalog"]["live_ids"] == len(ALL)  # each distinct ID marked once
    before, batches = held(), checkpoint_batches(config)

    assert cli.main(["rewind", str(config), "--to-epoch", str(TO)]) == 2  # no --yes
    out = capsys.readouterr()
    assert "without --yes" in out.err and f"head {len(EPOCHS) - 1} -> {TO}" in out.out
    assert held() == before and checkpoint_batches(config) == batches
    assert heads_json(config, capsys)["head"] == state["head"]

    assert cli.main(["rewind", str(config), "--to-epoch", str(TO), "--yes"]) == 0
    assert f"rewound {state['query_name']!r} to epoch {TO}" in capsys.readouterr().out
    rewound = heads_json(config, capsys)
    assert rewound["head"]["epoch"] == TO and rewound["head"]["spark_query_id"] is None
    assert rewound["catalog"] == {"exists": False}
    assert checkpoint_batches(config) == {
        log: [n for n in names if batch_number(n) <= TO] for log, names in batches.items()
    }
    assert cli.main(["rewind", str(config), "--to-epoch", str(TO), "--yes"]) == 2  # done

    run_query(spark, config)
    after = heads_json(config, capsys)
    assert after["head"]["epoch"] > TO
    assert after["head"]["spark_query_id"] == state["head"]["spark_query_id"]  # same checkpoint
    # Rebuilt from the records kept, or started empty; then the re-run's IDs marked.
    assert after["catalog"]["live_ids"] == (len(ALL) if rebuilds else len(RERUN))
    return after


def expected_writes() -> dict[str, int]:
    """Writes per ID that took (rows inserted): once for the kept epochs, twice above."""
    return {i: 1 for i in FIRST} | {i: 2 for i in REWOUND}


def expected_attempts() -> dict[str, int]:
    """Committed write attempts per ID, those a unique key absorbed included."""
    return expected_writes() | {i: 2 for i in ABSORBED}


# -- PostgreSQL --------------------------------------------------------------------------


def test_postgres_rewind_removes_rows_above_the_epoch_and_the_rerun_writes_them_once(
    tmp_path: Path,
    spark: Any,
    pg: psycopg.Connection[Any],
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = postgres_pipeline(tmp_path, pg, unique_name)
    run_query(spark, config)

    def held() -> list[Any]:
        return pg.execute(f'SELECT record_id, epoch FROM "{unique_name}" ORDER BY 1').fetchall()

    assert sorted(sink_ids(pg, unique_name)) == sorted(ALL)
    rewind_and_rerun(spark, config, capsys, held)

    ids = sink_ids(pg, unique_name)
    assert len(ids) == len(set(ids)) and set(ids) == ALL, "duplicates or missing rows"
    assert write_counts(pg, unique_name) == expected_attempts()
    assert insert_counts(pg, unique_name) == expected_writes()


def test_postgres_upsert_is_refused_and_nothing_changes(
    tmp_path: Path, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    sink = (
        "  type: postgres\n  dsn: ${EXACTLYONCE_PG_DSN}\n"
        f"  table: {unique_name}\n  id_columns: [event_id]\n  mode: upsert\n"
    )
    config = write_pipeline(tmp_path, unique_name, sink)
    assert cli.main(["rewind", str(config), "--to-epoch", "0", "--yes"]) == 2


# -- Redis (stream) ------------------------------------------------------------------------


def stream_entries(client: Any, key: str) -> list[tuple[str, int]]:
    return [(f[b"record_id"].decode(), int(f[b"epoch"])) for _, f in client.xrange(key)]


def test_redis_stream_rewind_deletes_entries_above_the_epoch_and_the_rerun_appends_them_once(
    tmp_path: Path,
    spark: Any,
    services: dict[str, str],
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import redis

    key = f"{unique_name}:events"
    sink = (
        "  type: redis\n  url: ${EXACTLYONCE_REDIS_URL}\n"
        f"  key_template: '{key}'\n  write: stream\n  id_columns: [event_id]\n  shards: 2\n"
    )
    config = write_pipeline(tmp_path, unique_name, sink)
    client = redis.Redis.from_url(services["EXACTLYONCE_REDIS_URL"])
    run_query(spark, config)

    def held() -> list[tuple[str, int]]:
        return stream_entries(client, key)

    rewind_and_rerun(spark, config, capsys, held, rebuilds=True)

    # An append is a write: each ID's entries are its writes, and the removed ones are gone.
    counts = Counter(rid for rid, _ in stream_entries(client, key))
    assert set(counts) == ALL and set(counts.values()) == {1}, "duplicates or missing entries"


def test_redis_hash_writes_are_refused(tmp_path: Path, unique_name: str) -> None:
    sink = (
        "  type: redis\n  url: ${EXACTLYONCE_REDIS_URL}\n"
        f"  key_template: '{unique_name}:{{event_id}}'\n  id_columns: [event_id]\n"
    )
    config = write_pipeline(tmp_path, unique_name, sink)
    assert cli.main(["rewind", str(config), "--to-epoch", "0", "--yes"]) == 2


# -- Elasticsearch ---------------------------------------------------------------------------


def test_elasticsearch_rewind_deletes_documents_above_the_epoch_and_the_rerun_creates_them_once(
    tmp_path: Path,
    spark: Any,
    es: EsHandle,  # noqa: F811
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    index = unique_name.replace("_", "-")
    sink = (
        f"  type: elasticsearch\n  hosts: {es.url}\n  index: {index}\n"
        f"  control_index: {index}-control\n  id_columns: [event_id]\n  shards: 2\n"
    )
    config = write_pipeline(tmp_path, unique_name, sink)
    run_query(spark, config)

    def held() -> dict[str, Any]:
        return es.docs(index)

    rewind_and_rerun(spark, config, capsys, held)

    docs = es.docs(index)
    assert set(docs) == ALL, "missing or unexpected documents"
    if es.server is not None:  # create, delete, create again: the counters see both creates
        assert es.writes(index) == expected_writes()


# -- refusals and read-only heads ----------------------------------------------------------


def test_kafka_rewind_is_refused_and_heads_creates_no_topic(
    tmp_path: Path, bootstrap: str, unique_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sink = (
        "  type: kafka\n  bootstrap_servers: ${KAFKA_BOOTSTRAP_SERVERS}\n"
        f"  topic: {unique_name}\n  control_topic: {unique_name}-control\n"
        "  id_columns: [event_id]\n"
    )
    config = write_pipeline(tmp_path, unique_name, sink)
    capsys.readouterr()
    assert cli.main(["rewind", str(config), "--to-epoch", "0", "--yes"]) == 2
    assert "cannot be removed" in capsys.readouterr().err

    assert heads_json(config, capsys)["head"] is None
    assert cli.main(["heads", str(config)]) == 0
    assert "no head yet" in capsys.readouterr().out
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    assert not {unique_name, f"{unique_name}-control"} & set(topics), "heads created a topic"


def test_heads_of_a_query_that_never_ran_creates_no_table(
    tmp_path: Path,
    pg: psycopg.Connection[Any],
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pg.execute(f'CREATE SCHEMA "{unique_name}"')
    sink = (
        "  type: postgres\n  dsn: ${EXACTLYONCE_PG_DSN}\n"
        f"  table: {unique_name}.events\n  id_columns: [event_id]\n"
    )
    config = write_pipeline(tmp_path, unique_name, sink)
    state = heads_json(config, capsys)
    assert state["head"] is None and state["shard_commits"] == {}
    assert state["catalog"] == {"exists": False}
    tables = pg.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = %s", [unique_name]
    ).fetchone()
    assert tables == (0,), "heads created tables"
    assert cli.main(["rewind", str(config), "--to-epoch", "0", "--yes"]) == 2  # no head


def test_heads_shows_a_buffered_pipelines_drain_lag(
    tmp_path: Path,
    spark: Any,
    pg: psycopg.Connection[Any],
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from exactlyonce.buffer.drain import Drainer

    (tmp_path / "input").mkdir()
    for n in range(2):
        lines = [json.dumps({"event_id": f"b{n}-{i}", "n": i}) for i in range(30)]
        (tmp_path / "input" / f"part-{n:03d}.json").write_text("\n".join(lines) + "\n")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        buffered_pipeline(unique_name, tmp_path, schema=SCHEMA, partitions=2, batch_size=100)
    )
    buffered = fill_buffer(spark, config, SCHEMA)

    state = heads_json(config, capsys)
    assert state["kind"] == "buffer" and state["head"]["epoch"] == 1
    assert state["buffer"]["positions"] == {}
    assert state["buffer"]["lag"]["records"] == 60
    assert cli.main(["rewind", str(config), "--to-epoch", "0", "--yes"]) == 2  # a buffer

    with Drainer(buffered.target, buffered.buffer, batch_size=100) as drainer:
        drainer.drain_available(timeout_s=60)
    drained = heads_json(config, capsys)["buffer"]
    assert drained["lag"] == {"records": 0, "seconds": 0.0}
    ends = drainer.commits.frontier(unique_name)
    assert drained["positions"] == {str(p): o for p, o in sorted(ends.items())}
