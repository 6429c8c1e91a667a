"""kill -9 the real PySpark job writing to Elasticsearch at every named point; restart; audit.

No Elasticsearch server can be installed here: unless ``ELASTICSEARCH_URL`` names a real
cluster, these run against the stand-in lab/es_stand_in/ (in this pytest process).

The job (tests/crash/es_job.py) runs in its own session and is SIGKILLed whole (driver, JVM,
Python workers); Elasticsearch (or the test server) is not. The audit counts successful writes
per ``_id`` (the test server's write counters, or ``_version`` on a real cluster), so a second
write of a record is caught even though ``_id`` is unique; it reads every document's
``_version`` over plain HTTP (neither the sink's client nor elasticsearch-py), and reports the
409s the stand-in counted per ``_id`` (a re-sent ``create``, refused: no second write).

With ``op_type="create"`` a re-sent record is a 409 and leaves ``_version`` at 1, so only the
stand-in's counters can see a re-send; with ``op_type="index"`` (test_index_op_type_...) a
re-sent record is written again and bumps ``_version``, which any reader sees.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from exactlyonce.integration.lab.chaos.servers import restart
from exactlyonce.integration.lab.services import down, port, up
from tests.crash.harness import Input, Job, crash_seed, make_input
from tests.support.es_fixtures import EsHandle, EsServiceHandle, read_index
from tests.support.private_kafka import free_port

pytestmark = [pytest.mark.crash, pytest.mark.integration]

CONTROL = "exactlyonce-control"
BULK_MAX_ACTIONS = 50  # es_job.py's bulk_max_actions: mid_bulk fires after the first bulk
Snapshot = dict[str, tuple[int, dict[str, Any]]]  # read_index: _id -> (_version, _source)


@dataclass
class EsJob(Job):
    """tests/crash/harness.py's Job, running es_job.py against ``dsn`` (the cluster's URL)."""

    script: ClassVar[Path] = Path(__file__).with_name("es_job.py")

    def sink_env(self) -> dict[str, str]:
        return {}

    def sink_args(self) -> list[str]:
        return ["--table", self.table, "--es-url", self.dsn, "--mode", self.mode]


def prepare(
    tmp_path: Path, es: EsHandle, index: str, files: int = 8, seed: int = 7, mode: str = "create"
) -> tuple[EsJob, Input]:
    data = make_input(tmp_path / "input", files=files, rows=150, seed=seed)
    return EsJob(tmp_path, index, es.url, mode=mode), data


def kill_at_points_reading(
    job: EsJob, schedule: list[tuple[str, int]], timeout: float = 240
) -> list[Snapshot]:
    """``job.kill_at_points``, and after each kill what the index holds (plain HTTP)."""
    seen = []
    for point, epoch in schedule:
        job.start(crash_at=f"{point}@{epoch}")
        job.kill_at_marker(point, epoch, timeout)
        seen.append(read_index(job.dsn, job.table))
    return seen


def of_epoch(snapshot: Snapshot, epoch: int) -> set[str]:
    return {i for i, (_, source) in snapshot.items() if source["epoch"] == epoch}


def verify(
    job: EsJob, data: Input, es: EsHandle, rewritten: frozenset[str] = frozenset()
) -> dict[str, int] | None:
    """Every expected ``_id`` written once (``rewritten``: exactly twice, where the test
    knows an ``index`` re-sent it), its ``_version`` read over HTTP to match, each null key
    dead-lettered once, the head at Spark's last commit. Returns the stand-in's 409s per
    ``_id`` (None on a real cluster), printed too."""
    expected_writes = {i: 2 if i in rewritten else 1 for i in data.expected_ids}
    writes = es.writes(job.table)
    wrong = {i: n for i, n in writes.items() if n != expected_writes.get(i)}
    assert not wrong, (
        f"{len(wrong)} _ids written more than once (or, where re-sent, other than twice): "
        f"{list(wrong.items())[:5]}"
    )
    missing = data.expected_ids - set(writes)
    assert not missing, f"{len(missing)} expected _ids missing"
    assert set(writes) == data.expected_ids, "unexpected _ids in the index"
    versions = {i: version for i, (version, _) in read_index(job.dsn, job.table).items()}
    assert versions == expected_writes, "the _version of a document read over HTTP differs"
    letters = es.writes(f"{job.table}-dead-letters")
    assert len(letters) == data.null_keys, "each null-key record is dead-lettered exactly once"
    assert set(letters.values()) <= {1}
    last_commit = job.last_commit()
    with es.client() as client:
        head = client.get(index=CONTROL, id=f"{job.table}|elasticsearch:{job.table}")
    assert head["_source"]["epoch"] == last_commit, "the head is Spark's last committed epoch"
    conflicts = es.conflicts(job.table)
    refused = (
        "409s: not counted (a real cluster keeps no record of refused writes)"
        if conflicts is None
        else f"{sum(conflicts.values())} 409s (re-sent creates refused) on {len(conflicts)} _ids"
    )
    print(
        f"verified: {len(writes) - len(rewritten)} _ids written once each, {len(rewritten)} "
        f"twice (index re-sent), {len(letters)} dead letters; {refused}",
        flush=True,
    )
    return conflicts


@pytest.fixture
def index(unique_name: str) -> str:
    return unique_name.replace("_", "-")


def test_kill_at_every_named_point(
    tmp_path: Path, services: dict[str, str], es: EsHandle, index: str
) -> None:
    """One job, killed in turn at each point of the write path (one epoch each). Not here,
    each one more JVM start: before_write (the driver's shared protocol before any write,
    the same for every sink) and a kill after Spark's commit (a plain restart at the head);
    PostgreSQL's named-point test has both, and make soak kills every sink at every point."""
    job, data = prepare(tmp_path, es, index, files=6)
    schedule = [("mid_bulk", 1), ("after_shard_commit", 2), ("after_head", 3)]
    seen = kill_at_points_reading(job, schedule)
    job.run_to_end(timeout=300)
    assert job.kills == [f"{point}@{epoch}" for point, epoch in schedule]
    conflicts = verify(job, data, es)
    if conflicts is not None:
        # Re-sent: what the killed mid_bulk task (and, at after_shard_commit, the other
        # shard's task, if it had not committed) had written. Each once, refused, and the
        # mid_bulk task's first bulk for sure.
        resendable = of_epoch(seen[0], 1) | of_epoch(seen[1], 2)
        assert set(conflicts) <= resendable, "a 409 for a record no kill left unmarked"
        assert set(conflicts.values()) <= {1}, "a record re-sent more than once"
        assert set(conflicts) & of_epoch(seen[0], 1), "the mid_bulk task's bulk was not re-sent"


