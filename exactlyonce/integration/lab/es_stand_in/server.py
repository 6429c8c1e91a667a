"""An in-memory HTTP server that answers like Elasticsearch 8.15, for the parts we use.

There is no Elasticsearch on the machines this project is tested on (ENVIRONMENT.md), so the
Elasticsearch tests run against this server unless ``ELASTICSEARCH_URL`` names a real
cluster. The official ``elasticsearch`` client (8.x and 9.x) talks to it over a real socket:
every response carries ``X-Elastic-Product: Elasticsearch`` and mirrors the
``compatible-with`` version of the request's ``Accept`` header.

Reproduced, as documented for Elasticsearch 8:

- ``_bulk`` (``index``/``create``/``delete``) with per-item statuses: 201 created, 200
  updated, 409 ``version_conflict_engine_exception`` (``create`` of an existing ``_id``, or a
  stale ``if_seq_no``), 400 ``document_parsing_exception`` (a value that does not fit the
  index mapping; Elasticsearch before 8.8 called it ``mapper_parsing_exception``), 429
  ``es_rejected_execution_exception`` (fault injection); top-level ``errors`` and ``took``;
- realtime ``GET``/``_mget`` by ``_id`` (see every acknowledged write) as opposed to
  ``_search``/``_count``, which see only what was refreshed (``_refresh``, ``?refresh=``);
  a search with ``?scroll=`` snapshots every hit, paged on by ``_search/scroll`` (cleared
  by ``DELETE _search/scroll``); ``version: true`` adds each hit's ``_version``;
- ``_version``, ``_seq_no``, ``_primary_term``, ``op_type=create``, ``if_seq_no`` with
  ``if_primary_term`` (409 when either differs, 400 when one comes without the other),
  tombstones (a delete, even of nothing, bumps the ``_id``'s next version);
- external versions on index and delete (``version`` with ``version_type`` ``external``: 409
  unless above the current version, ``external_gte``: unless at least it; the current version
  of a deleted ``_id`` is its tombstone's; the write takes the given version; a delete of
  nothing leaves a tombstone at it and answers 404; 400 for a missing or negative version, a
  ``create`` with one, an unknown ``version_type``);
- ``_source=false`` on GET/``_mget``; requests refused whole (400) before anything applies: a
  bulk item or ``_mget`` doc without an index, an empty or malformed bulk body (an action
  line); a bulk item whose source is not a JSON object fails alone (400
  ``document_parsing_exception``), the others apply;
- typed mappings (long, integer, short, byte, double, float, keyword, text, boolean, date,
  object) with dynamic mapping of new fields (dates: ``strict_date_optional_time`` and
  ``yyyy/MM/dd``), ``dynamic: strict``; a mapping with an unknown field type is refused;
  ``PUT <index>/_mapping`` adds fields and refuses a type change (400); an object field
  with ``enabled: false`` is kept in ``_source`` unparsed;
- ``filter_path`` (dotted paths, ``*`` for any one name) on every response;
- optional basic-auth/API-key requirement: 401 ``security_exception``.

Checked against a genuine engine: tests/integration/test_es_stand_in.py sends the sink's
requests to this server and to OpenSearch 2.19.6 (tests/support/opensearch_node.py) and compares
statuses, item statuses, error types, versions, sequence numbers, ``found``, ``_source``,
counts and mappings. OpenSearch keeps Elasticsearch 7's ``mapper_parsing_exception`` where
this server answers Elasticsearch 8's ``document_parsing_exception``.

Not reproduced: scoring, analysis (``match`` splits on whitespace), aggregations, aliases,
shards and replicas, the periodic one-second refresh, the expiry of tombstones
(``index.gc_deletes``, 60 s), the mixed-type arrays OpenSearch and Elasticsearch 7 refuse.

Python API for tests (never over HTTP): per-``_id`` write counters (every successful
index/create counts, also an overwrite) and the version each write left, every write
request per ``_id`` with its outcome (:meth:`~EsTestServer.write_log`: a ``create`` refused
with 409 is counted there, :meth:`~EsTestServer.conflicts`), versions, documents, and fault
injection (:meth:`EsTestServer.reject_bulk_items`, :meth:`~EsTestServer.reject_for`,
:meth:`~EsTestServer.drop_after_apply`, :meth:`~EsTestServer.slow`). One test-only endpoint
reads the write log over HTTP, for a server run as its own process: ``GET
/_stand_in/writes/<index>`` (:meth:`~EsTestServer.write_report`; Elasticsearch answers 400).

``with EsTestServer() as es: ...`` runs it in a background thread; ``python -m
exactlyonce.integration.lab.es_stand_in --port 9200`` runs it as its own process until
SIGTERM/SIGINT. In memory by default; with ``data`` (``--data DIR``) every acknowledged change is
journaled and fsynced before the reply and loaded again at start (:mod:`.journal`), so the
process survives a SIGKILL as Elasticsearch does (the local service ``es-stand-in`` runs it so).
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import datetime
import functools
import json
import math
import operator
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from exactlyonce.integration.lab.es_stand_in.journal import Journal, Record

VERSION = "8.15.0"
_COMPAT = re.compile(r"compatible-with=(\d+)")
# strict_date_optional_time (no space before the time), and the dynamic slash format
_ISO_DATE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})"
    r"(?:T(\d{2})(?::(\d{2})(?::(\d{2})(?:[.,]\d{1,9})?)?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?)?$"
)
_SLASH_DATE = re.compile(r"^(\d{4})/(\d{2})/(\d{2})(?: (\d{2}):(\d{2}):(\d{2}))?$")
SLASH_FORMAT = "yyyy/MM/dd HH:mm:ss||yyyy/MM/dd||epoch_millis"
_INTS = {
    "long": 2**63,
    "integer": 2**31,
    "short": 2**15,
    "byte": 2**7,
}
_FLOATS = {"double", "float", "half_float", "scaled_float"}
_SHARDS = {"total": 2, "successful": 1, "failed": 0}
_SEARCH_SHARDS = {"total": 1, "successful": 1, "skipped": 0, "failed": 0}
PRIMARY_TERM = 1  # one primary that never fails over
# The field types Elasticsearch 8 knows (with its default modules and x-pack); others: 400.
_FIELD_TYPES = frozenset(
    """aggregate_metric_double alias binary boolean byte completion constant_keyword
    counted_keyword date date_nanos date_range dense_vector double double_range flattened
    float float_range geo_point geo_shape half_float histogram integer integer_range ip
    ip_range join keyword long long_range match_only_text nested object percolator point
    rank_feature rank_features scaled_float search_as_you_type semantic_text shape short
    sparse_vector text token_count unsigned_long version wildcard""".split()  # noqa: SIM905
)
_REFRESH = {"", "true", "wait_for"}


class EsError(Exception):
    """An error answered with Elasticsearch's error body."""

    def __init__(self, status: int, kind: str, reason: str, **extra: Any) -> None:
        super().__init__(reason)
        self.status, self.kind, self.reason, self.extra = status, kind, reason, extra

    def cause(self) -> dict[str, Any]:
        return {"type": self.kind, "reason": self.reason, **self.extra}

    def body(self) -> dict[str, Any]:
        return {"error": {"root_cause": [self.cause()], **self.cause()}, "status": self.status}


def _not_found(index: str) -> EsError:
    return EsError(
        404,
        "index_not_found_exception",
        f"no such index [{index}]",
        **{"resource.type": "index_or_alias", "resource.id": index},
        index_uuid="_na_",
        index=index,
    )


def check_guard(if_seq_no: Any, if_primary_term: Any) -> str | None:
    """Why an ``if_seq_no``/``if_primary_term`` pair is invalid (one without the other)."""
    if if_seq_no is not None and if_primary_term in (None, 0, "0"):
        return "ifSeqNo is set, but primary term is [0]"
    if if_primary_term is not None and if_seq_no is None:
        return f"ifSeqNo is unassigned, but primary term is [{if_primary_term}]"
    return None


