"""A second query under a running Kafka query's ``query_name`` is refused before it fences it.

Query A, a real PySpark job writing through KafkaSink (``foreachBatch``, or
``format("exactlyonce")``), is held inside an open shard (or Spark partition) transaction
(``EXACTLYONCE_HOLD_AT=mid_produce@1``, see exactlyonce/faults.py). Query B, a real streaming
query in this process with another checkpoint and the same ``query_name`` and topic, starts
then. Kafka's head on the control topic is last-writer-wins and both queries' producers share
transactional ids, so a start that initialised them before checking the head aborted A's
open transaction: A's task failed, and with it A. B must be refused with a clear error
before it initialises any of them; A, released, must commit that epoch and every later one,
and the topic must hold each record exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from exactlyonce.connectors.kafka import KafkaSink
from exactlyonce.integration.spark import start_stream
from tests.crash.harness import make_input
from tests.crash.job_common import SCHEMA
from tests.crash.test_kafka_crash import prepare_on, verify

pytestmark = [pytest.mark.crash, pytest.mark.integration]

FILES = 4
ROWS = 60


@pytest.mark.parametrize("api", ["foreachBatch", "format"])
def test_a_second_query_is_refused_and_the_running_one_commits(
    tmp_path: Path, services: dict[str, str], spark: Any, unique_name: str, api: str
) -> None:
    data = make_input(tmp_path / "input", files=FILES, rows=ROWS, seed=21)
    bootstrap = services["KAFKA_BOOTSTRAP_SERVERS"]
    job, data, sink = prepare_on(tmp_path, bootstrap, unique_name, data)
    job.extra_args = ("--api", api)
    try:
        job.start(hold_at="mid_produce@1")
        job.wait_until_held("mid_produce", timeout=240)  # A's transaction is open
        second = KafkaSink(bootstrap, unique_name, ["event_id"], unique_name)
        stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / "input"))
        query = start_stream(stream, second, str(tmp_path / "second-ck"), available_now=True)
        with pytest.raises(StreamingQueryException, match="CheckpointResetError") as refused:
            query.awaitTermination()
        assert "another query running under this query_name" in str(refused.value)
        assert second.last_report is None, "B wrote and skipped nothing"
        job.release("mid_produce")
        job.finish(timeout=300)  # A commits the held epoch and the rest, and exits 0
    finally:
        job.stop_if_running()
    assert job.last_commit() == FILES - 1
    verify(job, data, sink)
