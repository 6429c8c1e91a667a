"""Bounce the broker itself under a real PySpark job writing through KafkaSink.

The shape of Apache Kafka's own system test ``transactions_test.py`` (bounce rounds of the
brokers, clean or hard, and of the transactional clients, then check the output once): a
private genuine Kafka broker (tests/support/private_kafka.py; the shared one is never touched) is
SIGKILLed and restarted (hard) or stopped with SIGTERM and restarted (soft) while the job is
held at a named point (``EXACTLYONCE_HOLD_AT``, see exactlyonce/faults.py):

- ``release``: the held run goes on by itself against the restarted broker and must commit
  that epoch; then the client is bounced too (SIGKILL of the whole job);
- ``kill``: the client is SIGKILLed while still held, then restarted.

A last run finishes the input. Then plain ``isolation.level=read_committed`` consumers
(kafka-python and confluent-kafka) and the consumption recipe must each see every record ID
exactly once. Every scheduled bounce must have happened, in order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.crash.harness import make_input
from tests.crash.test_kafka_crash import prepare_on, verify
from tests.support.private_kafka import PrivateKafka

pytestmark = [pytest.mark.crash, pytest.mark.integration]

# (point the job is held at, bounce kind, what the client does then). Points: a task with a
# chunk produced inside its open transaction; a task whose transaction committed and is not
# confirmed yet; the driver after the head advanced (Spark's commit not written). Three rounds,
# hard and soft, as Kafka's own transactions_test.py (a round held before any task wrote added
# a JVM start and a broker restart to the suite and nothing the others do not cover).
ROUNDS = [
    ("mid_produce", "hard", "release"),
    ("before_confirm", "soft", "release"),
    ("after_head", "hard", "kill"),
]
FILES = 10
ROWS = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateKafka]:
    private = PrivateKafka(tmp_path_factory.mktemp("private-kafka"))
    began = time.monotonic()
    private.start_new()
    print(f"private broker {private.bootstrap} up in {time.monotonic() - began:.1f}s")
    yield private
    private.stop()


def test_broker_bounces_end_exactly_once(
    tmp_path: Path, services: dict[str, str], broker: PrivateKafka, unique_name: str
) -> None:
    data = make_input(tmp_path / "input", files=FILES, rows=ROWS, seed=11)
    job, data, sink = prepare_on(tmp_path, broker.bootstrap, unique_name, data)
    for point, kind, client in ROUNDS:
        # Two epochs past Spark's last commit: never an epoch the restarted run replays.
        epoch = max(job.spark_commits(), default=-1) + 2
        assert epoch < FILES, f"input ran out before the round at {point}"
        job.start(hold_at=f"{point}@{epoch}")
        job.wait_until_held(point, timeout=240)
        broker.bounce(kind, f"{point}@{epoch}")
        if client == "release":
            job.release(point)
            job.wait_for_commit(epoch, timeout=240)  # rode the bounce out by itself
            job.kill(f"client bounce after the commit of {epoch}")
        else:
            job.kill(f"client bounce held at {point}@{epoch}")
            assert epoch not in job.spark_commits()
    job.run_to_end()
    done = [(b.where.partition("@")[0], b.kind) for b in broker.bounces]
    assert done == [(point, kind) for point, kind, _ in ROUNDS], done
    assert len(job.kills) == len(ROUNDS)
    print("bounces: " + ", ".join(f"{b.kind}@{b.where} {b.down_s:.1f}s" for b in broker.bounces))
    verify(job, data, sink)