_EXTERNAL = ("external", "external_gte")


def check_versioning(op: str, version: Any, version_type: Any) -> str | None:
    """Why a ``version``/``version_type`` pair is invalid for ``op`` (None: valid)."""
    if version_type is None or version_type == "internal":
        return None
    if version_type not in _EXTERNAL:
        return f"No version type match [{version_type}]"
    if op == "create":
        return "create operations only support internal versioning. use index instead"
    if version is None or int(version) < 0:
        value = -3 if version is None else int(version)
        return f"illegal version value [{value}] for version type [{version_type.upper()}]"
    return None


def _invalid(problems: list[str]) -> EsError:
    listed = "".join(f"{i}: {p};" for i, p in enumerate(problems, 1))
    return EsError(400, "action_request_validation_exception", f"Validation Failed: {listed}")


@dataclass(frozen=True)
class Unparsable:
    """A bulk item's source that is not a JSON object: the item alone fails (400), as in
    Elasticsearch, which parses each document when it indexes it, not with the request."""

    kind: str
    reason: str

    def error(self) -> EsError:
        return EsError(
            400,
            "document_parsing_exception",
            f"[1:1] failed to parse: {self.reason}",
            caused_by={"type": self.kind, "reason": self.reason},
        )


BulkOp = tuple[str, dict[str, Any], "dict[str, Any] | Unparsable | None"]


def _source_line(line: bytes) -> dict[str, Any] | Unparsable:
    """A bulk item's source, or why it cannot be a document."""
    try:
        source = json.loads(line)
    except ValueError as exc:
        return Unparsable("json_parse_exception", f"Unrecognized token: {exc}")
    if not isinstance(source, dict):
        return Unparsable("parsing_exception", "Malformed content, must start with an object")
    return source


def _parse_bulk(body: bytes, default_index: str | None) -> list[BulkOp]:
    """A bulk body as (op, metadata with ``_index``, source); raises EsError for the request."""
    if not body.strip():
        raise EsError(400, "parse_exception", "request body is required")
    lines = [line for line in body.split(b"\n") if line.strip()]
    ops: list[BulkOp] = []
    problems: list[str] = []
    i = 0
    while i < len(lines):
        op, meta = _action_line(lines[i], i + 1)
        source: dict[str, Any] | Unparsable | None = None
        if op != "delete":
            if i + 1 >= len(lines):
                raise _invalid(["no requests added"] if not ops else ["source is missing"])
            source = _source_line(lines[i + 1])
            i += 2
        else:
            i += 1
        meta = {**meta, "_index": meta.get("_index", default_index)}
        if meta["_index"] is None:
            problems.append("index is missing")
        guard = check_guard(meta.get("if_seq_no"), meta.get("if_primary_term"))
        if guard is not None:
            problems.append(guard)
        versioning = check_versioning(op, meta.get("version"), meta.get("version_type"))
        if versioning is not None:
            problems.append(versioning)
        ops.append((op, meta, source))
    if problems:
        raise _invalid(problems)
    if not ops:
        raise _invalid(["no requests added"])
    return ops


def _json_line(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise EsError(400, "json_parse_exception", f"Unrecognized token: {exc}") from exc


def _action_line(line: bytes, number: int) -> tuple[str, dict[str, Any]]:
    action = _json_line(line)
    if not isinstance(action, dict) or len(action) != 1:
        raise EsError(
            400,
            "illegal_argument_exception",
            f"Malformed action/metadata line [{number}], expected a simple value for field "
            "[_index] but found [START_OBJECT]",
        )
    ((op, meta),) = action.items()
    if op not in ("index", "create", "delete", "update"):
        raise EsError(
            400,
            "illegal_argument_exception",
            f"Malformed action/metadata line [{number}], expected one of [create, "
            f"delete, index, update] but found [{op}]",
        )
    if not isinstance(meta, dict):
        raise EsError(
            400, "illegal_argument_exception", f"Malformed action/metadata line [{number}]"
        )
    return op, meta


@dataclass
class Doc:
    source: dict[str, Any]
    version: int
    seq_no: int


@dataclass
class Index:
    name: str
    properties: dict[str, Any] = field(default_factory=dict)
    dynamic: Any = True
    uuid: str = field(default_factory=lambda: uuid.uuid4().hex[:22])
    docs: dict[str, Doc] = field(default_factory=dict)
    searchable: dict[str, Doc] = field(default_factory=dict)
    tombstones: dict[str, int] = field(default_factory=dict)
    seq_no: int = -1
    writes: collections.Counter[str] = field(default_factory=collections.Counter)
    attempts: collections.Counter[str] = field(default_factory=collections.Counter)
    versions: dict[str, list[int]] = field(default_factory=dict)  # every applied write's
    # per _id: every write request's "op status" ("create 201", "create 409", "index 429")
    outcomes: dict[str, collections.Counter[str]] = field(default_factory=dict)
    # what changed since the journal last took it (:meth:`EsTestServer._persist`)
    dirty: set[str] = field(default_factory=set, compare=False, repr=False)
    meta_dirty: bool = field(default=False, compare=False, repr=False)

    def note(self, op: str, doc_id: str, status: int) -> None:
        """Count one write request of ``doc_id`` (a bulk item or the document API), whatever
        its outcome: a 409, a 400 and an injected 429 are attempts too."""
        self.attempts[doc_id] += 1
        self.outcomes.setdefault(doc_id, collections.Counter())[f"{op} {status}"] += 1
        self.dirty.add(doc_id)

    def mappings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"properties": self.properties}
        if self.dynamic is not True:
            out["dynamic"] = self.dynamic
        return out

    def refresh(self) -> None:
        self.searchable = dict(self.docs)  # writes replace Doc objects, never mutate them

    def get(self, doc_id: str, realtime: bool = True, source: bool = True) -> dict[str, Any]:
        """A GET/_mget document; ``source=False`` (``_source=false``) leaves ``_source`` out."""
        head = {"_index": self.name, "_id": doc_id}
        doc = (self.docs if realtime else self.searchable).get(doc_id)
        if doc is None:
            return {**head, "found": False}
        found = {
            **head,
            "_version": doc.version,
            "_seq_no": doc.seq_no,
            "_primary_term": PRIMARY_TERM,
            "found": True,
        }
        return {**found, "_source": doc.source} if source else found

    def write(
        self,
        op: str,
        doc_id: str,
        source: dict[str, Any] | None,
        if_seq_no: Any = None,
        if_primary_term: Any = None,
        version: Any = None,
        version_type: Any = None,
    ) -> tuple[int, dict[str, Any]]:
        """Apply one index/create/delete; (status, result item). Raises EsError on failure.

        ``if_seq_no`` and ``if_primary_term`` come together (:func:`check_guard`); the write
        applies only if both match the document's. An external ``version`` (checked by
        :func:`check_versioning`) applies only above (``external``) or at least at
        (``external_gte``) the current version, and becomes the new one.
        """
        current = self.docs.get(doc_id)
        if op == "create" and current is not None:
            raise EsError(
                409,
                "version_conflict_engine_exception",
                f"[{doc_id}]: version conflict, document already exists "
                f"(current version [{current.version}])",
                index_uuid=self.uuid,
                shard="0",
                index=self.name,
            )
        if if_seq_no is not None and (
            current is None
            or current.seq_no != int(if_seq_no)
            or int(if_primary_term) != PRIMARY_TERM
        ):
            reason = (
                f"[{doc_id}]: version conflict, required seqNo [{if_seq_no}], primary term "
                f"[{if_primary_term}]. "
                + (
                    f"current document has seqNo [{current.seq_no}] and primary term "
                    f"[{PRIMARY_TERM}]"
                    if current
                    else "but no document was found"
                )
            )
            raise EsError(
                409,
                "version_conflict_engine_exception",
                reason,
                index_uuid=self.uuid,
                shard="0",
                index=self.name,
            )
        previous = current.version if current else self.tombstones.get(doc_id, 0)
        new_version = previous + 1
        if version_type in _EXTERNAL:
            new_version = int(version)
            known = current is not None or doc_id in self.tombstones
            if known and (
                previous > new_version or (previous == new_version and version_type == "external")
            ):
                higher = "higher than" if version_type == "external_gte" else "higher or equal to"
                raise EsError(
                    409,
                    "version_conflict_engine_exception",
                    f"[{doc_id}]: version conflict, current version [{previous}] is {higher} "
                    f"the one provided [{new_version}]",
                    index_uuid=self.uuid,
                    shard="0",
                    index=self.name,
                )
        if op == "delete":
            if current is None:  # a delete of nothing still leaves a (newer) tombstone
                self.seq_no += 1
                self.tombstones[doc_id] = new_version
                return 404, self._item(doc_id, new_version, "not_found")
            del self.docs[doc_id]
            self.seq_no += 1
            self.tombstones[doc_id] = new_version
            return 200, self._item(doc_id, new_version, "deleted")
        assert source is not None
        updates = check_document(self, doc_id, source)
        for path, mapping in updates:
            _put_path(self.properties, path, mapping)
            self.meta_dirty = True
        self.seq_no += 1
        self.docs[doc_id] = Doc(source, new_version, self.seq_no)
        self.tombstones.pop(doc_id, None)
        self.writes[doc_id] += 1
        self.versions.setdefault(doc_id, []).append(new_version)
        if current is None:
            return 201, self._item(doc_id, new_version, "created")
        return 200, self._item(doc_id, new_version, "updated")

    def _item(self, doc_id: str, version: int, result: str) -> dict[str, Any]:
        return {
            "_index": self.name,
            "_id": doc_id,
            "_version": version,
            "result": result,
            "_shards": _SHARDS,
            "_seq_no": self.seq_no,
            "_primary_term": PRIMARY_TERM,
        }