def test_index_op_type_kills_rewrite_exactly_what_mid_bulk_left(
    tmp_path: Path, services: dict[str, str], es: EsHandle, index: str
) -> None:
    """``op_type="index"``, where a second write of a record is visible to anyone (it bumps
    ``_version``), with one shard (one task per epoch, so what a kill leaves is known).

    - ``mid_bulk@1``: the task's first bulk (50 records) is written, then the run dies before
      the shard is marked; the re-run sends the shard again, and those 50, exactly the
      documents of epoch 1 the index held at the kill, are indexed a second time (version 2:
      the sink's documented "identical overwrite"; with ``create`` they are 409s);
    - ``after_shard_commit@2``, ``after_head@3``: the shard is marked; nothing is re-sent;
    - every other document: written once, ``_version`` 1 (read over plain HTTP)."""
    job, data = prepare(tmp_path, es, index, files=6, mode="index")
    job.extra_args = ("--shards", "1")
    schedule = [("mid_bulk", 1), ("after_shard_commit", 2), ("after_head", 3)]
    seen = kill_at_points_reading(job, schedule)
    job.run_to_end(timeout=300)
    assert job.kills == [f"{point}@{epoch}" for point, epoch in schedule]
    first_bulk = of_epoch(seen[0], 1)
    assert len(first_bulk) == BULK_MAX_ACTIONS, f"mid_bulk left {len(first_bulk)} documents"
    assert {version for version, _ in seen[0].values()} == {1}
    conflicts = verify(job, data, es, rewritten=frozenset(first_bulk))
    assert conflicts in ({}, None), f"an index op answered 409: {conflicts}"


def test_seeded_random_kills_with_429s_and_a_lost_bulk_reply(
    tmp_path: Path, services: dict[str, str], es: EsHandle, index: str
) -> None:
    seed = crash_seed()
    rng = random.Random(seed)
    job, data = prepare(tmp_path, es, index, files=16, seed=seed)
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
    assert job.kill_at_random_moment(rng, f"random kill 1 (seed {seed})", max_delay=1.5), (
        f"the run finished before random kill 1 (seed {seed})"
    )
    job.kill_randomly(rng, seed, runs=2, first=2)
    job.run_to_end(timeout=300)
    assert len(job.kills) == 3, f"kills: {job.kills} (seed {seed})"
    conflicts = verify(job, data, es)
    if server is not None and conflicts is not None:
        # A record is re-sent (a 409) at most once per kill and once per lost bulk reply.
        most = len(job.kills) + server.dropped_replies - dropped
        assert max(conflicts.values(), default=0) <= most, f"re-sent more than {most} times"


