"""The job whose classes go in the class-data archive: ``build()`` runs
``python -m exactlyonce.integration.jvm_archive.train PARTIAL``, in a JVM that writes the
archive to ``PARTIAL`` when it exits.

Above :mod:`exactlyonce.integration.spark` (it starts a session), which is above the
archive's lookup (:mod:`exactlyonce.integration.jvm_archive`): no import goes back up.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from exactlyonce.integration.jvm_archive import BUILD_TIMEOUT_S
from exactlyonce.integration.spark import session

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import DataFrame


def train(partial: Path) -> None:
    """The job whose classes go in the archive: a session, a batch query, a short streaming
    query through ``foreachBatch`` that writes as a sink does (``mapInArrow`` after a
    repartition: Arrow and the Python runner, 1,000 classes otherwise loaded from jars at
    every start); the JVM writes the archive when it exits."""
    spark = session(
        "exactlyonce-jvm-archive",
        master="local[2]",
        extra={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={partial}"},
    )
    spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "in"
        data.mkdir()
        (data / "part-0.json").write_text('{"event_id": "a", "amount": 1}\n')
        stream = spark.readStream.schema("event_id STRING, amount BIGINT").json(str(data))
        query = (
            stream.writeStream.foreachBatch(_write_like_a_sink)
            .option("checkpointLocation", str(Path(folder) / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    gateway = spark.sparkContext._gateway
    spark.stop()
    # The JVM writes the archive as it exits, which it does once its stdin closes; wait.
    jvm = getattr(gateway, "proc", None)
    if jvm is not None:
        jvm.stdin.close()
        jvm.wait(timeout=BUILD_TIMEOUT_S)


def _write_like_a_sink(df: DataFrame, _epoch: int) -> None:
    """A sink's write path: shard column, repartition by ID, Arrow batches to Python."""
    from pyspark.sql import functions as F

    df.count()
    sharded = df.withColumn("_shard", F.pmod(F.hash("event_id"), F.lit(2)))
    sharded = sharded.repartition(2, "event_id")
    sharded.mapInArrow(_passthrough, sharded.schema).collect()


def _passthrough(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


if __name__ == "__main__":
    train(Path(sys.argv[1]))
