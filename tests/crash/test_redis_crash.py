"""kill -9 a real PySpark job writing to Redis at every named point; restart the sink's Redis.

One seeded schedule per write mode (``stream``, append-only: the hard one; ``hash`` and
``string``):

1. four runs, each SIGKILLed at one named point (``before_write``, ``mid_write`` between two
   staged chunks, ``after_shard_commit``, ``after_head``), at random epochs in random order.
   One of them (or the next run, when no run has two epochs to go) is held at a point of its
   first fresh epoch (``before_write``, ``mid_write`` with a task's connection open, or
   ``after_shard_commit``; seeded) while the sink's redis-server is SIGKILLed and restarted
   on its AOF; released, the run must ride it out by itself and commit that epoch. (A restart
   at a free-running moment could land after the run's last epoch before its crash point,
   where nothing is left to ride out: CI once waited there for a commit that could not come);
2. stream mode only: a run SIGKILLed at a random moment (budget: each run starts a JVM);
3. a last run to the end.

The input repeats 25% of its records (within and across files) and holds null keys. The end
state is read twice, with ``redis-cli`` and with the Python client (redis-py, not the sink's
code): every expected record exactly once, nothing else, and the writes counted (stream
entries per record ID, read with ``XRANGE`` and ``XLEN``, and the ``XADD`` commands in the
sink's AOF, which an ``XDEL`` could not hide; ``HSET``/``SET`` commands per key in the AOF,
which a unique key cannot hide). Replay a failure with ``EXACTLYONCE_CRASH_SEED=<seed>``
(printed).
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from exactlyonce.dedup.ids import record_id
from exactlyonce.integration.lab.fault_proxy import FaultProxy
from exactlyonce.integration.lab.services.env import HOST
from tests.crash.harness import Input, Job, crash_seed, make_input, wait_until
from tests.crash.redis_job import KEY_KIND, key_template
from tests.support.redis_fixtures import SinkRedis

pytestmark = [pytest.mark.crash, pytest.mark.integration]

FILES = 9
# No before_write kill: the driver's shared protocol before any write of the epoch, the same
# for every sink (PostgreSQL's test and make soak kill there); it stays a hold point below.
POINTS = ["mid_write", "after_shard_commit", "after_head"]
# Where a run is held while the sink's Redis restarts: the driver before its tasks; a task with
# an open connection between two staged chunks; a task after its commit (the driver's
# connection must then ride it out when it advances the head).
HOLD_POINTS = ["before_write", "mid_write", "after_shard_commit"]


@dataclass
class RedisJob(Job):
    """harness.Job, running redis_job.py; ``dsn`` is the sink's URL (passed by environment)."""

    script: ClassVar[Path] = Path(__file__).with_name("redis_job.py")
    write: str = "hash"

    def sink_env(self) -> dict[str, str]:
        return {"EXACTLYONCE_SINK_REDIS_URL": self.dsn}

    def sink_args(self) -> list[str]:
        return ["--write", self.write]

    def progress(self, commits: int, timeout: float = 240) -> None:
        """Wait until this run added ``commits`` epochs to Spark's commit log (or finished)."""
        before = self.spark_commits()
        self._wait(
            lambda: len(self.spark_commits() - before) >= commits or self.finished(),
            timeout,
            f"{commits} more Spark commit(s)",
        )

    def finished(self) -> bool:
        return self.proc is not None and self.proc.poll() == 0


