"""Exactly-once Elasticsearch sink.

Guarantee: every record of the stream is in the target index exactly once, under its record
ID as ``_id``, through driver crashes, executor loss, re-run micro-batches, rejected bulk
items and lost bulk replies, provided the source replays and nothing else writes those
``_id``\\ s. With ``op_type="create"`` (default) each ``_id`` is written once and the first
version wins; with ``op_type="index"`` a re-sent record overwrites its own, identical copy.

Mechanism (Elasticsearch has no transactions, so idempotence carries the atomic step):

- each record gets a deterministic ID (``_id``) and its epoch (``epoch`` field), so every
  re-send of a record is a 409 (``create``) or an identical overwrite (``index``);
- executor tasks send their shard through ``helpers.streaming_bulk``, cut by count and bytes;
  only failed items are re-sent, on 429/5xx, with capped exponential backoff
  (:class:`RetryPolicy`); a lost reply re-sends the items it left unknown (never new IDs);
  items Elasticsearch refuses for their content (400) go to the dead-letter index;
- only after every item of the shard is acknowledged, the task writes a shard-commit document
  ``{query}|{sink}|{epoch}|{shard}`` into the control index; a re-run reads those with a
  realtime ``mget`` (never search, which sees only refreshed documents) and skips them;
- the driver then advances the head document ``{query}|{sink}`` (epoch, Spark query id,
  shard count) with optimistic concurrency, and verifies it by a realtime GET when a reply
  is lost; epochs at or below the head are skipped whole after a restart.

Example::

    sink = ElasticsearchSink(hosts="https://es:9200", index="events", id_columns=["event_id"],
                             query_name="clicks-to-es", api_key=os.environ["ES_API_KEY"])
    df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pyarrow as pa
from elastic_transport import ConnectionTimeout, TlsError
from elasticsearch import (
    ApiError,
    AuthenticationException,
    AuthorizationException,
    BadRequestError,
    ConflictError,
    Elasticsearch,
    NotFoundError,
    helpers,
)
from elasticsearch import ConnectionError as EsConnectionError

from exactlyonce.connectors.base import (
    DeadLetter,
    ExactlyOnceSink,
    Head,
    ShardTask,
    ShardWriter,
    TaskWriter,
)
from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.errors import ConfigError, SinkUnavailableError
from exactlyonce.faults import crash_point
from exactlyonce.secrets import Secret, dsn_password, redact_dsn, scrub

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("exactlyonce.elasticsearch")

T = TypeVar("T")
OpType = Literal["create", "index"]
ID_COLUMN = "_id"  # the record ID travels as the document's _id, never inside _source
CONTROL_INDEX = "exactlyonce-control"
CONTROL_MAPPING: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "kind": {"type": "keyword"},
        "query_name": {"type": "keyword"},
        "sink": {"type": "keyword"},
        "epoch": {"type": "long"},
        "shard": {"type": "integer"},
        "num_shards": {"type": "integer"},
        "spark_query_id": {"type": "keyword"},
        "writer": {"type": "keyword"},
        "updated_at": {"type": "date"},
    },
}
DEAD_LETTER_MAPPING: dict[str, Any] = {
    "properties": {
        "query_name": {"type": "keyword"},
        "sink": {"type": "keyword"},
        "index": {"type": "keyword"},
        "epoch": {"type": "long"},
        "shard": {"type": "integer"},
        "record_id": {"type": "keyword"},
        "error": {"type": "text"},
        "payload": {"type": "text", "index": False},
    }
}
_BAD_INDEX_CHARS = set('\\/*?"<>| ,#:')


@dataclass(frozen=True)
class RetryPolicy:
    """Which failures are retried, how often, and how long to wait (capped exponential)."""

    max_retries: int = 5
    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    statuses: tuple[int, ...] = (429, 500, 502, 503, 504)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        return float(min(self.max_backoff, self.initial_backoff * 2 ** (attempt - 1)))

    def retryable(self, status: object) -> bool:
        return status in self.statuses


@dataclass(frozen=True)
class EsConnection:
    """How to reach the cluster; picklable, prints no credential."""

    hosts: tuple[str, ...]
    api_key: Secret | None = None
    user: str | None = None
    password: Secret | None = None
    ca_certs: str | None = None
    verify_certs: bool = True
    request_timeout: float = 30.0

    @property
    def where(self) -> str:
        return ", ".join(redact_dsn(h) for h in self.hosts)

    def secrets(self) -> list[str]:
        found = [dsn_password(h) for h in self.hosts]
        if self.api_key is not None:
            key = self.api_key.reveal()
            found += [key, *_api_key_parts(key)]
        if self.password is not None:
            pw = self.password.reveal()
            found += [pw, base64.b64encode(f"{self.user}:{pw}".encode()).decode()]
        return [s for s in found if s]

    def client(self) -> Elasticsearch:
        tls: dict[str, Any] = {"ca_certs": self.ca_certs} if self.ca_certs else {}
        return Elasticsearch(
            list(self.hosts),
            api_key=self.api_key.reveal() if self.api_key else None,
            basic_auth=(self.user or "", self.password.reveal()) if self.password else None,
            verify_certs=self.verify_certs,
            **tls,
            request_timeout=self.request_timeout,
            max_retries=0,  # every retry is ours: RetryPolicy, with deterministic _ids
            retry_on_timeout=False,
        )


def _api_key_parts(key: str) -> list[str]:
    try:
        decoded = base64.b64decode(key, validate=True).decode()
    except ValueError:
        return []
    return [decoded.partition(":")[2]] if ":" in decoded else []


def call(
    conn: EsConnection,
    client: Elasticsearch,
    policy: RetryPolicy,
    what: str,
    fn: Callable[[Elasticsearch], T],
    answers: tuple[type[ApiError], ...] = (NotFoundError, ConflictError),
) -> T:
    """One request with retries on timeouts, lost connections, 429 and 5xx.

    ``answers`` (404 and 409 by default) reach the caller unchanged; credentials refused
    become a ConfigError, anything still failing a SinkUnavailableError. Messages never hold
    secrets.
    """
    for attempt in range(policy.max_retries + 1):
        try:
            return fn(client)
        except answers:
            raise
        except (AuthenticationException, AuthorizationException) as exc:
            field = "api_key" if conn.api_key else "basic_auth"
            reason = scrub(str(exc.message), *conn.secrets())
            raise ConfigError(
                field,
                f"Elasticsearch at {conn.where} refused the credentials for {what} "
                f"(HTTP {exc.status_code}: {reason})",
            ) from None
        except TlsError as exc:
            raise ConfigError(
                "ca_certs",
                f"TLS with Elasticsearch at {conn.where} failed for {what}: "
                f"{scrub(str(exc), *conn.secrets())}",
            ) from None
        except ApiError as exc:
            if not policy.retryable(exc.status_code):
                raise SinkUnavailableError(
                    f"Elasticsearch at {conn.where} refused {what}: HTTP {exc.status_code} "
                    f"{scrub(str(exc.message), *conn.secrets())}"
                ) from None
            error = f"HTTP {exc.status_code}"
        except (EsConnectionError, ConnectionTimeout) as exc:
            error = scrub(str(exc), *conn.secrets())
        if attempt == policy.max_retries:
            raise SinkUnavailableError(
                f"cannot reach Elasticsearch at {conn.where} for {what} after "
                f"{policy.max_retries} retries: {error}"
            )
        time.sleep(policy.delay(attempt + 1))
    raise AssertionError("unreachable")


def _hex_id(*parts: object) -> str:
    return hashlib.md5("|".join(str(p) for p in parts).encode()).hexdigest()


def _check_index_name(field: str, name: str) -> str:
    if (
        not isinstance(name, str)
        or not name
        or name != name.lower()
        or name[0] in "-_+"
        or name in (".", "..")
        or len(name.encode()) > 255
        or any(c in _BAD_INDEX_CHARS for c in name)
    ):
        raise ConfigError(
            field,
            f"{name!r} is not a valid Elasticsearch index name (lowercase, no spaces or "
            '\\ / * ? " < > | , # :, not starting with - _ +)',
        )
    return name


# -- the executor side ------------------------------------------------------------------


@dataclass(frozen=True)
class EsTarget:
    """Everything a task needs to write; picklable, holds no connection."""

    conn: EsConnection
    index: str
    control_index: str
    dead_letter_index: str
    columns: tuple[str, ...]
    query_name: str
    sink_name: str
    op_type: OpType
    num_shards: int
    retry: RetryPolicy
    bulk_max_actions: int
    bulk_max_bytes: int
    dedup: DedupPlan | None = None

    def commit_id(self, epoch: int, shard: int) -> str:
        return f"{self.query_name}|{self.sink_name}|{epoch}|{shard}"


class ElasticsearchShardWriter(ShardWriter[EsTarget]):
    """The ``mapInArrow`` function of one epoch. Spark pickles it to every task."""

    def _task(self) -> EsShardTask:
        return EsShardTask(self.target, self.epoch)


Action = tuple[dict[str, Any], dict[str, Any]]  # (bulk header, _source)


def _as_is(action: Any) -> Any:
    return action


def _has_map(kind: pa.DataType) -> bool:
    """Whether a map type occurs anywhere in ``kind`` (lists, structs, maps, dictionaries)."""
    if pa.types.is_map(kind):
        return True
    if pa.types.is_dictionary(kind):
        return _has_map(kind.value_type)
    return any(_has_map(kind.field(i).type) for i in range(kind.num_fields))


class EsShardTask(ShardTask):
    """One task's shard: bulk its records, then write the shard-commit documents."""

    def __init__(self, target: EsTarget, epoch: int) -> None:
        super().__init__(epoch, ID_COLUMN, target.columns, target.dedup)
        self.t = target
        self.es: Elasticsearch | None = None
        self.acked = False
        self.null_letters: Counter[str] = Counter()

    @property
    def client(self) -> Elasticsearch:
        if self.es is None:
            self.es = self.t.conn.client()
        return self.es

    def _open(self) -> set[int]:
        ids = [self.t.commit_id(self.epoch, s) for s in range(self.t.num_shards)]
        resp = call(
            self.t.conn,
            self.client,
            self.t.retry,
            "reading shard commits",
            lambda es: es.mget(index=self.t.control_index, ids=ids, source=False, realtime=True),
        )
        committed = set()
        for shard, doc in enumerate(resp["docs"]):
            if doc.get("found"):
                committed.add(shard)
            elif "error" in doc and doc["error"].get("type") != "index_not_found_exception":
                raise SinkUnavailableError(f"cannot read shard commits: {doc['error']}")
        return committed

    def _write_rows(self, rows: pa.RecordBatch) -> None:
        header = {"_index": self.t.index}
        op = self.t.op_type
        actions: list[Action] = []
        # maps_as_pydicts makes pyarrow convert every value the slow way (about 7x slower per
        # row here): ask for it only when a column holds a map, where it changes the result.
        maps = "strict" if any(_has_map(f.type) for f in rows.schema) else None
        for doc in rows.to_pylist(maps_as_pydicts=maps):
            actions.append(({op: {**header, "_id": doc.pop(ID_COLUMN)}}, doc))
        refused = self._bulk(actions, "records")
        letters = [
            DeadLetter(
                self.epoch,
                None,
                actions[pos][0][op]["_id"],
                error,
                json.dumps(actions[pos][1], default=str, ensure_ascii=False),
            )
            for pos, error in refused
        ]
        if letters:
            self._write_dead_letters(letters)
            self.result.dead_letters += len(letters)

    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        actions: list[Action] = []
        for d in letters:
            if d.record_id is None:  # identical null-key records stay distinct letters
                self.null_letters[d.payload or ""] += 1
                key = f"null:{d.payload}#{self.null_letters[d.payload or '']}"
            else:
                key = d.record_id
            doc_id = _hex_id(self.t.query_name, self.t.sink_name, d.epoch, key)
            doc = {
                "query_name": self.t.query_name,
                "sink": self.t.sink_name,
                "index": self.t.index,
                "epoch": d.epoch,
                "shard": d.shard,
                "record_id": d.record_id,
                "error": d.error,
                "payload": d.payload,
            }
            actions.append(({"create": {"_index": self.t.dead_letter_index, "_id": doc_id}}, doc))
        refused = self._bulk(actions, "dead letters", count=False)
        if refused:
            raise SinkUnavailableError(
                f"the dead-letter index {self.t.dead_letter_index!r} refused {len(refused)} "
                f"letters, e.g. {refused[0][1]}; the task fails rather than drop records"
            )

    def _commit(self, new_shards: Sequence[int]) -> None:
        """Every item is acknowledged (or dead-lettered) by now: mark the shards committed."""
        actions: list[Action] = []
        for shard in new_shards:
            doc = {
                "kind": "shard_commit",
                "query_name": self.t.query_name,
                "sink": self.t.sink_name,
                "epoch": self.epoch,
                "shard": shard,
                "writer": self.result.writer,
            }
            header = {"_index": self.t.control_index, "_id": self.t.commit_id(self.epoch, shard)}
            actions.append(({"create": header}, doc))
        if actions and self._bulk(actions, "shard commits", count=False):
            raise SinkUnavailableError(f"cannot write the shard commits of epoch {self.epoch}")

    def _close(self) -> None:
        if self.es is not None:
            self.es.close()
            self.es = None

    def _bulk(self, actions: list[Action], what: str, count: bool = True) -> list[tuple[int, str]]:
        """Send ``actions`` until each is acknowledged; return those refused for content.

        A 409 on ``create`` is an earlier copy: a duplicate, or our own write whose reply was
        lost (then counted as written). 429/5xx items are re-sent alone, with backoff; a lost
        reply re-sends every item not yet answered. 400s (and 413 for a lone item) are
        returned as (position, error) for the dead-letter index.
        """
        policy = self.t.retry
        pending = list(range(len(actions)))
        unknown: set[int] = set()  # sent, but the reply was lost
        refused: list[tuple[int, str]] = []
        attempt, solo = 0, False
        while pending:
            retry: list[int] = []
            oversize: list[int] = []
            last = ""
            answered = 0
            try:
                results = helpers.streaming_bulk(
                    self.client,
                    (actions[p] for p in pending),  # type: ignore[misc]
                    chunk_size=1 if solo else self.t.bulk_max_actions,
                    max_chunk_bytes=self.t.bulk_max_bytes,
                    expand_action_callback=_as_is,
                    raise_on_error=False,
                    raise_on_exception=False,
                )
                for ok, item in results:
                    pos = pending[answered]
                    answered += 1
                    if count and not self.acked:
                        self.acked = True
                        crash_point("mid_bulk", self.epoch)
                    op, info = item.popitem()
                    status = info.get("status")
                    if ok or (status == 409 and op == "create"):
                        if count and (ok or pos in unknown):
                            self.result.written += 1
                        elif count:
                            self.result.duplicates += 1
                    elif policy.retryable(status):
                        retry.append(pos)
                        last = f"HTTP {status} {_reason(info)}"
                    elif status == 413 and not solo:
                        oversize.append(pos)
                    elif "exception" in info:  # the whole request failed, not this item
                        raise SinkUnavailableError(
                            f"Elasticsearch at {self.t.conn.where} refused a bulk request of "
                            f"{what}: HTTP {status} {scrub(_reason(info), *self.t.conn.secrets())}"
                        )
                    elif status in (400, 413):
                        refused.append((pos, f"{status}: {_reason(info)}"))
                    else:
                        raise SinkUnavailableError(
                            f"Elasticsearch refused {what} with HTTP {status}: {_reason(info)}"
                        )
            except (EsConnectionError, ConnectionTimeout) as exc:  # sent; the outcome unknown
                rest = pending[answered:]
                unknown.update(rest)
                retry.extend(rest)
                last = scrub(str(exc), *self.t.conn.secrets())
            if oversize and not retry:
                pending, solo = oversize, True
                continue
            pending = sorted(retry + oversize)
            solo = bool(oversize)
            if not pending:
                break
            attempt += 1
            if attempt > policy.max_retries:
                raise SinkUnavailableError(
                    f"Elasticsearch at {self.t.conn.where} still failed {len(pending)} of "
                    f"{len(actions)} {what} of epoch {self.epoch} after {policy.max_retries} "
                    f"retries ({last}); the task fails, nothing of it is marked committed"
                )
            time.sleep(policy.delay(attempt))
        return refused


