"""The sink contract is small and closed: at most 10 abstract members in all, each one
documented with its caller and its guarantee; the protocol's entry points are final, so no
sink (and no second driver) can change the order of skip, write, head and report."""

from __future__ import annotations

import inspect

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.sink import ExactlyOnceSink
from exactlyonce.connectors.base.task import ShardTask, ShardWriter

CONTRACT = (ExactlyOnceSink, ShardTask, ShardWriter)
ENTRY_POINTS = (
    "__call__",
    "run_epoch",
    "start",
    "task_writer",
    "commit_epoch",
    "guarantee_report",
    "_start",
    "_refuse_another_checkpoint",
    "_write_with_retries",
    "_write_epoch",
    "_record",
)


def abstract_members() -> list[tuple[type, str]]:
    return [(c, name) for c in CONTRACT for name in sorted(getattr(c, "__abstractmethods__", ()))]


def test_a_new_sink_implements_at_most_ten_abstract_members() -> None:
    members = abstract_members()
    assert len(members) <= 10, [f"{c.__name__}.{n}" for c, n in members]


def test_every_abstract_member_says_who_calls_it_and_what_it_must_guarantee() -> None:
    for cls, name in abstract_members():
        doc = inspect.getdoc(getattr(cls, name)) or ""
        assert len(doc) > 80, f"{cls.__name__}.{name} is not documented"
        assert "call" in doc.lower() or cls is ShardTask, f"{cls.__name__}.{name}: who calls it?"
        promise = "must" in doc.lower() or "never" in doc.lower()
        assert promise, f"{cls.__name__}.{name}: what must it guarantee?"


def test_the_protocols_entry_points_are_final_and_no_sink_overrides_them() -> None:
    for name in ENTRY_POINTS:
        member = inspect.getattr_static(ExactlyOnceSink, name)
        assert getattr(member, "__final__", False), f"{name} is not @final"
    sinks = [kind.sink_class() for kind in registry.kinds()]
    from exactlyonce.buffer import Buffered
    from exactlyonce.testing import MemorySink

    for sink in [*sinks, Buffered, MemorySink]:
        overridden = [n for n in ENTRY_POINTS if n in vars(sink)]
        assert overridden == [], f"{sink.__name__} overrides {overridden}"


def test_every_sink_keeps_its_head_in_a_head_store_object() -> None:
    for kind in registry.kinds():
        store = kind.sink_class().head_store
        assert inspect.getdoc(store), kind.name
        hints = inspect.signature(store).return_annotation
        assert "HeadStore" in str(hints) or "Heads" in str(hints), (kind.name, hints)
