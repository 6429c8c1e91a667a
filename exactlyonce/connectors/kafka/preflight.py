"""A KafkaSink's preflight: the broker, its topics and its transactions, checked before any
write, and the broker probe that says whether ``read_committed`` hides aborted records.

Run once per sink object in the driver (:meth:`KafkaSink.preflight`). It creates the
compacted control topic, the dead-letter topic and the probe topic when missing (the data
topic only with ``create_topic``), shrinks the sink's record size limit to the topic's
``max.message.bytes``, and refuses a transaction timeout the broker would refuse.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from exactlyonce.connectors.kafka.clients import init_transactions
from exactlyonce.connectors.kafka.consume import drain, offset_of, partitions_of
from exactlyonce.connectors.kafka.protocol import (
    KAFKA_DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    PROBE_KEY,
    transactional_id,
)
from exactlyonce.errors import ConfigError, SinkUnavailableError
from exactlyonce.retry import RetryPolicy

if TYPE_CHECKING:
    from exactlyonce.connectors.kafka.parts import KafkaParts

log = logging.getLogger("exactlyonce.kafka")

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_PROBES: dict[str, bool] = {}  # bootstrap servers -> hides aborted records (per process)
_PROBES_LOCK = threading.Lock()
PROBE_RETENTION_MS = 3_600_000  # the probe topic holds two small records per query start
PROBE_WAIT_S = 10.0  # a probe read that makes no progress this long is inconclusive


def check_topic_name(field: str, name: object) -> str:
    if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            field, f"not a valid Kafka topic name: {name!r} (1-249 of [A-Za-z0-9._-])"
        )
    return name


@dataclass(frozen=True)
class Layout:
    """What the preflight learned about the topics."""

    control_partitions: list[int]
    topic_partitions: int
    hides_aborted: bool


def run(sink: KafkaParts) -> Layout:
    """Check and create the topics, check the timeout, probe the broker. Raises
    SinkUnavailableError when the broker cannot be reached, ConfigError for what the user
    must change. May lower ``sink.max_message_bytes`` to the topic's limit."""
    admin, meta = connect(sink)
    _ensure_topics(sink, admin, existing_topics(meta))
    check_timeout(sink, admin, meta)
    return Layout(
        control_partitions=partitions_of(admin, sink.control_topic, sink.connect_timeout),
        topic_partitions=len(partitions_of(admin, sink.topic, sink.connect_timeout)),
        hides_aborted=probe(sink),
    )


def connect(sink: KafkaParts) -> tuple[AdminClient, Any]:
    """An admin client of the sink's broker and the cluster's metadata (every topic);
    SinkUnavailableError, with the transport's reason, when the broker does not answer."""
    errors: list[str] = []
    admin = sink.clients.admin(errors)
    try:
        meta = admin.list_topics(timeout=sink.connect_timeout)
    except KafkaException as exc:
        admin.poll(0.2)  # serves error_cb: the transport error says more than "timed out"
        reason = "; ".join(dict.fromkeys(errors[-3:])) or exc.args[0].str()
        raise SinkUnavailableError(
            f"cannot reach {sink.where} within {sink.connect_timeout:g}s: "
            f"{sink.clients.scrub(reason)}"
        ) from None
    return admin, meta


def existing_topics(meta: Any) -> set[str]:
    return {name for name, t in meta.topics.items() if t.error is None}


def _ensure_topics(sink: KafkaParts, admin: AdminClient, existing: set[str]) -> None:
    wanted: list[tuple[str, int, dict[str, str]]] = []
    if sink.topic not in existing:
        if not sink.create_topic:
            raise ConfigError(
                "topic",
                f"topic {sink.topic!r} does not exist on {sink.where} and create_topic is "
                "off: create it, or pass create_topic=True",
            )
        wanted.append((sink.topic, sink.partitions or -1, {}))
    if sink.control_topic not in existing:
        wanted.append((sink.control_topic, 1, {"cleanup.policy": "compact"}))
    else:
        check_compacted(sink, admin)  # refused before anything is created
    if sink.dead_letter_topic not in existing:
        wanted.append((sink.dead_letter_topic, 1, {}))
    if sink.probe_topic not in existing:
        wanted.append((sink.probe_topic, 1, {"retention.ms": str(PROBE_RETENTION_MS)}))
    for name, partitions, config in wanted:
        _create(sink, admin, name, partitions, config)
    if wanted:
        await_listed(admin, [name for name, _, _ in wanted], sink.connect_timeout)
    _fit_message_size(sink, admin)


