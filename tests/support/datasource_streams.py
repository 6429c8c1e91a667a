"""Streams for the format("exactlyonce") tests: the same JSON files through the data source
and, for the parity checks, through ``foreachBatch(sink)``."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from exactlyonce.connectors.base import ExactlyOnceSink
from exactlyonce.integration.spark import start_stream

# Text Spark and Python could write differently: quotes, a backslash, a control character,
# non-ASCII, an empty string.
AWKWARD = ['é "q"', "a\\b", "tab\there\x01\x1f", "", "日本", "x/y"]
RICH_SCHEMA = "event_id STRING, amount BIGINT, action STRING, ok BOOLEAN"


def start_format(spark: Any, source: Path, checkpoint: Path, schema: str, **options: str) -> Any:
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(source))
    writer = df.writeStream.format("exactlyonce").option("checkpointLocation", str(checkpoint))
    for name, value in options.items():
        writer = writer.option(name, value)
    return writer.trigger(availableNow=True).start()


def through_both_paths(
    spark: Any, workdir: Path, sink: ExactlyOnceSink, options: dict[str, str], seed: int
) -> None:
    """The same rich input (:func:`make_rich_input`) through ``foreachBatch(sink)`` and
    through format("exactlyonce") with ``options``, each to its end."""
    source = workdir / "in"
    make_rich_input(source, files=2, rows=80, seed=seed)
    start_foreach(spark, source, workdir / "ck-fb", RICH_SCHEMA, sink).awaitTermination()
    start_format(spark, source, workdir / "ck", RICH_SCHEMA, **options).awaitTermination()


def start_foreach(
    spark: Any, source: Path, checkpoint: Path, schema: str, sink: ExactlyOnceSink
) -> Any:
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(source))
    return start_stream(df, sink, str(checkpoint), available_now=True)


def rerun_after_losing_commit(
    spark: Any, source: Path, checkpoint: Path, schema: str, epoch: int, **options: str
) -> None:
    """Spark's commit log loses ``epoch`` (a crash after the head moved, before Spark's
    commit); the restarted query runs it again, to the end."""
    for name in (str(epoch), f".{epoch}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    start_format(spark, source, checkpoint, schema, **options).awaitTermination()
    assert (checkpoint / "commits" / str(epoch)).exists(), f"Spark re-ran epoch {epoch}"


def make_rich_input(directory: Path, files: int, rows: int, seed: int) -> set[str]:
    """JSON-lines files with repeated records (a replayed record is the same row), null keys,
    null values and awkward text; returns the event IDs."""
    rng = random.Random(seed)
    pool = [
        {
            "event_id": f"e{n}",
            "amount": rng.choice([None, rng.randint(-(10**12), 10**12)]),
            "action": rng.choice([None, "click", *AWKWARD]),
            "ok": rng.choice([None, True, False]),
        }
        for n in range(rows * files * 3 // 4)
    ]
    directory.mkdir(parents=True)
    seen: set[str] = set()
    for n in range(files):
        lines = [rng.choice(pool) for _ in range(rows)]
        lines.append({"event_id": None, "amount": n, "action": "no key", "ok": None})
        seen.update(str(line["event_id"]) for line in lines if line["event_id"])
        (directory / f"part-{n:04d}.json").write_text(
            "\n".join(json.dumps(line) for line in lines) + "\n"
        )
    return seen