# -- mappings ---------------------------------------------------------------------------


def _put_path(properties: dict[str, Any], path: list[str], mapping: dict[str, Any]) -> None:
    for part in path[:-1]:
        properties = properties.setdefault(part, {"properties": {}}).setdefault("properties", {})
    properties[path[-1]] = mapping


def _is_date(pattern: re.Pattern[str], value: str) -> bool:
    """``value`` matches ``pattern`` and names a real day and time (no month 13)."""
    found = pattern.match(value)
    if found is None:
        return False
    y, mo, d, h, mi, sec = (int(g) if g else 0 for g in found.groups()[:6])
    try:
        datetime.date(y, mo, d)
    except ValueError:
        return False
    return h < 24 and mi < 60 and sec < 60


def _dynamic_type(value: Any) -> dict[str, Any] | None:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "long"}
    if isinstance(value, float):
        return {"type": "float"}
    if isinstance(value, str):
        if _is_date(_ISO_DATE, value):
            return {"type": "date"}
        if _is_date(_SLASH_DATE, value):
            return {"type": "date", "format": SLASH_FORMAT}
        return {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}
    if isinstance(value, list):
        for v in value:
            found = _dynamic_type(v)
            if found is not None:
                return found
    return None


def _value_error(kind: str, value: Any, date_format: str | None = None) -> str | None:
    """Why ``value`` does not fit a field of type ``kind``; None when it fits (ES coercion)."""
    if value is None:
        return None
    if kind in _INTS or kind in _FLOATS:
        if isinstance(value, bool):
            return f"Current token ({'VALUE_TRUE' if value else 'VALUE_FALSE'}) not numeric"
        number: float
        if isinstance(value, (int, float)):
            number = value
        elif isinstance(value, str):
            try:
                number = int(value) if kind in _INTS else float(value)
            except ValueError:
                try:
                    number = float(value)
                except ValueError:
                    return f'For input string: "{value}"'
        else:
            return f"Current token ({type(value).__name__}) not numeric"
        if kind in _INTS:
            if not math.isfinite(number):
                return f"Value [{value}] is out of range for a {kind}"
            limit = _INTS[kind]
            if not -limit <= int(number) < limit:
                return f"Value [{value}] is out of range for a {kind}"
        elif not math.isfinite(float(number)):
            return f"[{kind}] supports only finite values, but got [{value}]"
        return None
    if kind == "boolean":
        if isinstance(value, bool) or value in ("true", "false", ""):
            return None
        return f"Failed to parse value [{value}] as only [true] or [false] are allowed."
    if kind == "date":
        return _date_error(value, date_format or "strict_date_optional_time||epoch_millis")
    if kind in ("keyword", "text") and isinstance(value, (str, int, float, bool)):
        return None
    if kind in ("keyword", "text"):
        return f"Current token ({type(value).__name__}) not a string"
    return None  # types we do not model accept anything