@pytest.fixture
def es_service(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[EsServiceHandle]:
    """The durable stand-in as the local service ``es-stand-in`` of a home of its own (out
    of the test's ``tmp_path``, which the secrets scan reads: a home's ``services.env`` holds
    the local PostgreSQL's password by design)."""
    home = tmp_path_factory.mktemp("es-home")
    monkeypatch.setenv("EXACTLYONCE_ES_STAND_IN_PORT", str(free_port()))
    up(["es-stand-in"], home)
    try:
        yield EsServiceHandle(f"http://127.0.0.1:{port('es-stand-in')}", None, home)
    finally:
        down(["es-stand-in"], home)


def test_the_sink_server_restarted_under_a_held_run_writes_each_record_once(
    tmp_path: Path, services: dict[str, str], es_service: EsServiceHandle, index: str
) -> None:
    """The sink's own server restarted twice under one run, which must ride both out by
    itself: the stand-in as a process with its journal (service ``es-stand-in``; no
    Elasticsearch is installable here), ``op_type="index"`` (a second write of a record
    bumps its ``_version``, which plain HTTP reads), one shard.

    - held at ``after_shard_commit@2`` (the shard marked, the head not yet): SIGKILLed and
      started again on its journal; the marker must be there, or epoch 2 would be written
      again;
    - held at ``mid_bulk@4`` (the task's first bulk applied, the rest to come): stopped
      cleanly and started again; the task sends the rest to the new process.

    No pipeline kill: every record is written exactly once (the server's write counters over
    its endpoint, and ``_version`` 1 read over HTTP), none refused."""
    job, data = prepare(tmp_path, es_service, index, files=6, mode="index")
    job.extra_args = ("--shards", "1")
    home = es_service.home
    holds = (("after_shard_commit", 2, True), ("mid_bulk", 4, False))
    job.start(hold_at=",".join(f"{point}@{epoch}" for point, epoch, _ in holds))
    restarts = []
    for point, epoch, hard in holds:
        job.wait_until_held(point, timeout=240)
        restarts.append(restart("es-stand-in", hard=hard, down_s=0.5, home=home))
        job.release(point)
        job.wait_for_commit(epoch, timeout=240)  # the run rode it out by itself
    job.finish(timeout=300)
    assert [r.new_pid != r.old_pid for r in restarts] == [True, True]
    assert job.kills == [], "no pipeline kill: the restarts alone"
    conflicts = verify(job, data, es_service)
    assert conflicts == {}, f"a write was refused: {conflicts}"


# Spark's format API (format("exactlyonce")): no shard markers on this path, so a task killed
# after its last bulk, before its IDs reached the catalog, is re-run whole: every re-sent
# `create` must be a 409, never a second write; mid_bulk leaves a task half-written. One job,
# killed at each point in turn: two JVM restarts, for the suite's time.
FORMAT_POINTS = [("mid_bulk", 1), ("after_shard_commit", 2)]


def test_format_api_kill_at_each_named_point(
    tmp_path: Path, services: dict[str, str], es: EsHandle, index: str
) -> None:
    job, data = prepare(tmp_path, es, index, files=6, seed=31)
    assert data.null_keys == 1, "the last file holds a null key: a dead letter"
    job.extra_args = ("--api", "format")
    seen = kill_at_points_reading(job, FORMAT_POINTS)
    job.run_to_end(timeout=300)
    assert job.kills == [f"{point}@{epoch}" for point, epoch in FORMAT_POINTS]
    conflicts = verify(job, data, es)
    if conflicts is not None:
        # One file, one task per epoch: mid_bulk@1 left its first bulk, after_shard_commit@2
        # the whole epoch; the re-runs re-sent exactly those, each refused once.
        every_doc = read_index(job.dsn, job.table)
        first_bulk = of_epoch(seen[0], 1)
        assert len(first_bulk) == BULK_MAX_ACTIONS, f"mid_bulk left {len(first_bulk)} documents"
        assert conflicts == dict.fromkeys(first_bulk | of_epoch(every_doc, 2), 1)