@pytest.mark.parametrize("write", ["stream", "hash", "string"])
def test_kills_and_sink_restart_end_exactly_once(
    write: str,
    tmp_path: Path,
    sink_redis: SinkRedis,
    unique_name: str,
) -> None:
    seed = crash_seed("redis crash schedule")
    rng = random.Random(seed)
    data = make_input(tmp_path / "input", files=FILES, rows=120, seed=seed)
    job = RedisJob(tmp_path, unique_name, sink_redis.url, write=write)
    points = rng.sample(POINTS, len(POINTS))
    epochs = sorted(rng.sample(range(1, FILES - 3), len(points)))
    # Run n replays epoch starts[n] (killed in the run before) and writes fresh epochs from
    # starts[n] + 1. The sink's Redis is restarted while one run is held at a point of its first
    # fresh epoch: a run whose crash epoch comes later, else the run after the named kills.
    starts = [0, *epochs]
    eligible = [run for run in range(len(epochs)) if epochs[run] - starts[run] >= 2]
    restart_in = rng.choice(eligible) if eligible else len(epochs)
    hold_point = rng.choice(HOLD_POINTS)
    restarts_before = sink_redis.restarts

    def start(run: int, crash_at: str | None = None) -> None:
        if run != restart_in:
            job.start(crash_at=crash_at)
            return
        hold_epoch = starts[run] + 1
        job.start(crash_at=crash_at, hold_at=f"{hold_point}@{hold_epoch}")
        job.wait_until_held(hold_point, timeout=240)
        sink_redis.restart(down_seconds=rng.uniform(0.5, 2.0))
        job.release(hold_point)
        print(f"sink redis-server SIGKILLed and restarted: run {job.runs} held at {hold_point}")
        job.wait_for_commit(hold_epoch, timeout=240)  # the job rode it out by itself

    for run, (point, epoch) in enumerate(zip(points, epochs, strict=True)):
        start(run, crash_at=f"{point}@{epoch}")
        job.kill_at_marker(point, epoch, timeout=240)
    if write == "stream":  # the append-only mode also gets a kill at a random moment
        start(len(epochs))
        job.progress(1)
        assert job.kill_at_random_moment(rng, f"random kill (seed {seed})", max_delay=1.5), (
            f"the run finished before its random kill (seed {seed})"
        )
        start(len(epochs) + 1)
    else:
        start(len(epochs))
    job.finish(timeout=300)
    assert sink_redis.restarts == restarts_before + 1
    scheduled = [f"{point}@{epoch}" for point, epoch in zip(points, epochs, strict=True)]
    scheduled += [f"random kill (seed {seed})"] if write == "stream" else []
    assert job.kills == scheduled, f"kills: {job.kills} (seed {seed})"
    verify(job, data, sink_redis, write)


def verify(job: RedisJob, data: Input, server: SinkRedis, write: str) -> None:
    from exactlyonce.connectors.redis import RedisSink

    # After a kill, Spark may plan the files of two planned-but-unwritten batches into one
    # epoch, so there can be fewer epochs than files; never a gap.
    last_commit = job.last_commit()
    sink = RedisSink(
        server.url,
        key_template(job.table, write),
        ["event_id"],
        job.table,
        write=write,  # type: ignore[arg-type]
        check=False,
    )
    r = server.client()
    prefix = sink.prefix
    if write == "stream":
        stream = f"{job.table}:ev:click"
        py_ids = Counter(f[b"record_id"].decode() for _, f in r.xrange(stream))
        cli_lines = server.cli_raw("XRANGE", stream, "-", "+")
        cli_ids = Counter(
            cli_lines[i + 1] for i, line in enumerate(cli_lines[:-1]) if line == "record_id"
        )
        assert int(server.cli_raw("XLEN", stream)[0]) == len(data.expected_ids)
        appends = server.write_counts("XADD", stream)
        assert appends == {stream: len(data.expected_ids)}, f"XADDs in the AOF: {appends}"
        for name, ids in (("python", py_ids), ("redis-cli", cli_ids)):
            twice = {i: n for i, n in ids.items() if n > 1}
            assert not twice, f"{name}: {len(twice)} records appended more than once"
            assert set(ids) == data.expected_ids, (
                f"{name}: {len(data.expected_ids - set(ids))} missing, "
                f"{len(set(ids) - data.expected_ids)} unexpected"
            )
        assert r.smembers(sink.stream_registry_key) == {stream.encode()}
    else:
        kind = f":{KEY_KIND[write]}:"
        pattern = f"{job.table}{kind}*"
        py_keys = {k.decode() for k in r.scan_iter(match=pattern, count=1000)}
        cli_keys = set(server.cli_raw("--scan", "--pattern", pattern))
        expected_keys = {f"{job.table}{kind}{i}" for i in event_ids(data)}
        assert py_keys == cli_keys == expected_keys, (
            f"{len(expected_keys - py_keys)} missing, {len(py_keys - expected_keys)} unexpected"
        )
        writes = server.write_counts("HSET" if write == "hash" else "SET", f"{job.table}{kind}")
        twice = {k: n for k, n in writes.items() if n > 1}
        assert not twice, f"{len(twice)} keys written more than once: {list(twice.items())[:5]}"
        assert set(writes) == expected_keys
        assert {record_id([k.rsplit(kind, 1)[1]]) for k in py_keys} == data.expected_ids
        sample = sorted(py_keys)[0]
        if write == "hash":
            assert r.hget(sample, "event_id").decode() == sample.rsplit(kind, 1)[1]
            assert server.cli_raw("HGET", sample, "action") == ["click"]
        else:
            stored = json.loads(r.get(sample))
            assert stored["event_id"] == sample.rsplit(kind, 1)[1]
            assert json.loads(server.cli_raw("GET", sample)[0]) == stored
            assert stored["action"] == "click"
    letters = int(server.cli_raw("XLEN", sink.dead_letter_key)[0])
    assert letters == r.xlen(sink.dead_letter_key) == data.null_keys, "each null key once"
    assert int(r.hget(sink.head_key, "epoch")) == last_commit, "head = Spark's last epoch"
    leftovers = [k.decode() for k in r.scan_iter(match=f"{prefix}:*")]
    assert not [k for k in leftovers if ":stage:" in k or ":done:" in k], leftovers
    print(
        f"{write}: {len(data.expected_ids)} records exactly once after kills {job.kills} and "
        "a sink restart"
    )


