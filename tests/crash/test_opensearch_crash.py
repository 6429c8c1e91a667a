"""kill -9 the real PySpark job writing to a GENUINE OpenSearch node; restart it; audit.

The job is tests/crash/es_job.py with ``--engine opensearch`` (OpenSearchSink: the protocol
code the Elasticsearch sink runs, with opensearch-py). The node is the session's one
(tests/support/opensearch_node.py); here it is also SIGKILLed, shut down cleanly and
restarted while a task is between two bulk requests, and reached through the lab's fault
proxy, which lets a ``_bulk`` be applied and throws its reply away.

The audit is the node's own count of writes per ``_id`` (``_version``), read over plain
HTTP (urllib), never through the sink's client. With ``op_type="index"`` a re-sent record is
written again and bumps ``_version``, which any reader sees: those cells use one shard, so
what a kill leaves re-sent is known exactly. With ``create`` a re-send is a 409 and leaves
``_version`` at 1; there the audit checks every ``_id`` is present once, and nothing else.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from exactlyonce.integration.lab.fault_proxy import FaultProxy
from tests.crash.harness import Input, crash_seed, make_input, wait_until
from tests.crash.test_elasticsearch_crash import BULK_MAX_ACTIONS, EsJob, of_epoch
from tests.support import opensearch_http as http
from tests.support.opensearch_node import OpenSearchNode

pytestmark = [pytest.mark.crash, pytest.mark.integration]

CONTROL = "exactlyonce-control"
Snapshot = dict[str, tuple[int, dict[str, Any]]]  # read_index: _id -> (_version, _source)


@dataclass
class OsJob(EsJob):
    """es_job.py against OpenSearch: ``dsn`` is the node's URL (or the proxy's)."""

    retries: int = 6

    def sink_args(self) -> list[str]:
        return [*super().sink_args(), "--engine", "opensearch", "--retries", str(self.retries)]


@pytest.fixture
def index(unique_name: str) -> str:
    return unique_name.replace("_", "-")


def prepare(
    tmp_path: Path, url: str, index: str, files: int = 6, seed: int = 7, **kw: Any
) -> tuple[OsJob, Input]:
    data = make_input(tmp_path / "input", files=files, rows=150, seed=seed)
    return OsJob(tmp_path, index, url, **kw), data


def verify(job: OsJob, data: Input, url: str, rewritten: frozenset[str] = frozenset()) -> None:
    """Every expected ``_id`` at ``_version`` 1 (``rewritten``: 2, where the test knows an
    ``index`` re-sent it) and nothing else, read over HTTP from the node; each null key
    dead-lettered once; the head at Spark's last commit."""
    expected = {i: 2 if i in rewritten else 1 for i in data.expected_ids}
    versions = http.versions(url, job.table)
    wrong = {i: v for i, v in versions.items() if expected.get(i) != v}
    assert not wrong, f"{len(wrong)} _ids written other than expected: {list(wrong.items())[:5]}"
    missing = set(expected) - set(versions)
    assert not missing, f"{len(missing)} expected _ids missing"
    letters = http.versions(url, f"{job.table}-dead-letters")
    assert len(letters) == data.null_keys and set(letters.values()) <= {1}, letters
    head = http.get(url, CONTROL, f"{job.table}|opensearch:{job.table}")
    assert head is not None and head["_source"]["epoch"] == job.last_commit()
    print(
        f"verified on OpenSearch: {len(versions) - len(rewritten)} _ids written once, "
        f"{len(rewritten)} twice (index re-sent), {len(letters)} dead letters",
        flush=True,
    )


