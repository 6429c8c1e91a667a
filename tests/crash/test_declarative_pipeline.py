"""The Spark Declarative Pipelines example (examples/declarative_pipeline/) run as users run
it, ``spark-pipelines run``, SIGKILLed whole (the CLI, its local Spark Connect server and the
Python workers) at each named point of the data source's write path, run again to the end,
and audited; then its pipeline storage (the flows' checkpoints) is deleted and the next run
is refused.

Audited in insert mode through the committed-attempts trigger (tests/support/audit.py), the
same exact audit as the format API's crash tests (:func:`verify_format`): every ID inserted
once, and attempted twice exactly in the epochs the design re-writes (killed after their
task committed, before the head).
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest

from exactlyonce.connectors import PostgresSink
from tests.crash.harness import Input, Job, make_input
from tests.crash.test_postgres_crash import AFTER_A_TASK_COMMIT, FORMAT_POINTS, verify_format
from tests.support.audit import install_audit
from tests.support.connect_port import local_connect_server
from tests.support.secrets_scan import event_log_conf

pytestmark = [pytest.mark.crash, pytest.mark.integration]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "declarative_pipeline"
SINK, FLOW = "events_pg", "events"  # the example's sink and its one flow
SPARK_PIPELINES = Path(sys.executable).with_name("spark-pipelines")


@dataclass
class PipelineJob(Job):
    """The example project, copied with its storage under the test's directory."""

    scanned_logs: ClassVar[tuple[str, ...]] = ("run-*.log", "events_*")

    @property
    def project(self) -> Path:
        return self.workdir / "project"

    @property
    def storage(self) -> Path:
        return self.workdir / "storage"

    @property
    def checkpoint(self) -> Path:
        return self.storage / "_checkpoints" / SINK / FLOW / "0"

    def copy_example(self) -> None:
        shutil.copytree(EXAMPLE, self.project, ignore=shutil.ignore_patterns("spark-*"))
        spec = (EXAMPLE / "spark-pipeline.yml").read_text()
        lines = [
            f"storage: {self.storage.as_uri()}" if line.startswith("storage:") else line
            for line in spec.splitlines()
        ]
        (self.project / "spark-pipeline.yml").write_text("\n".join(lines) + "\n")

    def command(self) -> list[str]:
        return [str(SPARK_PIPELINES), "run", "--spec", str(self.project / "spark-pipeline.yml")]

    def submit_args(self) -> str:
        """Spark settings for the local Connect server's JVM. spark-pipelines' own
        ``--conf`` stays in its outer JVM; the server is a second one, which the CLI's
        PySpark starts and configures from ``PYSPARK_SUBMIT_ARGS``."""
        conf = {
            **event_log_conf(self.workdir / "eventlog"),
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
            "spark.ui.enabled": "false",
        }
        return " ".join(f"--conf {key}={value}" for key, value in conf.items()) + " pyspark-shell"

    def sink_env(self) -> dict[str, str]:
        return {
            "EXACTLYONCE_PG_DSN": self.dsn,
            "PYSPARK_SUBMIT_ARGS": self.submit_args(),
            "EVENTS_INPUT": str(self.workdir / "input"),
            "EVENTS_TABLE": self.table,
            "EVENTS_QUERY_NAME": self.table,
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            # as the crash jobs (job_common.py): COPY in small chunks, so mid_copy has
            # rows of its task in the open transaction
            "EXACTLYONCE_CRASH_COPY_CHUNK_BYTES": "256",
        }


def prepare(tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], table: str) -> Input:
    """The input files, and the sink's table made up front with its attempts log."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    data = make_input(tmp_path / "input", files=6, rows=150, seed=11)
    schema = StructType(
        [
            StructField("event_id", StringType()),
            StructField("amount", LongType()),
            StructField("action", StringType()),
        ]
    )
    PostgresSink(pg_dsn, table, ["event_id"], table).preflight(schema)
    install_audit(pg, table)
    return data


def test_the_example_pipeline_killed_at_each_point_ends_exactly_once_and_refuses_a_reset(
    tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    data = prepare(tmp_path, pg_dsn, pg, unique_name)
    job = PipelineJob(tmp_path, unique_name, pg_dsn)
    job.copy_example()
    with local_connect_server():
        try:
            job.kill_at_points(FORMAT_POINTS)
            job.run_to_end()
        finally:
            job.stop_if_running()
        assert job.kills == [f"{point}@{epoch}" for point, epoch in FORMAT_POINTS]
        rewritten = {e for p, e in FORMAT_POINTS if p in AFTER_A_TASK_COMMIT}
        verify_format(job, data, pg, rewritten, random_kills=0)

        shutil.rmtree(job.storage)  # the flows' checkpoints: the head is no longer theirs
        job.start()
        assert job.proc is not None and job.proc.wait(timeout=300) != 0, "a reset was run"
        assert "CheckpointResetError" in (tmp_path / f"run-{job.runs}.log").read_text()
