"""The kill -9 demo (``make demo``): Kafka -> Spark -> PostgreSQL and Kafka -> Spark -> Kafka,
each SIGKILLed mid-stream and restarted, still write exactly once.

::

    python -m exactlyonce.integration.lab.demo [--pg-config examples/demo/kafka_to_pg.yaml]
        [--kafka-config examples/demo/kafka_to_kafka.yaml] [--events 6000] [--kills 3] [--seed N]

1. Fresh state (:mod:`.reset`, :mod:`.topics`): both pipelines' checkpoints and Redis dedup
   catalogs removed, the PostgreSQL table dropped and the query's head, shard-commit and
   dead-letter rows deleted; the input topic deleted and created empty, the Kafka sink's
   output, dead-letter, control and probe topics deleted (its head with them).
2. All input is planned from the seed (:mod:`exactlyonce.integration.lab.events`) and
   written up front into the input topic by an at-least-once producer (:mod:`.producer`:
   confluent-kafka, acks=all, no idempotence), so the expected set of event IDs is known:
   retries (an event sent again a few sends later, at a later offset), replays (a block of
   earlier events sent again), and a few records with a null ``event_id``, which must
   become dead letters.
3. Each pipeline (Spark's Kafka source; ``exactlyonce run`` in its own process group,
   :mod:`.runs`, output echoed by :mod:`exactlyonce.integration.lab.echo`) is SIGKILLed,
   whole group, once its sink's head shows 1-3 new epochs (seeded) and a random 0-2 s
   passed, and restarted, ``--kills`` times; the last run goes on until its query has read
   everything (``available_now``).
4. Two audits: the PostgreSQL table read back (:mod:`.audit`: no duplicate, nothing missing,
   every bad record in the dead-letter table once), and the output topic as a plain
   ``read_committed`` consumer sees it (:mod:`.topic_audit`: every record counted per
   ``eo-record-id``; no duplicate, nothing missing, the bad records in the dead-letter topic
   once). One ``RESULT: EXACTLY ONCE`` line, and exit 0, only if both hold.

:mod:`.pipeline` checks the pipeline files fit (Kafka source of the demo's records, a
PostgreSQL sink and a Kafka sink with a control topic of its own); :mod:`.command` is the
command line. The services must be up (``make services``); their addresses come from
``service_env()``.
"""

from __future__ import annotations

from exactlyonce.integration.lab.demo.audit import (
    Audit,
    print_audit,
    read_audit,
    read_expected_ids,
)
from exactlyonce.integration.lab.demo.command import main
from exactlyonce.integration.lab.demo.reset import reset_state
from exactlyonce.integration.lab.demo.runs import (
    IDLE_SECONDS,
    RUN_TIMEOUT_SECONDS,
    head_epoch,
    kill_all,
    kill_group,
    run_with_kills,
    start_run,
    wait_for_new_epoch,
)
from exactlyonce.integration.lab.demo.topic_audit import (
    TopicAudit,
    print_topic_audit,
    read_headers,
    read_topic_audit,
)
from exactlyonce.integration.lab.echo import DEDUP_FIELDS, DEDUP_TOTALS, print_dedup_totals
from exactlyonce.integration.lab.events import (
    ACTIONS,
    FIELDS,
    NULL_KEYS,
    REPLAYS,
    RETRY_RATE,
    Expected,
    Plan,
    Record,
    generate,
)
from exactlyonce.integration.lab.upstream.producer import produce, producer_config
from exactlyonce.integration.lab.upstream.topics import recreate_topics

__all__ = [
    "ACTIONS",
    "DEDUP_FIELDS",
    "DEDUP_TOTALS",
    "FIELDS",
    "IDLE_SECONDS",
    "NULL_KEYS",
    "REPLAYS",
    "RETRY_RATE",
    "RUN_TIMEOUT_SECONDS",
    "Audit",
    "Expected",
    "Plan",
    "Record",
    "TopicAudit",
    "generate",
    "head_epoch",
    "kill_all",
    "kill_group",
    "main",
    "print_audit",
    "print_dedup_totals",
    "print_topic_audit",
    "produce",
    "producer_config",
    "read_audit",
    "read_expected_ids",
    "read_headers",
    "read_topic_audit",
    "recreate_topics",
    "reset_state",
    "run_with_kills",
    "start_run",
    "wait_for_new_epoch",
]