def test_index_op_type_kills_at_every_named_point_rewrite_exactly_what_mid_bulk_left(
    tmp_path: Path, services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    """One shard (one task per epoch). ``mid_bulk@1``: the first bulk (50 records) is written,
    the run dies before the shard is marked, the re-run indexes exactly those 50 again
    (version 2); ``after_shard_commit@2`` and ``after_head@3``: nothing is re-sent."""
    job, data = prepare(tmp_path, opensearch.url, index, mode="index")
    job.extra_args = ("--shards", "1")
    schedule = [("mid_bulk", 1), ("after_shard_commit", 2), ("after_head", 3)]
    seen: list[Snapshot] = []
    for point, epoch in schedule:
        job.start(crash_at=f"{point}@{epoch}")
        job.kill_at_marker(point, epoch, timeout=240)
        seen.append(http.read_index(opensearch.url, index))
    job.run_to_end(timeout=300)
    assert job.kills == [f"{point}@{epoch}" for point, epoch in schedule]
    first_bulk = of_epoch(seen[0], 1)
    assert len(first_bulk) == BULK_MAX_ACTIONS, f"mid_bulk left {len(first_bulk)} documents"
    assert {version for version, _ in seen[0].values()} == {1}
    verify(job, data, opensearch.url, rewritten=frozenset(first_bulk))


def test_format_api_index_op_type_kills_rewrite_exactly_what_no_marker_covered(
    tmp_path: Path, services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    """Spark's ``format("exactlyonce")``: no shard markers on this path, so a task killed
    after its bulks, before Spark's commit, is re-run whole. ``op_type="index"``, one file and
    one task per epoch: ``mid_bulk@1`` leaves the first bulk, ``after_shard_commit@2`` the whole
    epoch; exactly those are written a second time (version 2), everything else once."""
    job, data = prepare(tmp_path, opensearch.url, index, seed=31, mode="index")
    assert data.null_keys == 1, "the last file holds a null key: a dead letter"
    job.extra_args = ("--api", "format")
    schedule = [("mid_bulk", 1), ("after_shard_commit", 2)]
    seen: list[Snapshot] = []
    for point, epoch in schedule:
        job.start(crash_at=f"{point}@{epoch}")
        job.kill_at_marker(point, epoch, timeout=240)
        seen.append(http.read_index(opensearch.url, index))
    job.run_to_end(timeout=300)
    assert job.kills == [f"{point}@{epoch}" for point, epoch in schedule]
    first_bulk = of_epoch(seen[0], 1)
    assert len(first_bulk) == BULK_MAX_ACTIONS, f"mid_bulk left {len(first_bulk)} documents"
    whole_epoch = of_epoch(seen[1], 2)
    assert whole_epoch, "after_shard_commit@2 left epoch 2 written"
    verify(job, data, opensearch.url, rewritten=frozenset(first_bulk | whole_epoch))


@pytest.mark.parametrize("restart", ["hard", "clean"])
def test_a_node_restart_mid_bulk_loses_and_doubles_nothing(
    tmp_path: Path, services: dict[str, str], opensearch: OpenSearchNode, index: str, restart: str
) -> None:
    """The task of epoch 1 is held after its first bulk was answered; the node is SIGKILLed
    (hard) or closed (clean) and the task released: its next bulks find no node and are
    retried until the node, started again on its data, answers. ``op_type="index"`` and one
    shard: an acknowledged write lost by the node, or one applied twice, would show."""
    job, data = prepare(tmp_path, opensearch.url, index, mode="index", retries=12)
    job.extra_args = ("--shards", "1")
    job.start(hold_at="mid_bulk@1")
    job.wait_until_held("mid_bulk", timeout=240)
    before = http.versions(opensearch.url, index)
    old_pid = opensearch.pid
    code = opensearch.kill() if restart == "hard" else opensearch.shut_down()
    assert code == (-9 if restart == "hard" else 0), f"the node exited with {code}"
    job.release("mid_bulk")
    time.sleep(3.0)  # the task's next bulk meets a node that is not there
    assert 1 not in job.spark_commits(), "epoch 1 committed while the node was down"
    assert job.proc is not None and job.proc.poll() is None, job.log_tail()
    opensearch.start()
    assert opensearch.pid != old_pid
    print(f"node {restart} restart: back in {opensearch.start_seconds:.1f} s", flush=True)
    after = http.versions(opensearch.url, index)  # the task may have gone on meanwhile
    lost = {i for i, v in before.items() if after.get(i) != v}
    assert not lost, f"the node lost or changed {len(lost)} acknowledged writes"
    job.end(timeout=300)
    verify(job, data, opensearch.url)


def test_seeded_random_kills_and_lost_bulk_replies(
    tmp_path: Path, services: dict[str, str], opensearch: OpenSearchNode, index: str
) -> None:
    """The job reaches the node through the fault proxy, which twice lets a ``_bulk`` be
    applied and loses its reply; then seeded random kills. ``create``: every re-send is a
    409, so each ``_id`` stays at version 1."""
    seed = crash_seed()
    rng = random.Random(seed)
    host, port = opensearch.url.removeprefix("http://").split(":")
    proxy = FaultProxy(host, int(port))
    job, data = prepare(tmp_path, f"http://{host}:{proxy.port}", index, files=12, seed=seed)
    try:
        job.start()
        job.wait_for_progress(timeout=240)
        for n in range(2):
            proxy.drop_reply_to(b"_bulk")
            wait_until(lambda: not proxy.armed(), f"lost bulk reply {n + 1}")
        assert len(proxy.dropped) == 2, proxy.dropped
        assert job.kill_at_random_moment(rng, f"random kill 1 (seed {seed})", max_delay=1.5), (
            f"the run finished before random kill 1 (seed {seed})"
        )
        job.kill_randomly(rng, seed, runs=2, first=2)
        job.run_to_end(timeout=300)
        assert len(job.kills) == 3, f"kills: {job.kills} (seed {seed})"
        verify(job, data, opensearch.url)
    finally:
        job.stop_if_running()
        proxy.stop()
