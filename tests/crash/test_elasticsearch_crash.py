# ruff: noqa: F811  (test arguments shadow the imported `es` fixture, as pytest wants)
"""kill -9 the real PySpark job writing to Elasticsearch at every named point; restart; audit.

The job (tests/crash/es_job.py) runs in its own session and is SIGKILLed whole (driver, JVM,
Python workers); Elasticsearch (or the test server, in this pytest process) is not. The audit
counts successful writes per ``_id`` (the test server's write counters, or ``_version`` on a
real cluster), so a second write of a record is caught even though ``_id`` is unique.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.crash.harness import ROOT, Input, Job, make_input
from tests.es_fixtures import EsHandle, es, es_backend  # noqa: F401

pytestmark = [pytest.mark.crash, pytest.mark.integration]

ES_JOB = Path(__file__).with_name("es_job.py")
CONTROL = "exactlyonce-control"


@dataclass
class EsJob(Job):
    """tests/crash/harness.py's Job, running es_job.py against ``dsn`` (the cluster's URL)."""

    def start(self, crash_at: str | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("EXACTLYONCE_CRASH_AT", None)
        if crash_at:
            env["EXACTLYONCE_CRASH_AT"] = crash_at
            env["EXACTLYONCE_CRASH_DIR"] = str(self.crash_dir)
        self.runs += 1
        log = open(self.workdir / f"run-{self.runs}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ES_JOB),
                "--input",
                str(self.workdir / "input"),
                "--checkpoint",
                str(self.checkpoint),
                "--table",
                self.table,
                "--query-name",
                self.table,
                "--es-url",
                self.dsn,
                "--master",
                self.master,
                "--mode",
                self.mode,
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def prepare(
    tmp_path: Path, es: EsHandle, index: str, files: int = 8, seed: int = 7
) -> tuple[EsJob, Input]:
    data = make_input(tmp_path / "input", files=files, rows=150, seed=seed)
    return EsJob(tmp_path, index, es.url, mode="create"), data


def verify(job: EsJob, data: Input, es: EsHandle) -> None:
    writes = es.writes(job.table)
    doubled = {i: n for i, n in writes.items() if n > 1}
    assert not doubled, f"{len(doubled)} _ids written more than once: {list(doubled.items())[:5]}"
    missing = data.expected_ids - set(writes)
    assert not missing, f"{len(missing)} expected _ids missing"
    assert set(writes) == data.expected_ids, "unexpected _ids in the index"
    letters = es.writes(f"{job.table}-dead-letters")
    assert len(letters) == data.null_keys, "each null-key record is dead-lettered exactly once"
    assert set(letters.values()) <= {1}
    commits = job.spark_commits()
    assert commits == set(range(max(commits) + 1)), f"gap in Spark's commit log: {commits}"
    with es.client() as client:
        head = client.get(index=CONTROL, id=f"{job.table}|elasticsearch:{job.table}")
    assert head["_source"]["epoch"] == max(commits), "the head is Spark's last committed epoch"
    print(f"verified: {len(writes)} _ids written once each, {len(letters)} dead letters")


@pytest.fixture
def index(unique_name: str) -> str:
    return unique_name.replace("_", "-")


def test_kill_at_every_named_point(
    tmp_path: Path, services: dict[str, str], es: EsHandle, index: str
) -> None:
    """One job, killed in turn at each point of the write path (one epoch each)."""
    job, data = prepare(tmp_path, es, index)
    for epoch, point in enumerate(
        ["before_write", "mid_bulk", "after_shard_commit", "after_head"], start=1
    ):
        job.start(crash_at=f"{point}@{epoch}")
        job.wait_for_marker(point, timeout=240)
        job.kill(f"{point}@{epoch}")
        assert epoch not in job.spark_commits(), "the killed epoch is not in Spark's commit log"
    job.start()
    job.wait_for_commit(5, timeout=240)
    job.kill("after Spark's commit of epoch 5")
    job.start()
    job.finish(timeout=300)
    verify(job, data, es)


def test_seeded_random_kills_with_429s_and_a_lost_bulk_reply(
    tmp_path: Path, services: dict[str, str], es: EsHandle, index: str
) -> None:
    seed = int(os.environ.get("EXACTLYONCE_CRASH_SEED", random.randrange(1 << 30)))
    print(f"random kill schedule seed={seed} (replay: EXACTLYONCE_CRASH_SEED={seed})")
    rng = random.Random(seed)
    job, data = prepare(tmp_path, es, index, files=12, seed=seed)
    server = es.server
    job.start()
    job._wait(lambda: len(job.spark_commits()) >= 1, 240, "first commit")
    if server is not None:
        # Elasticsearch answers 429 to every bulk item for 10 s; the job must ride it out.
        rejected, dropped = server.rejected_items, server.dropped_replies
        server.reject_for(10)
        window_end = time.monotonic() + 10
        before = job.spark_commits()
        job._wait(
            lambda: time.monotonic() > window_end and len(job.spark_commits() - before) >= 1,
            240,
            "a commit after the 429 window",
        )
        assert server.rejected_items > rejected, "the 429 window rejected bulk items"
        server.drop_after_apply(1)  # the next bulk is applied, its reply lost
        job._wait(lambda: server.dropped_replies > dropped, 120, "a dropped bulk reply")
    else:
        print("real Elasticsearch: no 429 window and no dropped reply (no fault injection)")
    time.sleep(rng.uniform(0.0, 1.5))
    if job.proc is not None and job.proc.poll() is None:
        job.kill(f"random kill 1 (seed {seed})")
    for n in range(2):
        job.start()
        before = job.spark_commits()
        job._wait(lambda b=before: len(job.spark_commits() - b) >= 1, 240, "progress")
        time.sleep(rng.uniform(0.0, 1.5))
        if job.proc is not None and job.proc.poll() is not None:
            break  # finished before the kill: nothing left to interrupt
        job.kill(f"random kill {n + 2} (seed {seed})")
    job.start()
    job.finish(timeout=300)
    assert len(job.kills) >= 2, f"only {len(job.kills)} kills happened (seed {seed})"
    verify(job, data, es)
