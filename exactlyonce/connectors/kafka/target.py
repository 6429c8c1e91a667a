"""What a Kafka shard task needs to write, built by the driver and pickled to the executors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from exactlyonce.connectors.kafka.clients import client_log
from exactlyonce.connectors.kafka.protocol import transactional_id
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.retry import RetryPolicy
from exactlyonce.secrets import Secret, scrub, secret_values

PRODUCER_DEFAULTS: dict[str, Any] = {
    "linger.ms": 5,
    # Every shard task makes a producer: librdkafka waits reconnect.backoff.ms / 2 before
    # connecting to the transaction coordinator, so init_transactions took 54 ms with the
    # default 100 and 15 ms with 10 (median of 24, Tansu). Backoff still grows to its max.
    "reconnect.backoff.ms": 10,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 500_000,
}
COMMIT_RETRY_WAIT_S = 0.2  # between commits of a transaction that failed retriably
COMMIT_ATTEMPTS = 1_000_000  # unbounded in practice: the deadline (timeout_s) ends retries


def retriable_commit(exc: BaseException) -> bool:
    """A commit error librdkafka says may succeed when the commit is called again."""
    return isinstance(exc, KafkaException) and bool(exc.args[0].retriable())


@dataclass(frozen=True)
class KafkaTarget:
    """Everything a task needs to write; picklable, holds no connection, prints no secret."""

    bootstrap_servers: str
    config: Secret  # the user's producer_config, as JSON
    topic: str
    dead_letter_topic: str
    control_topic: str
    control_partition: int
    query_name: str
    sink_name: str
    columns: tuple[str, ...]
    has_key: bool
    transaction_timeout_ms: int
    hides_aborted: bool
    scan_from: int
    max_message_bytes: int = 1_000_000
    timeout_s: float = 60.0
    dedup: DedupPlan | None = None
    frame_records: int = 1  # records per message; > 1: frames (see .frames)
    frame_bytes: int = 0
    topic_partitions: int = 0  # frames go round-robin over them (0: the client picks)
    commit_retry: RetryPolicy | None = None  # None: commit_policy()'s default

    def user_config(self) -> dict[str, Any]:
        return dict(json.loads(self.config.reveal()))

    def producer_config(self, shard: int, txn_id: str | None = None) -> dict[str, Any]:
        """A shard's producer (``txn_id``: another transactional id, a Spark partition's)."""
        return {
            **PRODUCER_DEFAULTS,
            **self.user_config(),
            "bootstrap.servers": self.bootstrap_servers,
            "transactional.id": txn_id or transactional_id(self.query_name, self.sink_name, shard),
            "enable.idempotence": True,
            "acks": "all",
            "transaction.timeout.ms": self.transaction_timeout_ms,
            "message.max.bytes": self.max_message_bytes,
            "logger": client_log,
        }

    def commit_policy(self) -> RetryPolicy:
        """How a transaction's commit is retried: every ``COMMIT_RETRY_WAIT_S`` while the
        error is retriable, until ``timeout_s`` has passed."""
        if self.commit_retry is not None:
            return self.commit_retry
        return RetryPolicy(
            attempts=COMMIT_ATTEMPTS,
            initial_s=COMMIT_RETRY_WAIT_S,
            max_s=COMMIT_RETRY_WAIT_S,
            deadline_s=self.timeout_s,
            transient=retriable_commit,
        )

    def scrubbed(self, text: str) -> str:
        """``text`` without any secret of the user's configuration."""
        return scrub(text, *secret_values(self.user_config()))
