"""Kafka as users run it: a 3-node cluster (replication factor 3, ``min.insync.replicas=2``)
loses a node under a real PySpark job writing through KafkaSink, or loses a commit's reply.

On the session's cluster (tests/support/kafka_cluster.py), the job (tests/crash/kafka_job.py,
foreachBatch) is held inside an open transaction (its first chunk on the brokers,
``mid_produce``) while a node is SIGKILLed, then released:

- leader failover: the node that leads every partition of the output topic and coordinates
  the shard's transaction (the leader of its ``__transaction_state`` partition), and is not the
  controller; one shard, so the held transaction is the one it coordinates (``ONGOING``);
- controller failover: the active controller of the KRaft quorum, which neither leads an
  output partition nor coordinates either shard's transaction (two shards): it follows every
  partition the job writes, so the new controller must shrink their ISRs without it.

The run rides the failover out or fails (a failed run is started again, as a user's
supervisor would); the client is bounced; the node is restarted on its data; a second run is
started and the node that holds the same role then is SIGKILLed while the run writes freely (a
seeded moment after its first commit), and restarted. Every kill is asserted to have happened,
to the node that held the role at that moment (asked of two sources:
tests/support/kafka_cluster.py). What each run did is printed: rode it out (and how long after
the kill its next commit came) or exited, and the retries the sink logged.

The third test puts a fault proxy in front of each broker (every connection of the job goes
through them; the brokers advertise the proxies) and loses the reply to the commit (``EndTxn``)
of a held data transaction: once (librdkafka sends ``EndTxn`` again and the coordinator answers
with the commit it made: the run rides it out), then for good (the sink's commit retries run
out: the commit is ambiguous, the run fails, the next run's attempt finds the commit in the
control topic and confirms it: a shard skipped). tests/integration/test_kafka_lost_commit.py
shows the same fault on a plain producer, and that a writer which rewrites after it duplicates.

Then, with clients we did not write, read straight from the brokers: plain
``isolation.level=read_committed`` consumers (kafka-python and confluent-kafka) see every
record ID exactly once, none missing, and the consumption recipe agrees
(tests/crash/test_kafka_crash.py ``verify``).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exactlyonce.connectors.kafka import KafkaSink
from exactlyonce.connectors.kafka.protocol import (
    DEFAULT_CONTROL_TOPIC,
    dead_letter_topic_for,
    default_sink_name,
    transactional_id,
)
from exactlyonce.integration.lab.fault_proxy import END_TXN, KafkaFaultProxy
from exactlyonce.integration.lab.services.kafka_cluster import (
    NODES,
    TRANSACTION_STATE_TOPIC,
    coordinator_partition,
)
from tests.crash.harness import Input, crash_seed, make_input
from tests.crash.test_kafka_crash import KafkaJob, prepare_on, verify
from tests.support.kafka_cluster import ClusterUnderTest, Kill

pytestmark = [pytest.mark.crash, pytest.mark.integration]

PARTITIONS = 3
FILES = 12
ROWS = 150  # 1,800 records, a fifth of them duplicates; 125 records a task, in 25-row chunks
POINT = "mid_produce"
# What the sink logs when it asks again through a failover (the commit of a transaction, the
# end offsets of the head's frontier).
RETRIES = ("commit retried", "watermarks asked again")


def _tids(name: str, shards: int) -> list[str]:
    return [transactional_id(name, default_sink_name(name), s) for s in range(shards)]


def _name_coordinated_by(
    cluster: ClusterUnderTest, base: str, shards: int, wanted: Callable[[set[int]], bool]
) -> str:
    """``base`` with a suffix such that the coordinators now of its shards' transactional ids
    (the query name is the topic's) satisfy ``wanted``."""
    leaders = cluster.cluster.leaders(TRANSACTION_STATE_TOPIC)
    for n in range(1000):
        name = f"{base}_{n}"
        tids = _tids(name, shards)
        if wanted({leaders[coordinator_partition(t, len(leaders))] for t in tids}):
            return name
    raise AssertionError(f"no name for {base}")


def roles_of(cluster: ClusterUnderTest, node: int, topic: str, shards: int) -> list[str]:
    """What ``node`` does now for the job: partitions it leads (of the output topic, then of
    the sink's dead-letter and control topics), transactions it coordinates (with their
    state), the controller role."""
    roles = []
    for name in (topic, dead_letter_topic_for(topic), DEFAULT_CONTROL_TOPIC):
        leaders = cluster.cluster.leaders(name)
        led = sorted(p for p, leader in leaders.items() if leader == node)
        if led:
            roles.append(f"leader of {name} {led}")
    for tid in _tids(topic, shards):
        coordinator, state = cluster.transaction(tid)
        if coordinator == node:
            roles.append(f"coordinator of {tid} ({state})")
    if cluster.active_controller() == node:
        roles.append("active controller")
    return roles


def _prepare(
    tmp_path: Path,
    bootstrap: str,
    cluster: ClusterUnderTest,
    name: str,
    leader: int,
    seed: int,
    shards: int,
) -> tuple[KafkaJob, Input, KafkaSink]:
    """The input, the output topic (every partition led by ``leader``) and the job."""
    cluster.create_topic(name, PARTITIONS, leader)
    data = make_input(tmp_path / "input", files=FILES, rows=ROWS, seed=seed)
    job, data, sink = prepare_on(tmp_path, bootstrap, name, data)
    job.extra_args = ("--shards", str(shards))
    return job, data, sink


@dataclass
class Failover:
    """Kill the node that holds ``role`` (``victim()`` names it) under a job with ``shards``
    shards: once held inside a transaction, once while the job writes freely."""

    job: KafkaJob
    cluster: ClusterUnderTest
    shards: int
    victim: Callable[[], int]
    role: str  # part of a role roles_of() names: the victim must hold it
    outcomes: list[str] = field(default_factory=list)

    def _kill(self, where: str, *, in_transaction: bool) -> Kill:
        node = self.victim()
        roles = roles_of(self.cluster, node, self.job.table, self.shards)
        assert any(self.role in r for r in roles), f"node {node} is not the {self.role}: {roles}"
        if in_transaction:
            assert any("(ONGOING)" in r for r in roles), f"no open transaction: {roles}"
        return self.cluster.kill(node, where, roles)

    def held(self, epoch: int, *, coordinator: bool) -> Kill:
        """A run held inside its open transaction at ``epoch`` (its first chunk on the
        brokers); the victim SIGKILLed there (``coordinator``: it must coordinate that open
        transaction), the run released; it rides the failover out or exits."""
        self.job.start(hold_at=f"{POINT}@{epoch}")
        self.job.wait_until_held(POINT, timeout=240)
        kill = self._kill(f"{POINT}@{epoch}", in_transaction=coordinator)
        self.job.release(POINT)
        self._went_on(kill)
        return kill

    def _went_on(self, kill: Kill) -> None:
        """How the run took the kill: rode it out (and how long after the kill its next
        commit came) or exited; the retries the sink logged on the way."""
        outcome = self.job.progress_or_exit(timeout=240)
        if outcome == "rode it out":
            outcome += f", next commit {time.monotonic() - kill.at:.1f}s after the kill"
        log = (self.job.workdir / f"run-{self.job.runs}.log").read_text(errors="replace")
        retried = {what: log.count(what) for what in RETRIES if what in log}
        self.outcomes.append(f"{outcome}{f', {retried}' if retried else ''}")

    def free(self, rng: random.Random) -> Kill:
        """A new run; the victim SIGKILLed while the run writes freely (a seeded moment
        after its first commit); it rides the failover out or exits."""
        self.job.start()
        self.job.wait_for_progress(timeout=240)
        time.sleep(rng.uniform(0.0, 1.0))
        assert self.job.proc is not None and self.job.proc.poll() is None, "the run ended"
        kill = self._kill(f"run {self.job.runs} after epoch {max(self.job.spark_commits())}",
                          in_transaction=False)  # fmt: skip
        self._went_on(kill)
        return kill

    def report(self, kills: list[Kill]) -> str:
        return f"{self.role.strip()}: " + "; ".join(
            f"node {k.node} killed {k.where} ({', '.join(k.roles)}): the run {o}; the node "
            f"back in sync {k.back_s:.1f}s after"
            for k, o in zip(kills, self.outcomes, strict=True)
        )


def _run_failover(
    tmp_path: Path,
    cluster: ClusterUnderTest,
    name: str,
    leader: int,
    shards: int,
    victim: Callable[[], int],
    role: str,
) -> None:
    seed = crash_seed("failover")
    job, data, sink = _prepare(tmp_path, cluster.bootstrap, cluster, name, leader, seed, shards)
    failover = Failover(job, cluster, shards, victim, role)
    before = len(cluster.kills)
    kill = failover.held(epoch=1, coordinator=role != "active controller")
    assert victim() != kill.node, f"{role!r} did not move to a live node"
    if job.proc is not None and job.proc.poll() is None:
        # The client bounces too, before it uses up the input: the next run starts there.
        job.kill("client bounce after the failover")
    cluster.restart(kill)
    cluster.restart(failover.free(random.Random(seed)))
    job.end()
    kills = cluster.kills[before:]
    assert len(kills) == 2, kills
    print(failover.report(kills) + f"; {job.runs} runs, {len(job.kills)} client kills")
    verify(job, data, sink)


def test_leader_and_coordinator_failover_mid_transaction(
    tmp_path: Path, services: dict[str, str], kafka_cluster: ClusterUnderTest, unique_name: str
) -> None:
    """One shard (one transactional id): its coordinator leads every output partition."""
    cluster = kafka_cluster
    cluster.heal()
    controller = cluster.active_controller()
    leader = next(n for n in NODES if n != controller)
    name = _name_coordinated_by(cluster, unique_name, 1, lambda nodes: nodes == {leader})

    def output_leader() -> int:
        return cluster.cluster.leaders(name)[0]

    _run_failover(tmp_path, cluster, name, leader, 1, output_leader, f"leader of {name} ")


def test_controller_failover_mid_transaction(
    tmp_path: Path, services: dict[str, str], kafka_cluster: ClusterUnderTest, unique_name: str
) -> None:
    """Two shards; the controller neither leads an output partition nor coordinates."""
    cluster = kafka_cluster
    cluster.heal()
    controller = cluster.active_controller()
    leader = next(n for n in NODES if n != controller)
    name = _name_coordinated_by(cluster, unique_name, 2, lambda nodes: controller not in nodes)
    _run_failover(
        tmp_path, cluster, name, leader, 2, cluster.active_controller, "active controller"
    )


def test_lost_commit_replies_on_real_brokers(
    tmp_path: Path, services: dict[str, str], kafka_cluster: ClusterUnderTest, unique_name: str
) -> None:
    """One shard (one transactional id: the held one), every connection through the proxies.
    The shortest transaction timeout, so the sink's commit retries end 60 s after a commit
    began."""
    cluster = kafka_cluster
    cluster.heal()
    name = unique_name
    seed = crash_seed("lost EndTxn replies")
    proxies = cluster.start_proxies()
    (tid,) = _tids(name, shards=1)

    def lose_commit_replies(epoch: int, times: int) -> KafkaFaultProxy:
        """A run held inside its data transaction at ``epoch``; the next ``times`` EndTxn
        replies of the shard's id lost; the run released."""
        job.start(hold_at=f"{POINT}@{epoch}")
        job.wait_until_held(POINT, timeout=240)
        coordinator, state = cluster.transaction(tid)
        assert state == "ONGOING", state
        proxies[coordinator].drop_kafka_reply(END_TXN, tid.encode(), times=times)
        job.release(POINT)
        return proxies[coordinator]

    try:
        job, data, sink = _prepare(
            tmp_path, cluster.cluster.proxied_bootstrap, cluster, name, 1, seed, shards=1
        )
        job.extra_args = (*job.extra_args, "--transaction-timeout-ms", "10000")
        # Once: librdkafka sends EndTxn again, the coordinator answers the commit it made;
        # the sink's commit call returns, nothing to retry or verify.
        proxy = lose_commit_replies(epoch=1, times=1)
        assert job.progress_or_exit(timeout=240) == "rode it out"
        assert [d.api_key for d in proxy.dropped] == [END_TXN]
        job.kill("client bounce after the lost reply")
        log = job.log_tail(lines=100_000)
        assert "commit retried" not in log and "AmbiguousCommitError" not in log
        # For good: the sink's commit retries run out; the run fails on an ambiguous commit;
        # the next run's attempt finds the commit in the control topic and confirms it.
        epoch = max(job.spark_commits()) + 2
        proxy = lose_commit_replies(epoch, times=1_000_000)
        outcome = job.progress_or_exit(timeout=240)
        proxy.drop_kafka_reply(END_TXN, times=0)
        lost = sum(len(p.dropped) for p in proxies.values()) - 1  # beyond round one's
        assert outcome.startswith("exited"), outcome
        log = job.log_tail(lines=100_000)
        assert f"epoch {epoch} shard 0: data commit outcome unknown" in log, job.log_tail()
        assert epoch not in job.spark_commits()
        job.run_to_end()
        skipped = re.search(r"JOB DONE .* shards skipped (\d+)", job.log_tail())
        assert skipped and int(skipped.group(1)) >= 1, "the committed shard was verified"
        print(f"EndTxn replies lost: 1 (the run rode it out), then {lost} until the sink "
              f"gave up (the run {outcome}); the next run verified the commit")  # fmt: skip
    finally:
        cluster.stop_proxies()
    job.bootstrap = cluster.bootstrap  # the audit reads from the brokers directly
    verify(job, data, sink)