def _date_error(value: Any, date_format: str) -> str | None:
    """Why ``value`` does not fit a date field of ``date_format`` (the formats modelled)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    if isinstance(value, str):
        if "epoch_millis" in date_format and value.isdigit():
            return None
        if "date_optional_time" in date_format and _is_date(_ISO_DATE, value):
            return None
        if "yyyy/MM/dd" in date_format and _is_date(_SLASH_DATE, value):
            return None
    return f"failed to parse date field [{value}] with format [{date_format}]"


def check_document(
    index: Index, doc_id: str, source: dict[str, Any]
) -> list[tuple[list[str], dict[str, Any]]]:
    """Check ``source`` against the mapping; return the dynamic mapping updates it needs."""
    updates: list[tuple[list[str], dict[str, Any]]] = []

    def fail(path: str, kind: str, value: Any, why: str) -> EsError:
        preview = json.dumps(value) if not isinstance(value, str) else value
        return EsError(
            400,
            "document_parsing_exception",
            f"[1:{len(path) + 2}] failed to parse field [{path}] of type [{kind}] in document "
            f"with id '{doc_id}'. Preview of field's value: '{preview}'",
            caused_by={"type": "illegal_argument_exception", "reason": why},
        )

    def walk(obj: dict[str, Any], props: dict[str, Any] | None, prefix: list[str]) -> None:
        for key, value in obj.items():
            path = [*prefix, key]
            dotted = ".".join(path)
            if key in ("_id", "_index", "_source", "_version", "_seq_no", "_routing"):
                raise EsError(
                    400,
                    "document_parsing_exception",
                    f"[1:2] Field [{key}] is a metadata field and cannot be added inside a "
                    "document. Use the index API request parameters.",
                )
            mapping = props.get(key) if props is not None else None
            if mapping is None:
                if index.dynamic == "strict":
                    raise EsError(
                        400,
                        "strict_dynamic_mapping_exception",
                        f"[1:2] mapping set to strict, dynamic introduction of [{key}] within "
                        "[_doc] is not allowed",
                    )
                if index.dynamic in (False, "false"):
                    continue
                if isinstance(value, dict):
                    updates.append((path, {"properties": {}}))
                    walk(value, None, path)
                    continue
                for v in value if isinstance(value, list) else [value]:
                    if isinstance(v, int) and not -(2**63) <= v < 2**63:
                        raise fail(
                            dotted, "long", v, "No matching token for number_type [BIG_INTEGER]"
                        )
                guessed = _dynamic_type(value)
                if guessed is not None and not any(p == path for p, _ in updates):
                    updates.append((path, guessed))
                continue
            kind = mapping.get("type", "object" if "properties" in mapping else "keyword")
            if kind == "object" and mapping.get("enabled") is False:
                continue  # kept in _source, never parsed: any value, any keys
            if kind in ("object", "nested"):
                values = value if isinstance(value, list) else [value]
                for v in values:
                    if v is None:
                        continue
                    if not isinstance(v, dict):
                        raise EsError(
                            400,
                            "document_parsing_exception",
                            f"[1:2] object mapping for [{dotted}] tried to parse field "
                            f"[{key}] as object, but found a concrete value",
                        )
                    walk(v, mapping.get("properties", {}), path)
                continue
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, dict):
                    raise fail(dotted, kind, v, f"Can't get text on a START_OBJECT at [{dotted}]")
                why = _value_error(kind, v, mapping.get("format"))
                if why is not None:
                    raise fail(dotted, kind, v, why)

    walk(source, index.properties, [])
    return updates


# -- queries ----------------------------------------------------------------------------


def _field(doc_id: str, source: dict[str, Any], name: str) -> list[Any]:
    if name == "_id":
        return [doc_id]
    if name in source:
        value: Any = source[name]
    else:
        value = source
        for part in name.split("."):
            if not isinstance(value, dict) or part not in value:
                return []
            value = value[part]
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float, str)) and not isinstance(a, bool):
        try:
            return float(a) == float(b)
        except ValueError:
            return False
    return str(a).lower() == str(b).lower() if isinstance(a, bool) else str(a) == str(b)


def _cmp_key(value: Any) -> tuple[int, Any]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value))
    return (1, str(value))


def matches(query: dict[str, Any] | None, doc_id: str, source: dict[str, Any]) -> bool:
    if not query:
        return True
    if len(query) != 1:
        raise EsError(
            400, "parsing_exception", "[_na] query malformed, must start with start_object"
        )
    ((kind, body),) = query.items()
    if kind == "match_all":
        return True
    if kind == "match_none":
        return False
    if kind == "ids":
        return doc_id in set(body.get("values", []))
    if kind == "exists":
        return bool(_field(doc_id, source, body["field"]))
    if kind in ("term", "match", "terms", "range"):
        spec = {k: v for k, v in body.items() if k != "boost"}
        if len(spec) != 1:
            raise EsError(
                400, "parsing_exception", f"[{kind}] query doesn't support multiple fields"
            )
        ((name, want),) = spec.items()
        values = _field(doc_id, source, name)
        if kind == "terms":
            return any(_same(v, w) for v in values for w in want)
        if kind == "range":
            bounds: dict[str, Callable[[Any, Any], bool]] = {
                "gt": operator.gt,
                "gte": operator.ge,
                "lt": operator.lt,
                "lte": operator.le,
            }
            return any(
                all(
                    op(_cmp_key(v), _cmp_key(want[name_]))
                    for name_, op in bounds.items()
                    if name_ in want
                )
                for v in values
            )
        if isinstance(want, dict):
            want = want.get("value", want.get("query"))
        if kind == "match" and isinstance(want, str):
            words = set(want.lower().split())
            return any(words & set(str(v).lower().split()) for v in values)
        return any(_same(v, want) for v in values)
    if kind == "bool":

        def clauses(name: str) -> list[dict[str, Any]]:
            found = body.get(name, [])
            return [found] if isinstance(found, dict) else list(found)

        required = clauses("must") + clauses("filter")
        if not all(matches(q, doc_id, source) for q in required):
            return False
        if any(matches(q, doc_id, source) for q in clauses("must_not")):
            return False
        should = clauses("should")
        minimum = int(body.get("minimum_should_match", 0 if required else 1))
        return not should or sum(matches(q, doc_id, source) for q in should) >= minimum
    raise EsError(400, "parsing_exception", f"unknown query [{kind}]", line=1, col=13)


def _hit_key(field_name: str, hit: tuple[str, str, dict[str, Any]]) -> tuple[int, Any]:
    """A search hit's sort key on ``field_name`` (a hit that has the field)."""
    return _cmp_key(_field(hit[1], hit[2], field_name)[0])


def _sort_spec(sort: Any) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    for item in sort if isinstance(sort, list) else [sort]:
        if isinstance(item, str):
            name, _, order = item.partition(":")
            out.append((name, order == "desc"))
        else:
            for name, how in item.items():
                order = how if isinstance(how, str) else how.get("order", "asc")
                out.append((name, order == "desc"))
    return out


# -- the server -------------------------------------------------------------------------


# -- the journal's records (:mod:`.journal`): states, not requests --------------------------
# After a request, each index it touched is written whole but for its documents (name, uuid,
# mapping, sequence number), then each ``_id`` it touched: the document (or none), its
# tombstone and the test counters, so a restarted server answers the same ``_version`` and
# ``_seq_no`` and reports the same write counts as one that never stopped. A dropped index is
# a record of its own. Replayed in order, the last state of an ``_id`` wins; recovery ends
# with a refresh, as Elasticsearch's does. A journal holding more than twice the records its
# state needs is rewritten as that state at start, so restarts stay quick.


def index_record(index: Index) -> Record:
    return ("index", index.name, index.uuid, index.properties, index.dynamic, index.seq_no)


def doc_record(index: Index, doc_id: str) -> Record:
    doc = index.docs.get(doc_id)
    return (
        "doc",
        index.name,
        doc_id,
        None if doc is None else (doc.source, doc.version, doc.seq_no),
        index.tombstones.get(doc_id),
        index.writes.get(doc_id, 0),
        list(index.versions.get(doc_id, ())),
        index.attempts.get(doc_id, 0),
        dict(index.outcomes.get(doc_id, {})),
    )


def drop_record(name: str) -> Record:
    return ("drop", name)


def restore(journal: Journal) -> dict[str, Index]:
    """The indices ``journal`` holds (compacted when it holds over twice what they need)."""
    indices: dict[str, Index] = {}
    read = 0
    for record in journal.records():
        read += 1
        _apply(indices, record)
    for index in indices.values():
        index.refresh()
        index.dirty.clear()
        index.meta_dirty = False
    state = [
        record
        for index in indices.values()
        for record in (index_record(index), *(doc_record(index, i) for i in _known_ids(index)))
    ]
    if read > 2 * len(state):
        journal.rewrite(state)
    return indices


def _apply(indices: dict[str, Index], record: Record) -> None:
    kind, name = record[0], record[1]
    if kind == "drop":
        indices.pop(name, None)
        return
    if kind == "index":
        _, _, uuid_, properties, dynamic, seq_no = record
        index = indices.get(name)
        if index is None or index.uuid != uuid_:
            index = indices[name] = Index(name, uuid=uuid_)
        index.properties, index.dynamic, index.seq_no = properties, dynamic, seq_no
        return
    _, _, doc_id, doc, tombstone, writes, versions, attempts, outcomes = record
    index = indices[name]
    if doc is None:
        index.docs.pop(doc_id, None)
    else:
        index.docs[doc_id] = Doc(*doc)
    if tombstone is None:
        index.tombstones.pop(doc_id, None)
    else:
        index.tombstones[doc_id] = tombstone
    index.writes[doc_id] = writes
    index.versions[doc_id] = versions
    index.attempts[doc_id] = attempts
    index.outcomes[doc_id] = collections.Counter(outcomes)


def _known_ids(index: Index) -> set[str]:
    """Every ``_id`` the index holds anything of: a document, a tombstone or a count."""
    return set(index.docs) | set(index.tombstones) | set(index.attempts)