def _reason(info: dict[str, Any]) -> str:
    error = info.get("error")
    if isinstance(error, dict):
        return f"{error.get('type', '')}: {error.get('reason', '')}"
    return str(error)


# -- the driver side --------------------------------------------------------------------


class ElasticsearchSink(ExactlyOnceSink):
    """Writes a stream into an Elasticsearch index exactly once. See the module docstring."""

    kind = "elasticsearch"

    def __init__(
        self,
        hosts: str | Sequence[str],
        index: str,
        id_columns: Sequence[str] | str,
        query_name: str,
        *,
        op_type: OpType = "create",
        api_key: str | tuple[str, str] | None = None,
        basic_auth: str | tuple[str, str] | None = None,
        ca_certs: str | None = None,
        verify_certs: bool = True,
        request_timeout: float = 30.0,
        dead_letter_index: str | None = None,
        control_index: str = CONTROL_INDEX,
        epoch_field: str = "epoch",
        mapping: dict[str, Any] | None = None,
        max_retries: int = 5,
        retry_policy: RetryPolicy | None = None,
        bulk_max_actions: int = 1000,
        bulk_max_bytes: int = 10 * 1024 * 1024,
        shards: int | None = None,
        sink_name: str | None = None,
        dedup: bool | DedupConfig = True,
        redis_url: str | None = None,
        check: bool = True,
    ) -> None:
        super().__init__(
            query_name=query_name,
            id_columns=id_columns,
            shards=shards,
            sink_name=sink_name,
            dedup=dedup,
            redis_url=redis_url,
        )
        if isinstance(hosts, str):
            hosts = [hosts]
        if not hosts or not all(isinstance(h, str) and h.strip() for h in hosts):
            raise ConfigError("hosts", "one or more Elasticsearch URLs are required")
        if op_type not in ("create", "index"):
            raise ConfigError("op_type", f"must be 'create' or 'index', got {op_type!r}")
        if api_key is not None and basic_auth is not None:
            raise ConfigError("api_key", "give api_key or basic_auth, not both")
        if isinstance(api_key, tuple):
            api_key = base64.b64encode(f"{api_key[0]}:{api_key[1]}".encode()).decode()
        user = password = None
        if basic_auth is not None:
            if isinstance(basic_auth, str):
                user, sep, password = basic_auth.partition(":")
                if not sep:
                    raise ConfigError("basic_auth", "a (user, password) pair or 'user:password'")
            else:
                user, password = basic_auth
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError("max_retries", f"must be a non-negative integer, got {max_retries!r}")
        if bulk_max_actions < 1 or bulk_max_bytes < 1024:
            raise ConfigError("bulk_max_actions", "bulk_max_actions >= 1, bulk_max_bytes >= 1024")
        self.conn = EsConnection(
            tuple(hosts),
            Secret(api_key) if api_key else None,
            user,
            Secret(password) if password is not None else None,
            ca_certs,
            verify_certs,
            request_timeout,
        )
        self.index = _check_index_name("index", index)
        self.control_index = _check_index_name("control_index", control_index)
        self.dead_letter_index = _check_index_name(
            "dead_letter_index", dead_letter_index or f"{index}-dead-letters"
        )
        if len(f"{query_name}|{self.sink_name}|".encode()) > 480:
            raise ConfigError("query_name", "query_name and sink name must fit a 512-byte _id")
        if epoch_field.startswith("_"):
            raise ConfigError("epoch_field", "names starting with '_' are Elasticsearch's own")
        self.op_type: OpType = op_type
        self.epoch_field = epoch_field
        self.mapping = mapping
        self.retry = retry_policy or RetryPolicy(max_retries=max_retries)
        self.bulk_max_actions = bulk_max_actions
        self.bulk_max_bytes = bulk_max_bytes
        self._es: Elasticsearch | None = None
        self._ready = False
        self._checked_schema: StructType | None = None
        if check:
            self.preflight()

    @property
    def sink_name(self) -> str:
        return self._sink_name or f"elasticsearch:{self.index}"

    @property
    def id_column(self) -> str:
        return ID_COLUMN

    @property
    def _client(self) -> Elasticsearch:
        if self._es is None:
            self._es = self.conn.client()
        return self._es

    def _call(self, what: str, fn: Callable[[Elasticsearch], T]) -> T:
        return call(self.conn, self._client, self.retry, what, fn)

    # -- preflight ---------------------------------------------------------------------

    def preflight(self, schema: StructType | None = None) -> None:
        """Check the cluster, the credentials and the indices (creating missing ones)."""
        if schema is not None:
            self._check_stream_columns(schema)
        if self._ready and (schema is None or schema == self._checked_schema):
            return
        self._call("the cluster info", lambda es: es.info())
        self._ensure_index(self.control_index, CONTROL_MAPPING)
        self._ensure_index(self.dead_letter_index, DEAD_LETTER_MAPPING)
        self._ensure_index(self.index, self._target_mapping())
        self._ready, self._checked_schema = True, schema

    def _check_stream_columns(self, schema: StructType) -> None:
        self._refuse_reserved_columns(
            schema.names,
            [(self.epoch_field, "epoch_field"), (ID_COLUMN, "id_columns")],
            ", which the sink writes",
        )
        self._check_id_columns(schema.names)

    def _target_mapping(self) -> dict[str, Any]:
        given = dict(self.mapping or {})
        if "properties" in given:
            mappings = {**given, "properties": dict(given["properties"])}
        else:
            props = {k: {"type": v} if isinstance(v, str) else v for k, v in given.items()}
            mappings = {"properties": props}
        mappings["properties"].setdefault(self.epoch_field, {"type": "long"})
        return mappings

    def _ensure_index(self, name: str, mappings: dict[str, Any]) -> None:
        if self._call(f"checking index {name!r}", lambda es: es.indices.exists(index=name)):
            return
        try:
            call(
                self.conn,
                self._client,
                self.retry,
                f"creating index {name!r}",
                lambda es: es.indices.create(index=name, mappings=mappings),
                answers=(BadRequestError,),
            )
            log.info("created index %s", name)
        except BadRequestError as exc:
            if exc.error != "resource_already_exists_exception":  # else: created meanwhile
                raise ConfigError(
                    "mapping", f"Elasticsearch refused to create index {name!r}: {exc.message}"
                ) from None

    # -- the head ----------------------------------------------------------------------

    @property
    def _head_id(self) -> str:
        return f"{self.query_name}|{self.sink_name}"

    def _get_head_doc(self) -> dict[str, Any] | None:
        try:
            resp = self._call(
                "reading the head",
                lambda es: es.get(index=self.control_index, id=self._head_id, realtime=True),
            )
        except NotFoundError:
            return None
        return dict(resp.body)

    def _read_head(self) -> Head | None:
        doc = self._get_head_doc()
        if doc is None:
            return None
        src = doc["_source"]
        return Head(int(src["epoch"]), src.get("spark_query_id"), int(src["num_shards"]))

    def _head_source(self, head: Head) -> dict[str, Any]:
        return {
            "kind": "head",
            "query_name": self.query_name,
            "sink": self.sink_name,
            "epoch": head.epoch,
            "spark_query_id": head.spark_query_id,
            "num_shards": head.num_shards,
            "updated_at": int(time.time() * 1000),
        }

    def _create_head(self, head: Head) -> None:
        # A 409: created already (a lost reply, or another driver); that head stands.
        with contextlib.suppress(ConflictError):
            self._call(
                "creating the head",
                lambda es: es.create(
                    index=self.control_index, id=self._head_id, document=self._head_source(head)
                ),
            )

    def _update_head(self, change: Callable[[Head], Head | None]) -> None:
        """Read, change and write back the head with optimistic concurrency (if_seq_no).

        A lost reply is retried by re-reading: the change is then either visible (done) or
        not (written again), never guessed.
        """
        while True:
            doc = self._get_head_doc()
            if doc is None:
                raise SinkUnavailableError(f"{self}: the head document disappeared")
            src = doc["_source"]
            current = Head(int(src["epoch"]), src.get("spark_query_id"), int(src["num_shards"]))
            new = change(current)
            if new is None:
                return
            try:
                self._call(
                    "writing the head",
                    lambda es, d=doc, h=new: es.index(  # type: ignore[misc]
                        index=self.control_index,
                        id=self._head_id,
                        document=self._head_source(h),
                        if_seq_no=d["_seq_no"],
                        if_primary_term=d["_primary_term"],
                    ),
                )
                return
            except ConflictError:
                continue  # changed since we read it (or our own lost write): read again

    def _bind_query_id(self, spark_query_id: str) -> None:
        self._update_head(
            lambda h: None if h.spark_query_id else Head(h.epoch, spark_query_id, h.num_shards)
        )

    def _advance_head(self, epoch: int, spark_query_id: str | None) -> None:
        self._update_head(
            lambda h: (
                None
                if h.epoch >= epoch
                else Head(epoch, spark_query_id or h.spark_query_id, h.num_shards)
            )
        )
        # The epoch's shard commits are spent: the head covers them. Best effort.
        shards = self._head.num_shards if self._head else (self.shards or 0)
        ops = [
            {"delete": {"_index": self.control_index, "_id": f"{self._head_id}|{epoch}|{s}"}}
            for s in range(shards)
        ]
        try:
            if ops:
                self._call("dropping shard commits", lambda es: es.bulk(operations=ops))
        except (SinkUnavailableError, ApiError) as exc:
            log.warning("%s: shard commits of epoch %d stay: %s", self, epoch, exc)

    def reset_head(self) -> None:
        """Forget what this query committed (not the data): for a deliberate fresh start."""
        self._call("refreshing", lambda es: es.indices.refresh(index=self.control_index))
        query = {
            "bool": {
                "filter": [
                    {"term": {"query_name": self.query_name}},
                    {"term": {"sink": self.sink_name}},
                ]
            }
        }
        found = self._call(
            "listing control documents",
            lambda es: es.search(index=self.control_index, query=query, size=10_000),
        )
        ops = [
            {"delete": {"_index": self.control_index, "_id": hit["_id"]}}
            for hit in found["hits"]["hits"]
        ]
        ops.append({"delete": {"_index": self.control_index, "_id": self._head_id}})
        self._call("resetting the head", lambda es: es.bulk(operations=ops))
        self._head = None
        log.warning("%s: head reset", self)

    def head(self) -> Head | None:
        """The committed head as the cluster has it now (realtime GET)."""
        return self._read_head()

    # -- the write ---------------------------------------------------------------------

    def _project(self, df: DataFrame, epoch: int) -> DataFrame:
        """Binary as base64 (Elasticsearch's ``binary``); the rest maps to JSON as is."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        kinds = {f.name: f.dataType for f in df.schema.fields}
        with_ids = self._with_ids(df, self.epoch_field, epoch)
        return with_ids.select(
            *[
                F.base64(F.col(n)).alias(n) if isinstance(kinds.get(n), T.BinaryType) else F.col(n)
                for n in with_ids.columns
            ]
        )

    def _task_writer(self, epoch: int, columns: Sequence[str]) -> TaskWriter:
        num_shards = self._head.num_shards if self._head is not None else (self.shards or 1)
        target = EsTarget(
            conn=self.conn,
            index=self.index,
            control_index=self.control_index,
            dead_letter_index=self.dead_letter_index,
            columns=tuple(columns),
            query_name=self.query_name,
            sink_name=self.sink_name,
            op_type=self.op_type,
            num_shards=num_shards,
            retry=self.retry,
            bulk_max_actions=self.bulk_max_actions,
            bulk_max_bytes=self.bulk_max_bytes,
            dedup=self.dedup_plan,
        )
        return ElasticsearchShardWriter(target, epoch)

    @property
    def unique_sink(self) -> bool:
        return True  # one document per _id: a lost catalog restarts empty, safely
