"""The dedup protocol's Hypothesis state machine, shared by its real-service and in-memory runs.

The sink runs in ``mode="append"`` (no unique index), so exactly-once rests on the head, the
shard commits and the catalog alone, and a double write would show up as a duplicate row.
Tasks run in-process on the real task writers (the same code Spark ships to executors), with
records sharded exactly as Spark shards them (``spark_shard``). Crashes are exceptions that
abandon the driver object at named points; a restart is a new sink object.

After every step the table is compared with the model: no duplicate, no loss.

A subclass says where the sink writes and where the catalog lives:
``tests/integration/test_dedup_protocol.py`` (PostgreSQL and Redis) and
``tests/unit/test_protocol_memory.py`` (:mod:`exactlyonce.testing`'s fakes).
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pyspark.sql.types import LongType, StringType, StructField, StructType

from exactlyonce.connectors.base import ExactlyOnceSink
from exactlyonce.dedup import shard as shard_module
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.testing import in_process_write

SCHEMA = StructType([StructField("event_id", StringType()), StructField("amount", LongType())])
CRASHES = ("none", "before_write", "mid_shards", "after_commit_before_marks", "after_head")
_counter = itertools.count()


class Crash(Exception):
    """Stands for the driver or a task dying at a named point."""


class ProtocolMachine(RuleBasedStateMachine):
    """The rules and the invariant; subclasses provide the sink, the table and the catalog."""

    def __init__(self) -> None:
        super().__init__()
        self.table = f"proto_{next(_counter)}_{id(self) % 100000}"
        self.config = self._dedup_config(
            expected_ids=40, fp_rate=0.3, retention_epochs=1000
        )  # a tiny filter: many false positives
        self.sink: ExactlyOnceSink | None = self._new_sink()
        self.sink.preflight(SCHEMA)
        self.next_epoch = 0
        self.history: list[list[str]] = []  # input of each completed epoch
        self.expected: set[str] = set()
        self.pending: tuple[int, list[str]] | None = None
        self.fresh_keys = itertools.count()

    # -- what a subclass provides ------------------------------------------------------

    def _dedup_config(self, **options: Any) -> DedupConfig:
        raise NotImplementedError

    def _new_sink(self) -> ExactlyOnceSink:
        """A sink in append mode with 3 shards, ``self.table`` as table and query name."""
        raise NotImplementedError

    def _event_ids(self) -> list[str]:
        """Every row's event_id in the sink's table, duplicates included."""
        raise NotImplementedError

    def _catalog_client(self) -> Any:
        """A client of the catalog's Redis (scan_iter, delete, close)."""
        raise NotImplementedError

    # -- running an epoch --------------------------------------------------------------

    def _run(self, epoch: int, keys: list[str], crash: str) -> Any:
        sink = self.sink
        assert sink is not None

        def before_task(n: int) -> None:
            if crash == "before_write" or (crash == "mid_shards" and n == 1):
                raise Crash(crash)

        records = [{"event_id": k, "amount": len(k)} for k in keys]
        write = in_process_write(sink, records, before_task=before_task)
        original = shard_module.TaskDedup.after_commit
        if crash == "after_commit_before_marks":

            def die(self: Any) -> None:
                raise Crash(crash)

            shard_module.TaskDedup.after_commit = die  # type: ignore[method-assign]
        try:
            report = sink.run_epoch(epoch, "query-1", SCHEMA, lambda: 3, write)
        finally:
            shard_module.TaskDedup.after_commit = original  # type: ignore[method-assign]
        if crash == "after_head":
            raise Crash(crash)
        return report

    # -- rules -------------------------------------------------------------------------

    @precondition(lambda self: self.sink is not None and self.pending is None)
    @rule(
        new=st.integers(0, 25),
        old=st.integers(0, 15),
        repeats=st.integers(0, 5),
        crash=st.sampled_from(CRASHES),
    )
    def write_batch(self, new: int, old: int, repeats: int, crash: str) -> None:
        seen = sorted(self.expected)
        keys = [f"k{next(self.fresh_keys)}" for _ in range(new)]
        keys += [seen[(i * 7919) % len(seen)] for i in range(old)] if seen else []
        keys += keys[:repeats]  # the same ID twice inside the batch
        epoch = self.next_epoch
        try:
            self._run(epoch, keys, crash)
        except Crash:
            if crash == "after_head":
                self._completed(keys)
            else:
                self.pending = (epoch, keys)
            self.sink = None
            return
        self._completed(keys)

    def _completed(self, keys: list[str]) -> None:
        self.history.append(keys)
        self.expected.update(keys)
        self.next_epoch += 1

    @precondition(lambda self: self.sink is None)
    @rule(fresh_worker=st.booleans())
    def restart(self, fresh_worker: bool) -> None:
        if fresh_worker:
            shard_module._FILTER_CACHE.clear()  # a new Python worker: no filter in memory
        self.sink = self._new_sink()

    @precondition(lambda self: self.sink is not None and self.pending is not None)
    @rule()
    def rerun_crashed_epoch(self) -> None:
        assert self.pending is not None
        epoch, keys = self.pending
        self._run(epoch, keys, "none")  # Spark replays the same input under the same batchId
        self.pending = None
        self._completed(keys)

    @precondition(lambda self: self.sink is not None and self.pending is None and self.history)
    @rule(data=st.data())
    def replay_committed_epoch(self, data: st.DataObject) -> None:
        epoch = data.draw(st.integers(0, len(self.history) - 1))
        report = self._run(epoch, self.history[epoch], "none")
        assert report.skipped, f"epoch {epoch} at or below the head must be skipped whole"

    @rule()
    def lose_catalog(self) -> None:
        r = self._catalog_client()
        keys = list(r.scan_iter(match=f"eo:{{{self.table}:*", count=1000))
        if keys:
            r.delete(*keys)
        r.close()

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def sink_matches_model(self) -> None:
        rows = self._event_ids()
        assert len(rows) == len(set(rows)), f"duplicates: {len(rows) - len(set(rows))}"
        got = set(rows)
        if self.pending is None:
            missing, extra = sorted(self.expected - got)[:5], sorted(got - self.expected)[:5]
            assert got == self.expected, f"missing {missing}, extra {extra}"
        else:
            assert self.expected <= got <= self.expected | set(self.pending[1])


def run_machine(machine: type[ProtocolMachine], max_examples: int, steps: int) -> None:
    """Run the machine's rules: ``max_examples`` runs of up to ``steps`` steps each."""
    machine.TestCase.settings = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    machine.TestCase().runTest()