def _create(
    sink: KafkaParts, admin: AdminClient, name: str, partitions: int, config: dict[str, str]
) -> None:
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config)],
        request_timeout=sink.connect_timeout,
    )
    try:
        futures[name].result()
    except KafkaException as exc:
        err = exc.args[0]
        if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            field = {
                sink.topic: "topic",
                sink.control_topic: "control_topic",
                sink.probe_topic: "control_topic",
            }.get(name, "dead_letter_topic")
            raise ConfigError(
                field,
                f"cannot create topic {name!r} on {sink.where}: {sink.clients.scrub(err.str())}",
            ) from None
    else:
        log.info("created topic %s %s", name, config or "")


class _NotListed(Exception):
    """Topics the cluster's metadata does not list yet, each with a leader per partition."""


def _not_listed(exc: BaseException) -> bool:
    return isinstance(exc, _NotListed)


def await_listed(admin: Any, names: Sequence[str], timeout_s: float) -> None:
    """Return once the cluster lists every topic of ``names`` with a leader for each of its
    partitions. A creation is accepted by the controller before every broker knows the topic,
    and the next metadata answer may come from one that does not yet. SinkUnavailableError,
    naming the topics, when they are not listed within ``timeout_s``."""
    policy = RetryPolicy(
        attempts=1_000_000,  # the deadline ends it
        initial_s=0.05,
        max_s=0.5,
        deadline_s=timeout_s,
        transient=_not_listed,
    )

    def missing() -> None:
        topics = admin.list_topics(timeout=timeout_s).topics  # all: see partitions_of
        absent = [n for n in names if not listed_with_leaders(topics.get(n))]
        if absent:
            raise _NotListed(absent)

    try:
        policy.call(missing)
    except _NotListed as exc:
        raise SinkUnavailableError(
            f"topic(s) {', '.join(map(repr, exc.args[0]))} created but not listed by the "
            f"cluster with a leader for every partition within {timeout_s:g}s"
        ) from None


def listed_with_leaders(topic: Any) -> bool:
    """Whether a topic's metadata (None when not listed) has partitions, each led, no error."""
    if topic is None or topic.error is not None or not topic.partitions:
        return False
    return all(p.error is None and p.leader >= 0 for p in topic.partitions.values())


def _topic_setting(sink: KafkaParts, admin: AdminClient, topic: str, name: str) -> str | None:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout=sink.connect_timeout)
    except Exception as exc:  # not every broker answers DescribeConfigs
        log.warning("could not read %s of topic %s: %s", name, topic, exc)
        return None
    entry = configs.get(name)
    return str(entry.value) if entry is not None and entry.value is not None else None


def _fit_message_size(sink: KafkaParts, admin: AdminClient) -> None:
    """A record the topic would refuse must fail at produce() (it becomes a dead letter),
    not at commit (which would abort the whole shard, every retry)."""
    limit = _topic_setting(sink, admin, sink.topic, "max.message.bytes")
    if limit and limit.isdigit() and int(limit) < sink.max_message_bytes:
        sink.max_message_bytes = max(1000, int(limit))
        log.info("%s: records above %d bytes go to dead letters", sink, sink.max_message_bytes)


def check_compacted(sink: KafkaParts, admin: AdminClient) -> None:
    policy = _topic_setting(sink, admin, sink.control_topic, "cleanup.policy")
    if policy and "compact" not in policy:
        raise ConfigError(
            "control_topic",
            f"{sink.control_topic!r} has cleanup.policy={policy}: heads would expire with "
            "retention. Use a compacted topic (cleanup.policy=compact)",
        )


def check_timeout(sink: KafkaParts, admin: AdminClient, meta: Any) -> None:
    limit, source = KAFKA_DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, "Kafka's default"
    broker = next(iter(meta.brokers), None)
    if broker is not None:
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        try:
            configs = admin.describe_configs([resource])[resource].result(
                timeout=sink.connect_timeout
            )
            entry = configs.get("transaction.max.timeout.ms")
            if entry is not None and entry.value:
                limit, source = int(entry.value), f"broker {broker}'s setting"
        except Exception as exc:
            log.debug("broker %s config not readable: %s", broker, exc)
    if sink.transaction_timeout_ms > limit:
        raise ConfigError(
            sink.timeout_field,
            f"transaction.timeout.ms={sink.transaction_timeout_ms} exceeds the broker's "
            f"transaction.max.timeout.ms={limit} ({source}); the broker would refuse "
            "init_transactions",
        )