def event_ids(data: Input) -> set[str]:
    """The event IDs behind the expected record IDs (make_input names them e0, e1, ...)."""
    found = {f"e{n}" for n in range(data.records) if record_id([f"e{n}"]) in data.expected_ids}
    assert len(found) == len(data.expected_ids)
    return found


# Spark's format API (format("exactlyonce"), hash writes): no shard markers on this path, so a
# task killed after its apply script, before its IDs reached the catalog, is re-run whole; the
# apply script must then skip every key that holds its record already (the AOF would show a
# second HSET), and one killed in the driver's commit before the head (the re-run meets the
# catalog). One job, killed at each point in turn: two JVM restarts, for the suite's time.
FORMAT_POINTS = [("after_shard_commit", 1), ("before_head", 2)]


def test_format_api_kill_at_each_named_point(
    tmp_path: Path, sink_redis: SinkRedis, unique_name: str
) -> None:
    data = make_input(tmp_path / "input", files=6, rows=120, seed=31)
    assert data.null_keys == 1, "the last file holds a null key: a dead letter"
    job = RedisJob(tmp_path, unique_name, sink_redis.url, extra_args=("--api", "format"))
    job.kill_at_points(FORMAT_POINTS, timeout=240)
    job.run_to_end(timeout=300)
    assert job.kills == [f"{point}@{epoch}" for point, epoch in FORMAT_POINTS]
    verify(job, data, sink_redis, "hash")


def test_lost_script_replies_are_verified_not_assumed(
    tmp_path: Path, sink_redis: SinkRedis, unique_name: str
) -> None:
    """F6: the job reaches its Redis through a proxy that, three times at seeded moments
    while the job runs, lets the next ``EVALSHA`` (a task's apply script or the driver's
    head) run on the server, then throws its reply away and cuts the connection. A resent
    script must find its own marker (stream mode: an append-only write, the hard case)."""
    seed = crash_seed("lost reply schedule")
    rng = random.Random(seed)
    data = make_input(tmp_path / "input", files=FILES, rows=120, seed=seed)
    proxy = FaultProxy(HOST, sink_redis.port)
    url = sink_redis.url.replace(f":{sink_redis.port}/", f":{proxy.port}/")
    job = RedisJob(tmp_path, unique_name, url, write="stream")
    try:
        for n in range(3):
            if job.proc is None or job.proc.poll() is not None:
                job.start()
            job.wait_for_progress(timeout=240)
            time.sleep(rng.uniform(0.0, 0.8))
            assert job.proc is not None and job.proc.poll() is None, "the input ran out"
            proxy.drop_reply_to(b"EVALSHA")
            wait_until(lambda: not proxy.armed(), f"lost reply {n + 1}")
            outcome = job.progress_or_exit()
            print(f"lost reply {n + 1}: {proxy.dropped[-1]}; run {job.runs} {outcome}")
        assert len(proxy.dropped) == 3
        job.end()
        verify(job, data, sink_redis, "stream")
    finally:
        job.stop_if_running()
        proxy.stop()
