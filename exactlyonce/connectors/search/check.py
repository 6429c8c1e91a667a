"""What ``exactlyonce check`` reports for a sink of the Elasticsearch family: its guarantee,
and its preconditions read from the cluster (reachable with these credentials, the control,
dead-letter and target indices and their mappings), creating no index. Every request is
tried once: a check reports, it does not wait out an outage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exactlyonce.connectors.base.guarantee import (
    FAILING,
    OK,
    WARNING,
    Check,
    Guarantee,
    absent,
    checked,
)
from exactlyonce.connectors.search.connection import call
from exactlyonce.connectors.search.engine import NotFound
from exactlyonce.connectors.search.schema import CONTROL_MAPPING

if TYPE_CHECKING:
    from exactlyonce.connectors.search.parts import SearchParts

_NUMBERS = ("long", "integer", "short", "byte", "unsigned_long")


def guarantee(sink: SearchParts) -> Guarantee:
    if sink.upsert is not None:
        return Guarantee(
            "EXACTLY ONCE per key and epoch (upsert: the latest epoch's document, never rolled "
            "back; deletes guarded for index.gc_deletes only)",
            "_id = record ID, written with version = epoch and version_type external_gte, so "
            f"{sink.conn.name} itself refuses an older epoch (a 409 counted stale).",
        )
    effect = "a 409" if sink.op_type == "create" else "an identical overwrite"
    return Guarantee(
        "EXACTLY ONCE per _id",
        f"_id = record ID, so a re-sent record is {effect} ({sink.op_type}); a task writes its "
        "shard-commit document only after every item is acknowledged, and the head document "
        "(realtime GET, optimistic concurrency) makes a restart skip committed epochs.",
    )


def preconditions(sink: SearchParts) -> list[Check]:
    def run() -> list[Check]:
        info = _once(sink, "the cluster info", lambda c: c.info())
        version = info.get("version", {}).get("number", "?")
        where = f"reachable at {sink.conn.where}, version {version}"
        checks = [Check(sink.conn.name, OK, where)]
        checks.append(_index(sink, sink.control_index, "control index", _control_mapping))
        checks.append(_index(sink, sink.dead_letter_index, "dead-letter index", None))
        checks.append(_index(sink, sink.index, "index", _target_mapping))
        return checks

    return checked(sink.conn.name, run)


def _once(sink: SearchParts, what: str, fn: Any) -> Any:
    return call(sink.conn, sink.client, sink.retry.replace(attempts=1), what, fn)


def _index(sink: SearchParts, name: str, role: str, judge: Any) -> Check:
    what = f"{role} {name}"
    try:
        got = _once(sink, f"the mapping of {name!r}", lambda c: c.get_mapping(name))
    except NotFound:
        return absent(what, "created with its mapping at every start")
    mappings = got.get(name, {}).get("mappings", {})
    return (
        judge(sink, what, mappings.get("properties", {})) if judge else Check(what, OK, "present")
    )


def _control_mapping(sink: SearchParts, what: str, props: dict[str, Any]) -> Check:
    wrong = [
        field
        for field, spec in CONTROL_MAPPING["properties"].items()
        if field in props and props[field].get("type") != spec["type"]
    ]
    if wrong:
        return Check(
            what,
            FAILING,
            f"field(s) {wrong} mapped with other types than the sink's (keyword/long/integer): "
            "heads and shard commits cannot be stored or read",
            "use another control_index, or delete this one (it holds only control documents)",
        )
    return Check(what, OK, "present, mapping fits")


def _target_mapping(sink: SearchParts, what: str, props: dict[str, Any]) -> Check:
    epoch = props.get(sink.epoch_field, {}).get("type")
    if epoch is not None and epoch not in _NUMBERS:
        return Check(
            what,
            FAILING,
            f"{sink.epoch_field!r} is mapped as {epoch}, not a whole number: writes are refused",
            "set epoch_field to another name, or re-create the index",
        )
    given = (sink.mapping or {}).get("properties", sink.mapping or {})
    differ = [
        f
        for f, spec in given.items()
        if f in props
        and (spec if isinstance(spec, str) else spec.get("type")) != props[f].get("type")
    ]
    if differ:
        return Check(
            what,
            WARNING,
            f"field(s) {differ} are mapped otherwise than the sink's mapping says (an existing "
            "index keeps its mapping)",
            "re-create the index, or align the sink's mapping",
        )
    return Check(what, OK, "present, mapping fits")