def probe(sink: KafkaParts) -> bool:
    """Does a read_committed consumer of this broker skip an aborted transaction?

    Asked once per bootstrap servers and process. Aborts a transaction on the probe topic,
    then writes a plain record after it, and reads both read_committed: whichever comes first
    answers. An inconclusive read answers False (trust confirmations only), which is safe.
    """
    with _PROBES_LOCK:
        known = _PROBES.get(sink.bootstrap_servers)
    if known is not None:
        return known
    probe_offset, end = _write_probe(sink)
    seen = _probe_seen(sink, probe_offset, end)
    if seen is None:
        return False
    hides = not seen
    with _PROBES_LOCK:
        _PROBES[sink.bootstrap_servers] = hides
    log.info(
        "%s %s aborted records from read_committed consumers",
        sink.where,
        "hides" if hides else "still DELIVERS",
    )
    return hides


def is_fenced(exc: BaseException | None) -> bool:
    """A newer producer with the same transactional id fenced this one. (The fatal error may
    surface from inside a delivery callback as a ``SystemError`` caused by it.)"""
    while exc is not None:
        if isinstance(exc, KafkaException) and exc.args:
            err = exc.args[0]
            return isinstance(err, KafkaError) and err.code() in _FENCED_CODES
        exc = exc.__cause__ or exc.__context__
    return False


_FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)
# Two starts of one sink (a restarted job and `exactlyonce heads`, say) may probe at the same
# moment under the probe's one transactional id: the later init fences the earlier probe,
# which then writes itself again.
PROBE_FENCED = RetryPolicy(attempts=6, initial_s=0.3, max_s=3.0, transient=is_fenced)


def _write_probe(sink: KafkaParts) -> tuple[int, int]:
    """An aborted record and a plain one after it, on partition 0 of the probe topic: their
    offsets. A probe fenced by another start's is written again (:data:`PROBE_FENCED`)."""

    def fenced(_exc: BaseException, retry: int, wait_s: float) -> None:
        log.info("%s: broker probe fenced by another start of this sink; again in %.1f s "
                 "(retry %d)", sink, wait_s, retry)  # fmt: skip

    return PROBE_FENCED.call(lambda: _write_probe_once(sink), on_retry=fenced)


def _write_probe_once(sink: KafkaParts) -> tuple[int, int]:
    # Stable per (query, sink): a driver killed inside the probe leaves its transaction open,
    # and brokers without transaction timeouts (Tansu) never end it; the next start's probe
    # fences it (init_transactions aborts it).
    tid = transactional_id(sink.query_name, sink.sink_name, -1)
    producer = sink.clients.transactional(tid, sink.transaction_timeout_ms)
    try:
        init_transactions(producer, sink.probe_topic, sink.connect_timeout)
    except KafkaException as exc:
        err = exc.args[0]
        if err.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
            raise ConfigError(
                sink.timeout_field,
                f"the broker refuses transaction.timeout.ms={sink.transaction_timeout_ms} "
                "(above its transaction.max.timeout.ms)",
            ) from None
        raise SinkUnavailableError(
            f"{sink.where}: transactions unavailable: {sink.clients.scrub(err.str())}"
        ) from None
    offsets: list[int] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        offsets.append(-1 if err else offset_of(msg))

    topic, partition = sink.probe_topic, 0
    producer.begin_transaction()
    producer.produce(topic, "aborted", PROBE_KEY, partition, on_delivery=delivered)
    producer.flush(sink.connect_timeout)
    producer.abort_transaction(sink.connect_timeout)
    after = sink.clients.producer()  # not transactional: visible to every reader
    after.produce(topic, "after", PROBE_KEY, partition, on_delivery=delivered)
    after.flush(sink.connect_timeout)
    if len(offsets) != 2 or min(offsets) < 0:
        raise SinkUnavailableError(f"{sink.where}: the broker probe could not be written")
    return offsets[0], offsets[1]


def _probe_seen(sink: KafkaParts, probe_offset: int, end: int) -> bool | None:
    """Did read_committed deliver the aborted record first? None: inconclusive."""
    seen: bool | None = None
    client = sink.clients.consumer("read_committed")
    try:
        ranges = {(sink.probe_topic, 0): (probe_offset, end + 1)}
        wait = max(PROBE_WAIT_S, sink.connect_timeout)
        for msg in drain(client, ranges, wait, "the probe"):
            if seen is None and offset_of(msg) in (probe_offset, end):
                seen = offset_of(msg) == probe_offset
    except SinkUnavailableError:
        # Held back by an open transaction (a probe killed inside its own, on a broker that
        # never times one out): assume the broker shows aborted records. Safe for the
        # recipe; only plain consumers may then see a re-write.
        log.warning("%s: broker probe inconclusive; trusting confirmations only", sink)
        return None
    finally:
        client.close()
    return bool(seen)  # neither record seen: as if the aborted one was hidden