class EsTestServer:
    """The server object: start/stop, state, counters and fault injection."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        basic_auth: tuple[str, str] | None = None,
        api_key: str | None = None,
        max_content_length: int = 100 * 1024 * 1024,
        version: str = VERSION,
        data: Path | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.basic_auth, self.api_key = basic_auth, api_key
        self.max_content_length = max_content_length
        self.version_number = version
        # ``data``: the journal's directory (:mod:`.journal`); what it holds is loaded now
        self.journal = Journal(data) if data is not None else None
        self.indices: dict[str, Index] = restore(self.journal) if self.journal else {}
        self.lock = threading.RLock()
        # scroll id -> (hits still to send, page size): a snapshot taken by the first search
        self.scrolls: dict[str, tuple[list[dict[str, Any]], int]] = {}
        self.bulk_requests = 0
        self.bulk_items = 0
        self.rejected_items = 0
        self.dropped_replies = 0
        self.failed_requests = 0  # whole requests answered with an injected 5xx
        self.refusals = 0  # times the server stopped listening (refuse_connections_for)
        self.rejected_by_status: dict[int, int] = {}
        self._reject_status = 429
        self._fail_requests_until = 0.0
        self._fail_status = 503
        self._reject_items = 0
        self._reject_until = 0.0
        self._drop_after = 0
        self._drop_doc_after = 0
        self._delay = 0.0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._sockets: set[socket.socket] = set()
        self._restart: threading.Timer | None = None  # a refusal's pending listen-again
        self._refused_until = 0.0

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> EsTestServer:
        server = self

        class Handler(_Handler):
            es = server

        httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        httpd.daemon_threads = True
        httpd.request_queue_size = 128
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        with self.lock:
            for sock in list(self._sockets):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> EsTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _persist(self) -> None:
        """Under the lock, before the reply: what the request changed, to the journal (with
        none, only forgotten)."""
        records: list[Record] = []
        for index in self.indices.values():
            if not (index.dirty or index.meta_dirty):
                continue
            if self.journal is not None:
                records.append(index_record(index))
                records += [doc_record(index, doc_id) for doc_id in sorted(index.dirty)]
            index.dirty.clear()
            index.meta_dirty = False
        if self.journal is not None:
            self.journal.append(records)

    def _drop_index(self, name: str) -> None:
        self._persist()
        del self.indices[name]
        if self.journal is not None:
            self.journal.append([drop_record(name)])

    # -- what tests read -----------------------------------------------------------------

    def index(self, name: str) -> Index:
        with self.lock:
            if name not in self.indices:
                raise KeyError(f"no index {name!r} (have {sorted(self.indices)})")
            return self.indices[name]

    def write_counts(self, index: str) -> dict[str, int]:
        """Successful index/create operations per ``_id``, overwrites included."""
        with self.lock:
            found = self.indices.get(index)
            return dict(found.writes) if found else {}

    def write_count(self, index: str, doc_id: str) -> int:
        return self.write_counts(index).get(doc_id, 0)

    def versions_written(self, index: str) -> dict[str, list[int]]:
        """Per ``_id``, the version of every successful index/create, in order (with external
        versions: the versions the writer gave)."""
        with self.lock:
            found = self.indices.get(index)
            return {k: list(v) for k, v in found.versions.items()} if found else {}

    def attempts(self, index: str) -> dict[str, int]:
        """Write requests received per ``_id`` (bulk items and the document API, any op),
        whatever their outcome (409s, 400s and injected rejections too)."""
        with self.lock:
            found = self.indices.get(index)
            return dict(found.attempts) if found else {}

    def write_log(self, index: str) -> dict[str, dict[str, int]]:
        """Per ``_id``, how many write requests ended how: ``{"create 201": 1, "create 409":
        2}`` is one create that wrote the document and two that a conflict refused."""
        with self.lock:
            found = self.indices.get(index)
            return {i: dict(c) for i, c in found.outcomes.items()} if found else {}

    def conflicts(self, index: str) -> dict[str, int]:
        """409s per ``_id`` (only those that had one): a ``create`` of an existing ``_id``,
        a stale ``if_seq_no`` or external version. A write refused, never applied."""
        return {
            doc_id: n
            for doc_id, outcomes in self.write_log(index).items()
            if (n := sum(c for key, c in outcomes.items() if key.endswith(" 409")))
        }

    def write_report(self, index: str) -> dict[str, Any]:
        """What the test-only endpoint ``GET /_stand_in/writes/<index>`` answers: per ``_id``,
        successful writes, 409s and every outcome; and their totals."""
        log, written = self.write_log(index), self.write_counts(index)
        docs: dict[str, dict[str, Any]] = {
            doc_id: {
                "written": written.get(doc_id, 0),
                "conflicts": sum(c for key, c in outcomes.items() if key.endswith(" 409")),
                "outcomes": outcomes,
            }
            for doc_id, outcomes in log.items()
        }
        totals = {key: sum(d[key] for d in docs.values()) for key in ("written", "conflicts")}
        return {"index": index, "docs": docs, "totals": {**totals, "ids": len(docs)}}

    def documents(self, index: str) -> dict[str, dict[str, Any]]:
        """Every acknowledged document (realtime view), by ``_id``."""
        with self.lock:
            found = self.indices.get(index)
            return {i: d.source for i, d in found.docs.items()} if found else {}

    def version(self, index: str, doc_id: str) -> int | None:
        with self.lock:
            found = self.indices.get(index)
            doc = found.docs.get(doc_id) if found else None
            return doc.version if doc else None

    # -- fault injection -----------------------------------------------------------------

    def reject_bulk_items(self, n: int) -> None:
        """Answer 429 es_rejected_execution_exception for the next ``n`` bulk items."""
        with self.lock:
            self._reject_items = n

    def reject_for(self, seconds: float, status: int = 429) -> None:
        """Answer ``status`` (429, or a 5xx: 500, 503) for every bulk item during the next
        ``seconds``."""
        with self.lock:
            self._reject_until = time.monotonic() + seconds
            self._reject_status = status

    def fail_requests_for(self, seconds: float, status: int = 503) -> None:
        """Answer every request whole with ``status`` (a 5xx), applying nothing, during the
        next ``seconds``."""
        with self.lock:
            self._fail_requests_until = time.monotonic() + seconds
            self._fail_status = status

    def refuse_connections_for(self, seconds: float) -> None:
        """Stop listening (open connections are cut: a request in flight has no reply) and
        listen again on the same port after ``seconds``: connections are refused meanwhile.
        A refusal during a refusal extends it to the later end; one restart is pending."""
        with self.lock:  # not between a pending restart's check and its bind
            self.stop()
            self.refusals += 1
            until = max(time.monotonic() + seconds, self._refused_until)
            self._refused_until = until
            if self._restart is not None:
                self._restart.cancel()
            timer = threading.Timer(until - time.monotonic(), lambda: self._listen_again(timer))
            self._restart = timer
            timer.daemon = True
            timer.start()

    def _listen_again(self, timer: threading.Timer) -> None:
        with self.lock:
            if self._restart is not timer:
                return  # a later refusal took over (its timer listens again)
            self._restart = None
            self.start()

    def drop_after_apply(self, n: int = 1, what: str = "bulk") -> None:
        """Apply the next ``n`` bulk requests, then close the connection without a reply.

        ``what="doc"``: the next ``n`` successful single-document writes instead.
        """
        with self.lock:
            if what == "doc":
                self._drop_doc_after = n
            else:
                self._drop_after = n

    def slow(self, seconds: float) -> None:
        """Delay every response by ``seconds`` (0 turns it off)."""
        with self.lock:
            self._delay = seconds

    def reset_faults(self) -> None:
        with self.lock:
            self._reject_items, self._reject_until, self._delay = 0, 0.0, 0.0
            self._reject_status, self._fail_requests_until = 429, 0.0
            self._drop_after = self._drop_doc_after = 0

    # -- the API -------------------------------------------------------------------------

    def authorized(self, header: str | None) -> tuple[bool, str]:
        if self.basic_auth is None and self.api_key is None:
            return True, ""
        if not header:
            return False, "missing authentication credentials"
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "basic" and self.basic_auth is not None:
            try:
                user, _, password = base64.b64decode(value).decode().partition(":")
            except ValueError:
                return False, "unable to authenticate user"
            if (user, password) == self.basic_auth:
                return True, ""
            return False, f"unable to authenticate user [{user}]"
        if scheme.lower() == "apikey" and self.api_key is not None and value == self.api_key:
            return True, ""
        return False, "unable to authenticate with provided credentials"

    def _get_index(self, name: str) -> Index:
        found = self.indices.get(name)
        if found is None:
            raise _not_found(name)
        return found

    def _auto_index(self, name: str) -> Index:
        if name not in self.indices:
            _check_index_name(name)
            self.indices[name] = Index(name, meta_dirty=True)
        return self.indices[name]

    def create_index(self, name: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        with self.lock:
            _check_index_name(name)
            if name in self.indices:
                existing = self.indices[name]
                raise EsError(
                    400,
                    "resource_already_exists_exception",
                    f"index [{name}/{existing.uuid}] already exists",
                    index_uuid=existing.uuid,
                    index=name,
                )
            mappings = (body or {}).get("mappings") or {}
            _check_field_types(mappings.get("properties") or {})
            index = Index(name, dict(mappings.get("properties", {})), mappings.get("dynamic", True))
            index.meta_dirty = True
            self.indices[name] = index
            self._persist()
        return {"acknowledged": True, "shards_acknowledged": True, "index": name}

    def put_mapping(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """``PUT <index>/_mapping``: new fields are added (a ``dynamic: strict`` index too),
        known ones must keep their type (400 otherwise, and nothing changes)."""
        with self.lock:
            index = self._get_index(name)
            properties = body.get("properties") or {}
            _check_field_types(properties)
            merged = _merge_properties(index.properties, properties, "")
            index.properties = merged
            if "dynamic" in body:
                index.dynamic = body["dynamic"]
            index.meta_dirty = True
            self._persist()
        return {"acknowledged": True}

    def info(self) -> dict[str, Any]:
        return {
            "name": "es-test-server",
            "cluster_name": "exactlyonce-test",
            "cluster_uuid": "eo-test-cluster-uuid-000",
            "version": {
                "number": self.version_number,
                "build_flavor": "default",
                "build_type": "test",
                "build_hash": "0" * 40,
                "build_date": "2024-08-05T10:05:34.233336849Z",
                "build_snapshot": False,
                "lucene_version": "9.11.1",
                "minimum_wire_compatibility_version": "7.17.0",
                "minimum_index_compatibility_version": "7.0.0",
            },
            "tagline": "You Know, for Search",
        }

    def bulk(
        self, body: bytes, default_index: str | None, params: dict[str, str]
    ) -> tuple[dict[str, Any], bool]:
        """Apply a bulk request; (response, drop the reply).

        The whole request is parsed and validated first: a malformed line, an item without an
        index or a half ``if_seq_no``/``if_primary_term`` pair refuses it all (400) and
        applies nothing, as Elasticsearch does.
        """
        began = time.monotonic()
        ops = _parse_bulk(body, default_index)
        items: list[dict[str, Any]] = []
        touched: set[str] = set()
        errors = False
        with self.lock:
            self.bulk_requests += 1
            now = time.monotonic()
            for op, meta, source in ops:
                status, item = self._bulk_item(op, meta, source, now, touched)
                errors = errors or status >= 300 and not (op == "delete" and status == 404)
                items.append({op: {**item, "status": status}})
            if params.get("refresh") in _REFRESH:
                for name in touched:
                    self.indices[name].refresh()
            self._persist()
            drop = self._drop_after > 0
            if drop:
                self._drop_after -= 1
                self.dropped_replies += 1
        took = int((time.monotonic() - began) * 1000)
        return {"errors": errors, "took": took, "items": items}, drop

    def _bulk_item(
        self,
        op: str,
        meta: dict[str, Any],
        source: dict[str, Any] | Unparsable | None,
        now: float,
        touched: set[str],
    ) -> tuple[int, dict[str, Any]]:
        name = str(meta["_index"])
        doc_id = meta.get("_id")
        self.bulk_items += 1
        if doc_id is None and op != "delete":
            doc_id = base64.urlsafe_b64encode(uuid.uuid4().bytes[:15]).decode()
        doc_id = str(doc_id)
        if op == "update":
            error = EsError(400, "illegal_argument_exception", "update is not supported here")
            return 400, {"_index": name, "_id": doc_id, "error": error.cause()}
        try:
            index = self._auto_index(name)
        except EsError as exc:
            return exc.status, {"_index": name, "_id": doc_id, "error": exc.cause()}
        status, item = self._apply_item(index, op, doc_id, meta, source, now, touched)
        index.note(op, doc_id, status)
        return status, item

    def _apply_item(
        self,
        index: Index,
        op: str,
        doc_id: str,
        meta: dict[str, Any],
        source: dict[str, Any] | Unparsable | None,
        now: float,
        touched: set[str],
    ) -> tuple[int, dict[str, Any]]:
        name = index.name
        if self._reject_items == 0 and now < self._reject_until and self._reject_status != 429:
            status = self._reject_status
            self.rejected_items += 1
            self.rejected_by_status[status] = self.rejected_by_status.get(status, 0) + 1
            error = EsError(status, "unavailable_shards_exception", "injected by the test server")
            return status, {"_index": name, "_id": doc_id, "error": error.cause()}
        if self._reject_items > 0 or now < self._reject_until:
            self._reject_items = max(0, self._reject_items - 1)
            self.rejected_items += 1
            self.rejected_by_status[429] = self.rejected_by_status.get(429, 0) + 1
            error = EsError(
                429,
                "es_rejected_execution_exception",
                "rejected execution of primary operation [coordinating_and_primary_bytes=0, "
                "replica_bytes=0, all_bytes=0, primary_operation_bytes=0, "
                "max_coordinating_and_primary_bytes=0] (injected by the test server)",
            )
            return 429, {"_index": name, "_id": doc_id, "error": error.cause()}
        try:
            if isinstance(source, Unparsable):
                raise source.error()
            status, item = index.write(
                op,
                doc_id,
                source,
                meta.get("if_seq_no"),
                meta.get("if_primary_term"),
                meta.get("version"),
                meta.get("version_type"),
            )
        except EsError as exc:
            cause = exc.cause()
            return exc.status, {"_index": name, "_id": doc_id, "error": cause}
        touched.add(name)
        return status, item

    def search(
        self, name: str | None, body: dict[str, Any] | None, params: dict[str, str]
    ) -> dict[str, Any]:
        body = body or {}
        with self.lock:
            names = [name] if name and name not in ("_all", "*") else sorted(self.indices)
            hits: list[tuple[str, str, dict[str, Any]]] = []
            versions: dict[tuple[str, str], int] = {}
            for n in names:
                index = self._get_index(n)
                for doc_id, doc in index.searchable.items():
                    if matches(body.get("query"), doc_id, doc.source):
                        hits.append((n, doc_id, doc.source))
                        versions[(n, doc_id)] = doc.version
        sort = body.get("sort", params.get("sort"))
        spec = _sort_spec(sort) if sort else []
        for field_name, desc in reversed(spec):
            if field_name in ("_doc", "_score"):
                continue
            present = [h for h in hits if _field(h[1], h[2], field_name)]
            absent = [h for h in hits if not _field(h[1], h[2], field_name)]
            present.sort(key=functools.partial(_hit_key, field_name), reverse=desc)
            hits = present + absent
        start = int(body.get("from", params.get("from", 0)))
        size = int(body.get("size", params.get("size", 10)))
        scrolling = "scroll" in params  # every hit now; pages after the first: _search/scroll
        page = hits if scrolling else hits[start : start + size]
        wants_version = body.get("version") is True or params.get("version") == "true"
        found: dict[str, Any] = {
            "took": 1,
            "timed_out": False,
            "_shards": _SEARCH_SHARDS,
            "hits": {
                "total": {"value": len(hits), "relation": "eq"},
                "max_score": None if spec else (1.0 if page else None),
                "hits": [
                    {
                        "_index": n,
                        "_id": doc_id,
                        "_score": None if spec else 1.0,
                        "_source": src,
                        **({"_version": versions[(n, doc_id)]} if wants_version else {}),
                        **(
                            {
                                "sort": [
                                    (_field(doc_id, src, f) or [None])[0]
                                    for f, _ in spec
                                    if f not in ("_doc", "_score")
                                ]
                            }
                            if spec
                            else {}
                        ),
                    }
                    for n, doc_id, src in page
                ],
            },
        }
        if scrolling:
            rendered = found["hits"]["hits"]
            found["hits"]["hits"] = rendered[:size]
            found["_scroll_id"] = scroll_id = f"scroll-{uuid.uuid4().hex}"
            with self.lock:
                self.scrolls[scroll_id] = (rendered[size:], size)
        return found

    def scroll(self, scroll_id: str) -> dict[str, Any]:
        """The next page of a scroll (empty at its end); 404 for an unknown or cleared one."""
        with self.lock:
            if scroll_id not in self.scrolls:
                raise EsError(404, "search_context_missing_exception", "No search context found")
            rest, size = self.scrolls[scroll_id]
            page, self.scrolls[scroll_id] = rest[:size], (rest[size:], size)
        return {
            "_scroll_id": scroll_id,
            "took": 1,
            "timed_out": False,
            "_shards": _SEARCH_SHARDS,
            "hits": {"total": {"value": len(page), "relation": "eq"}, "hits": page},
        }


def _check_index_name(name: str) -> None:
    bad = set('\\/*?"<>| ,#:')
    why = None
    if not name or name in (".", ".."):
        why = "must not be empty, '.' or '..'"
    elif any(c in bad for c in name):
        why = 'must not contain the following characters [ , ", *, \\, <, |, ,, >, /, ?, #, :]'
    elif name[0] in "-_+":
        why = "must not start with '_', '-', or '+'"
    elif name != name.lower():
        why = "must be lowercase"
    elif len(name.encode()) > 255:
        why = "index name is too long, (" + str(len(name.encode())) + " > 255)"
    if why is not None:
        raise EsError(
            400,
            "invalid_index_name_exception",
            f"Invalid index name [{name}], {why}",
            index_uuid="_na_",
            index=name,
        )


def _merge_properties(
    current: dict[str, Any], added: dict[str, Any], prefix: str
) -> dict[str, Any]:
    """``current`` with the fields of ``added`` (a new mapping); a field whose type would
    change is refused (400 illegal_argument_exception), as Elasticsearch refuses it."""
    out = dict(current)
    for name, spec in added.items():
        known = out.get(name)
        if known is None:
            out[name] = spec
            continue
        old = known.get("type", "object")
        new = spec.get("type", "object")
        if old != new:
            raise EsError(
                400,
                "illegal_argument_exception",
                f"mapper [{prefix}{name}] cannot be changed from type [{old}] to [{new}]",
            )
        if "properties" in spec:
            inner = _merge_properties(
                known.get("properties", {}), spec["properties"], f"{prefix}{name}."
            )
            out[name] = {**known, "properties": inner}
    return out


_DROPPED = object()


def filter_response(body: dict[str, Any], filter_path: str) -> dict[str, Any]:
    """``?filter_path=a.*.b,c``: only the fields these dotted paths name (``*`` matches any one
    name; arrays are walked through, as if their elements stood in their place); objects left
    empty go, and a response nothing matches is ``{}``, as in Elasticsearch."""
    patterns = [p.split(".") for p in filter_path.split(",") if p]

    def keep(node: Any, wanted: list[list[str]]) -> Any:
        if any(not p for p in wanted):
            return node  # a path ends here: all of it
        if isinstance(node, list):
            kept = [keep(v, wanted) for v in node]
            kept = [v for v in kept if v is not _DROPPED]
            return kept if kept else _DROPPED
        if not isinstance(node, dict):
            return _DROPPED
        out = {}
        for key, value in node.items():
            rest = [p[1:] for p in wanted if p[0] == "*" or p[0] == key]
            if rest:
                kept_value = keep(value, rest)
                if kept_value is not _DROPPED:
                    out[key] = kept_value
        return out if out else _DROPPED

    found = keep(body, patterns)
    return {} if found is _DROPPED else dict(found)


def _wants_source(params: dict[str, str]) -> bool:
    return params.get("_source", "true") not in ("false", "0", "no", "off")


def _check_field_types(properties: dict[str, Any], prefix: str = "") -> None:
    """Refuse a mapping naming a field type Elasticsearch does not know (400, no index)."""
    for name, spec in properties.items():
        if not isinstance(spec, dict):
            continue
        kind = spec.get("type")
        if kind is not None and kind not in _FIELD_TYPES:
            why = f"No handler for type [{kind}] declared on field [{prefix}{name}]"
            raise EsError(
                400,
                "mapper_parsing_exception",
                f"Failed to parse mapping: {why}",
                caused_by={"type": "mapper_parsing_exception", "reason": why},
            )
        _check_field_types(spec.get("properties") or {}, f"{prefix}{name}.")
        for sub, sub_spec in (spec.get("fields") or {}).items():
            _check_field_types({sub: sub_spec}, f"{prefix}{name}.")


class _Handler(BaseHTTPRequestHandler):
    es: EsTestServer
    protocol_version = "HTTP/1.1"
    server_version = "es-test-server"
    timeout = 120

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.es.lock:
            self.es._sockets.add(self.connection)

    def finish(self) -> None:
        with self.es.lock:
            self.es._sockets.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    # -- plumbing ------------------------------------------------------------------------

    def _content_type(self) -> str:
        for header in ("Accept", "Content-Type"):
            found = _COMPAT.search(self.headers.get(header) or "")
            if found:
                return f"application/vnd.elasticsearch+json; compatible-with={found.group(1)}"
        return "application/json"

    def _reply(self, status: int, body: Any, extra: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("content-type", self._content_type())
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(0 if self.command == "HEAD" else len(data)))
        # Headers and body in one send: split writes meet Nagle + delayed ACK (40 ms each).
        buffered: list[bytes] = self._headers_buffer  # type: ignore[attr-defined]
        buffered.append(b"\r\n" + (b"" if self.command == "HEAD" else data))
        self.flush_headers()

    def _drop(self) -> None:
        """Close the connection without a reply: the client cannot tell what happened."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _serve(self) -> None:
        es = self.es
        with es.lock:
            delay = es._delay
        if delay:
            time.sleep(delay)
        parts = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        ok, why = es.authorized(self.headers.get("Authorization"))
        if not ok:
            error = EsError(
                401,
                "security_exception",
                f"{why} for REST request [{parts.path}]",
                header={"WWW-Authenticate": ['Basic realm="security" charset="UTF-8"', "ApiKey"]},
            )
            self._reply(401, error.body(), {"WWW-Authenticate": 'Basic realm="security"'})
            return
        with es.lock:
            failing = time.monotonic() < es._fail_requests_until
            if failing:
                es.failed_requests += 1
        if failing:
            error = EsError(es._fail_status, "exception", "injected by the test server")
            self._reply(es._fail_status, error.body())
            return
        if length > es.max_content_length:
            self._reply(
                413,
                EsError(
                    413,
                    "content_too_long_exception",
                    f"request content is too large: {length} > {es.max_content_length}",
                ).body(),
            )
            return
        segments = [unquote(s) for s in parts.path.split("/") if s]
        try:
            outcome = self._route(self.command, segments, raw, params)
        except EsError as exc:
            self._reply(exc.status, exc.body())
            return
        except Exception as exc:  # a bug here must still answer like a server
            error = EsError(500, "exception", f"{type(exc).__name__}: {exc}")
            self._reply(500, error.body())
            return
        if outcome is None:
            self._drop()
            return
        status, body = outcome
        if params.get("filter_path") and isinstance(body, dict):
            body = filter_response(body, params["filter_path"])
        self._reply(status, body)

    def _route(
        self, method: str, seg: list[str], raw: bytes, params: dict[str, str]
    ) -> tuple[int, Any] | None:
        es = self.es

        def body() -> Any:
            return json.loads(raw) if raw.strip() else None

        n = len(seg)
        if n == 0 and method in ("GET", "HEAD"):
            return 200, es.info()
        if n == 3 and seg[:2] == ["_stand_in", "writes"] and method == "GET":
            return 200, es.write_report(seg[2])  # test-only: no Elasticsearch has this
        if seg == ["_cluster", "health"] and method == "GET":
            return 200, {"cluster_name": "exactlyonce-test", "status": "green", "timed_out": False}
        if seg and seg[-1] == "_bulk" and method in ("POST", "PUT") and n <= 2:
            response, drop = es.bulk(raw, seg[0] if n == 2 else None, params)
            return None if drop else (200, response)
        if seg and seg[-1] == "_mget" and method in ("GET", "POST") and n <= 2:
            return 200, self._mget(seg[0] if n == 2 else None, body() or {}, params)
        if seg and seg[-1] == "_refresh" and method in ("GET", "POST") and n <= 2:
            with es.lock:
                targets = [es._get_index(seg[0])] if n == 2 else list(es.indices.values())
                for index in targets:
                    index.refresh()
            return 200, {"_shards": _SHARDS}
        if seg == ["_search", "scroll"] and method in ("GET", "POST"):
            return 200, es.scroll(str((body() or {}).get("scroll_id", params.get("scroll_id"))))
        if seg == ["_search", "scroll"] and method == "DELETE":
            with es.lock:
                for scroll_id in (body() or {}).get("scroll_id", []):
                    es.scrolls.pop(scroll_id, None)
            return 200, {"succeeded": True, "num_freed": 1}
        if seg and seg[-1] in ("_search", "_count") and method in ("GET", "POST") and n <= 2:
            found = es.search(seg[0] if n == 2 else None, body(), params)
            if seg[-1] == "_count":
                count = found["hits"]["total"]["value"]
                return 200, {"count": count, "_shards": _SEARCH_SHARDS}
            return 200, found
        if n == 1 and method == "PUT":
            return self._index_api(method, seg[0], body())
        if n >= 1 and seg[0].startswith("_"):
            raise EsError(
                400, "illegal_argument_exception", f"no handler found for uri [{self.path}]"
            )
        if n == 1:
            return self._index_api(method, seg[0], body())
        if n == 2 and seg[1] == "_mapping" and method in ("PUT", "POST"):
            return 200, es.put_mapping(seg[0], body() or {})
        if n == 2 and seg[1] == "_mapping" and method == "GET":
            with es.lock:
                return 200, {seg[0]: {"mappings": es._get_index(seg[0]).mappings()}}
        if n == 2 and seg[1] == "_doc" and method == "POST":
            return self._write(seg[0], None, "index", body(), params)
        if n == 3 and seg[1] in ("_doc", "_create"):
            name, doc_id = seg[0], seg[2]
            if method in ("GET", "HEAD") and seg[1] == "_doc":
                with es.lock:
                    found = es._get_index(name).get(
                        doc_id, params.get("realtime") != "false", _wants_source(params)
                    )
                return (200 if found["found"] else 404), found
            if method == "DELETE" and seg[1] == "_doc":
                return self._write(name, doc_id, "delete", None, params)
            if method in ("PUT", "POST"):
                op = "create" if seg[1] == "_create" else params.get("op_type", "index")
                return self._write(name, doc_id, op, body(), params)
        raise EsError(
            405 if n <= 3 else 400,
            "illegal_argument_exception",
            f"Incorrect HTTP method for uri [{self.path}] and method [{method}]",
        )

    def _index_api(self, method: str, name: str, body: Any) -> tuple[int, Any]:
        es = self.es
        with es.lock:
            if method == "HEAD":
                return (200 if name in es.indices else 404), None
            if method == "PUT":
                return 200, es.create_index(name, body)
            if method == "DELETE":
                es._get_index(name)
                es._drop_index(name)
                return 200, {"acknowledged": True}
            if method == "GET":
                index = es._get_index(name)
                return 200, {name: {"aliases": {}, "mappings": index.mappings(), "settings": {}}}
        raise EsError(405, "illegal_argument_exception", f"Incorrect HTTP method [{method}]")

    def _write(
        self,
        name: str,
        doc_id: str | None,
        op: str,
        source: Any,
        params: dict[str, str],
    ) -> tuple[int, Any] | None:
        es = self.es
        if op not in ("index", "create", "delete"):
            raise EsError(
                400,
                "illegal_argument_exception",
                f"opType must be 'create' or 'index', found: [{op}]",
            )
        if op != "delete" and not isinstance(source, dict):
            raise EsError(400, "parse_exception", "request body is required")
        guard = check_guard(params.get("if_seq_no"), params.get("if_primary_term"))
        versioning = check_versioning(op, params.get("version"), params.get("version_type"))
        problems = [p for p in (guard, versioning) if p is not None]
        if problems:
            raise _invalid(problems)
        with es.lock:
            index = es._get_index(name) if op == "delete" else es._auto_index(name)
            if doc_id is None:
                doc_id = base64.urlsafe_b64encode(uuid.uuid4().bytes[:15]).decode()
            try:
                status, item = index.write(
                    op,
                    doc_id,
                    source,
                    params.get("if_seq_no"),
                    params.get("if_primary_term"),
                    params.get("version"),
                    params.get("version_type"),
                )
            except EsError as exc:
                index.note(op, doc_id, exc.status)
                es._persist()
                raise
            index.note(op, doc_id, status)
            if params.get("refresh") in _REFRESH:
                index.refresh()
            es._persist()
            if es._drop_doc_after > 0:
                es._drop_doc_after -= 1
                es.dropped_replies += 1
                return None
        return status, item

    def _mget(self, name: str | None, body: dict[str, Any], params: dict[str, str]) -> Any:
        es = self.es
        realtime, source = params.get("realtime") != "false", _wants_source(params)
        wanted: list[tuple[str | None, str]] = [(name, str(i)) for i in body.get("ids", [])]
        for spec in body.get("docs", []):
            wanted.append((spec.get("_index", name), str(spec["_id"])))
        missing = [f"index is missing for doc {i}" for i, (n, _) in enumerate(wanted) if n is None]
        if missing or not wanted:
            raise _invalid(missing or ["no documents to get"])
        docs: list[dict[str, Any]] = []
        with es.lock:
            for index_name, doc_id in wanted:
                assert index_name is not None
                if index_name not in es.indices:
                    error = _not_found(index_name).body()["error"]
                    docs.append({"_index": index_name, "_id": doc_id, "error": error})
                else:
                    docs.append(es.indices[index_name].get(doc_id, realtime, source))
        return {"docs": docs}


def serve(
    host: str, port: int, ready: Callable[[EsTestServer], None] | None = None, **kw: Any
) -> None:
    """Run until SIGTERM/SIGINT (the standalone mode)."""
    server = EsTestServer(host, port, **kw).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if ready is not None:
        ready(server)
    stop.wait()
    server.stop()


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m exactlyonce.integration.lab.es_stand_in",
        description="An Elasticsearch 8 test server.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--user", help="require basic auth with this user")
    parser.add_argument("--password", help="the password for --user")
    parser.add_argument(
        "--data",
        type=Path,
        help="keep what is acknowledged in this directory's journal, and load it at start "
        "(without it, the server starts empty and forgets everything when it stops)",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    auth = (args.user, args.password or "") if args.user else None
    serve(
        args.host,
        args.port,
        ready=lambda s: print(f"es_server listening on {s.url}", flush=True),
        basic_auth=auth,
        data=args.data,
    )


if __name__ == "__main__":
    main()
