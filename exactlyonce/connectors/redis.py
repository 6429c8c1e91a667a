"""Exactly-once Redis sink.

Guarantee: every record of the stream is applied to Redis exactly once, through driver crashes,
executor loss, re-run micro-batches, duplicate input and restarts of the sink's Redis, provided
the source replays, the sink's Redis persists what it acknowledged (AOF with
``appendfsync always``; anything less can lose the last commits together with their head) and
nothing else writes the keys. Per ``write`` mode:

- ``"hash"``: ``HSET <key> <column> <value> ...`` of the record's columns (nulls are left out);
- ``"string"``: ``SET <key> <the record as JSON>`` (``PX`` with a TTL);
- ``"stream"``: ``XADD <key> * record_id <id> epoch <epoch> <column> <value> ...``.

Keys come from ``key_template``, ``str.format`` style (``"user:{user_id}"``), filled with each
column's Spark string form (binary as base64, nested types as JSON, as they are stored too).
Hash and string writes are idempotent by key; a stream append is not, so for ``"stream"``
exactly-once rests on the shard markers, the head and the ID catalog alone.

Mechanism (keys of the sink's Redis under ``prefix``, one hash tag per (query, sink)):

- the head ``<prefix>:head`` (a hash: ``epoch``, ``spark_query_id``, ``num_shards``) is read on
  start; epochs at or below it are skipped whole;
- each executor task collects its shard's records as JSON chunks. A task whose new records fit
  in one chunk (``pipeline_size`` records) sends them inline; a bigger one first stages its
  chunks into ``<prefix>:stage:<epoch>:<attempt>`` (a hash of chunk number -> chunk, expiring
  after a day, idempotent to re-send). Then ONE Lua script (EVALSHA), atomically on the
  server: checks that the head is below the epoch and that no shard of the task has a marker
  in ``<prefix>:done:<epoch>``, checks the staging is complete, writes the markers, applies
  every record and the task's dead letters, and drops the staging. Re-running a committed
  epoch or shard is therefore a no-op decided server-side, even when the client died after the
  write or lost the reply (the retry finds its own marker and reports the commit as verified);
- the driver advances the head with a script after every task committed; the same script
  deletes the shard markers of epochs at or below it, and what attempts killed mid-write had
  staged for them (listed in ``<prefix>:stages``).

Why staging rather than one huge call or MULTI: a script call is the only way Redis applies
many commands and a check atomically, but the whole shard must then reach the server before
it runs. Staging keeps each request and the executor's memory to one chunk, lets a lost reply
be retried chunk by chunk, and still applies the shard in one atomic step. The price: the
apply script blocks the sink's Redis while it runs (about 3-4 s per million small records;
other clients get BUSY after 5 s, which this sink's own calls wait out), and once it wrote
it cannot be killed, which is the point. More shards make each step smaller. Redis Cluster
is refused: one atomic step spans the records' keys, which live in many slots.

The ID catalog (in the catalog's Redis, which may be another server) drops duplicate input.
If it is lost, hash and string writes start an empty one (their keys keep them exactly-once);
``"stream"`` rebuilds it from the ``record_id``/``epoch`` fields of every stream it appended
to (listed in ``<prefix>:streams``), so it never guesses.

A record Redis refuses (a key holding another type: ``WRONGTYPE``) and a record with a null
key or key-template column go to the dead-letter stream ``<prefix>:dead-letters`` (epoch,
ID, error, payload) in the same atomic step; the rest of the shard proceeds.

Example::

    sink = RedisSink("redis://:pw@cache:6379/0", "user:{user_id}", id_columns=["event_id"],
                     query_name="clicks-to-redis", write="hash", ttl_seconds=86400)
    df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
"""

from __future__ import annotations

import contextlib
import json
import logging
import string
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis
from redis.connection import parse_url

from exactlyonce.connectors.base import (
    ERROR_COLUMN,
    PAYLOAD_COLUMN,
    DeadLetter,
    ExactlyOnceSink,
    Head,
    ShardTask,
    ShardWriter,
    TaskWriter,
    require_distinct,
    require_one_of,
)
from exactlyonce.dedup.catalog import DedupConfig, namespace
from exactlyonce.dedup.keeper import RebuildSource
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.errors import ConfigError, ExactlyOnceError, SinkUnavailableError
from exactlyonce.faults import crash_point
from exactlyonce.secrets import Secret, dsn_password, redact_dsn, scrub

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("exactlyonce.redis")

Write = Literal["hash", "string", "stream"]
WRITES = ("hash", "string", "stream")
VALUE_COLUMN = "_redis_value"  # string mode: the record as JSON, built by Spark
MAX_INLINE_BYTES = 8 << 20  # per chunk too: a bigger chunk of big records is split
STAGING_TTL_MS = 86_400_000
BUSY_WAIT_S = 600.0
T = TypeVar("T")

# KEYS: head, done:<epoch>, done-epochs, stage, dead-letters, stream registry, stage registry.
# ARGV: epoch, attempt token, staged chunks, config JSON, shards JSON, inline chunks...
# Returns {status, written, failed}: 1 applied, 2 applied by this attempt before (a lost reply),
# 0 another attempt committed these shards, -1 the head already passed the epoch.
LUA_APPLY = """
local epoch, token, nstaged = ARGV[1], ARGV[2], tonumber(ARGV[3])
local cfg = cjson.decode(ARGV[4])
local shards = cjson.decode(ARGV[5])
local function drop_stage() redis.call('DEL', KEYS[4]); redis.call('SREM', KEYS[7], KEYS[4]) end
local head = redis.call('HGET', KEYS[1], 'epoch')
if not head then
  drop_stage()
  return redis.error_reply('EO_HEAD_LOST the sink head ' .. KEYS[1] .. ' is missing')
end
local want = {[2] = 'hash', [3] = 'set', [5] = 'stream', [6] = 'set', [7] = 'set'}
for i, kind in pairs(want) do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= kind then
    return redis.error_reply('EO_WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t)
  end
end
if tonumber(head) >= tonumber(epoch) then drop_stage(); return {-1, 0, 0} end
for _, s in ipairs(shards) do
  local by = redis.call('HGET', KEYS[2], s)
  if by then
    drop_stage()
    if by == token then
      local w = redis.call('HGET', KEYS[2], 'w:' .. token) or '0 0'
      local a, b = string.match(w, '^(%d+) (%d+)$')
      return {2, tonumber(a) or 0, tonumber(b) or 0}
    end
    return {0, 0, 0}
  end
end
if nstaged > 0 and redis.call('HLEN', KEYS[4]) ~= nstaged then
  drop_stage()
  return redis.error_reply('EO_STAGING_LOST staged chunks of ' .. KEYS[4] .. ' are missing')
end
-- The markers are the first write: a full Redis refuses it here, before any record.
for _, s in ipairs(shards) do redis.call('HSET', KEYS[2], s, token) end
redis.call('SADD', KEYS[3], epoch)
local mode, ttl, fields = cfg.mode, tonumber(cfg.ttl), cfg.fields
local nf = #fields
local written, failed = 0, 0
local function dead(at, shard, rid, err, payload)
  local a = {'query', cfg.query, 'sink', cfg.sink, 'epoch', at, 'error', err}
  if shard ~= nil and shard ~= cjson.null then a[#a + 1] = 'shard'; a[#a + 1] = shard end
  if rid ~= nil and rid ~= cjson.null then a[#a + 1] = 'record_id'; a[#a + 1] = rid end
  if payload ~= nil and payload ~= cjson.null then a[#a + 1] = 'payload'; a[#a + 1] = payload end
  redis.call('XADD', KEYS[5], '*', unpack(a))
end
local function as_json(cols, i)
  local t = {}
  for j = 1, nf do if cols[j][i] ~= cjson.null then t[fields[j]] = cols[j][i] end end
  return cjson.encode(t)
end
-- One argument table, reused for every record without nulls (no allocation per record).
local cmd, base = 'HSET', 1
local a = {}
if mode == 'stream' then cmd, base, a = 'XADD', 6, {'', '*', cfg.idf, '', cfg.ef, epoch} end
for j = 1, nf do a[base + 2 * j - 1] = fields[j] end
local full = base + 2 * nf
local function apply(c)
  if c[1] == 'd' then
    for _, d in ipairs(c[2]) do dead(d[1], d[2], d[3], d[4], d[5]) end
    return
  end
  local keys, ids, body = c[2], c[3], c[4]
  local streams = {}
  for i = 1, #keys do
    local key, r = keys[i], nil
    if mode == 'string' then
      if ttl > 0 then r = redis.pcall('SET', key, body[i], 'PX', ttl)
      else r = redis.pcall('SET', key, body[i]) end
    else
      a[1] = key
      if base == 6 then a[4] = ids[i] end
      local args, n = a, full
      for j = 1, nf do
        local v = body[j][i]
        if v == cjson.null then args = nil; break end
        a[base + 2 * j] = v
      end
      if args == nil then -- null fields are left out
        args, n = {}, base
        for t = 1, base do args[t] = a[t] end
        for j = 1, nf do
          local v = body[j][i]
          if v ~= cjson.null then args[n + 1] = fields[j]; args[n + 2] = v; n = n + 2 end
        end
      end
      r = redis.pcall(cmd, unpack(args, 1, n))
      if base == 1 and ttl > 0 and type(r) ~= 'table' then redis.pcall('PEXPIRE', key, ttl) end
    end
    if type(r) == 'table' and r.err then
      failed = failed + 1
      dead(epoch, nil, ids[i], 'redis: ' .. r.err, mode == 'string' and body[i] or as_json(body, i))
    else
      written = written + 1
      if mode == 'stream' then streams[key] = true end
    end
  end
  for key in pairs(streams) do
    redis.call('SADD', KEYS[6], key)
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  end
end
for i = 1, nstaged do apply(cjson.decode(redis.call('HGET', KEYS[4], tostring(i)))) end
for i = 6, #ARGV do apply(cjson.decode(ARGV[i])) end
redis.call('HSET', KEYS[2], 'w:' .. token, written .. ' ' .. failed)
drop_stage()
return {1, written, failed}
"""

# KEYS: head, done-epochs, stage registry. ARGV: epoch, spark query id or '', now, done prefix.
# Also drops what attempts killed mid-write staged for epochs at or below the head.
LUA_ADVANCE = """
local head = redis.call('HGET', KEYS[1], 'epoch')
if not head then
  return redis.error_reply('EO_HEAD_LOST the sink head ' .. KEYS[1] .. ' is missing')
end
local e = tonumber(ARGV[1])
if tonumber(head) < e then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'updated_at', ARGV[3])
  if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'spark_query_id', ARGV[2]) end
end
for _, d in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if tonumber(d) <= e then redis.call('DEL', ARGV[4] .. d); redis.call('SREM', KEYS[2], d) end
end
for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local at = tonumber(string.match(k, ':stage:(%d+):[^:]*$'))
  if at and at <= e then redis.call('DEL', k); redis.call('SREM', KEYS[3], k) end
end
return 1
"""

# KEYS: head. ARGV: epoch, num_shards, spark query id or '', now.
LUA_CREATE_HEAD = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'num_shards', ARGV[2], 'updated_at', ARGV[4])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'spark_query_id', ARGV[3]) end
return 1
"""


# -- key templates -------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyTemplate:
    """``str.format``-style key template whose fields name columns: ``"user:{user_id}"``."""

    text: str
    parts: tuple[tuple[str, str | None, str, str | None], ...]

    @classmethod
    def parse(cls, text: object) -> KeyTemplate:
        if not isinstance(text, str) or not text:
            raise ConfigError("key_template", "a non-empty str.format template is required")
        try:
            parsed = tuple(
                (literal, name, spec or "", conv)
                for literal, name, spec, conv in string.Formatter().parse(text)
            )
        except ValueError as exc:
            raise ConfigError("key_template", f"not a str.format template: {exc}") from None
        for _, name, spec, _conv in parsed:
            if name is None:
                continue
            if name == "" or name.isdigit():
                raise ConfigError("key_template", "fields must name columns, as in {user_id}")
            if "." in name or "[" in name:
                raise ConfigError(
                    "key_template", f"{{{name}}}: name a column, not an attribute or an item"
                )
            if "{" in spec:
                raise ConfigError("key_template", f"{{{name}}}: nested fields are not supported")
        template = cls(text, parsed)
        try:
            text.format_map({name: "x" for name in template.fields})
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                "key_template", f"cannot format it with string column values: {exc}"
            ) from None
        return template

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p[1] for p in self.parts if p[1] is not None))

    def render(self, batch: pa.RecordBatch) -> list[str]:
        """The key of every row; the columns are strings, non-null (else dead-lettered)."""
        n = batch.num_rows
        if not self.fields:
            return [self.text.format()] * n
        if all(spec == "" and conv is None for _, _, spec, conv in self.parts):
            pieces: list[Any] = []
            for literal, name, _, _ in self.parts:
                if literal:
                    pieces.append(pa.scalar(literal, pa.string()))
                if name is not None:
                    pieces.append(batch.column(name).cast(pa.string()))
            if len(pieces) == 1:
                return list(pieces[0].to_pylist())
            joined = pc.binary_join_element_wise(*pieces, pa.scalar("", pa.string()))
            return list(joined.to_pylist())
        columns = {name: batch.column(name).to_pylist() for name in self.fields}
        names = list(columns)
        return [
            self.text.format_map(dict(zip(names, values, strict=True)))
            for values in zip(*columns.values(), strict=True)
        ]


# -- connections ---------------------------------------------------------------------------


def connect(url: Secret, *, retries: int, socket_timeout: float, connect_timeout: float) -> Any:
    """A client that retries connection errors with backoff (a restarting Redis, a lost reply).

    Every command the sink sends is idempotent or checked server-side, so a re-send is safe.
    """
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(
        url.reveal(),
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries),
        health_check_interval=30,
    )


def patient(call: Callable[[], T], wait_s: float = BUSY_WAIT_S) -> T:
    """Run ``call``; while Redis answers BUSY (another query's apply script runs), retry.

    BUSY means the command was not run. ``call`` must build any pipeline afresh.
    """
    deadline = time.monotonic() + wait_s
    delay = 0.05
    while True:
        try:
            return call()
        except redis.ResponseError as exc:
            if not str(exc).startswith("BUSY") or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(1.0, delay * 2)


def _script_error(exc: redis.ResponseError, where: str) -> ExactlyOnceError:
    text = str(exc)
    if "EO_HEAD_LOST" in text:
        return ExactlyOnceError(
            f"the sink head is missing from the Redis at {where}: it lost its data (a restart "
            "without persistence, a flush) or the head was reset while the query ran. Refusing "
            "to write: run the sink's Redis with appendonly yes, then restart the query."
        )
    return ExactlyOnceError(f"Redis at {where}: {text}")


# -- the sink (driver side) ---------------------------------------------------------------


class RedisSink(ExactlyOnceSink):
    """Writes a stream into Redis exactly once. See the module docstring."""

    kind = "redis"

    def __init__(
        self,
        url: str,
        key_template: str,
        id_columns: Sequence[str] | str,
        query_name: str,
        *,
        write: Write = "hash",
        ttl_seconds: float | None = None,
        pipeline_size: int = 10_000,
        dedup: bool | DedupConfig = True,
        redis_url: str | None = None,
        shards: int | None = None,
        check: bool = True,
        sink_name: str | None = None,
        prefix: str | None = None,
        id_field: str = "record_id",
        epoch_field: str = "epoch",
        socket_timeout: float = 120.0,
        connect_timeout: float = 10.0,
        retries: int = 30,
    ) -> None:
        super().__init__(
            query_name=query_name,
            id_columns=id_columns,
            shards=shards,
            sink_name=sink_name,
            dedup=dedup,
            redis_url=redis_url,
        )
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError("url", "must be a redis://, rediss:// or unix:// URL")
        try:
            parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            reason = scrub(str(exc), dsn_password(url))
            raise ConfigError("url", f"not a valid Redis URL: {reason}") from None
        require_one_of("write", write, WRITES)
        if write == "stream":
            self._require_catalog(
                "write='stream' appends: duplicates in the input need the catalog"
            )
        if ttl_seconds is not None and (
            isinstance(ttl_seconds, bool)
            or not isinstance(ttl_seconds, (int, float))
            or not ttl_seconds * 1000 >= 1
        ):
            raise ConfigError("ttl_seconds", f"must be None or positive, got {ttl_seconds!r}")
        if (
            not isinstance(pipeline_size, int)
            or isinstance(pipeline_size, bool)
            or pipeline_size < 1
        ):
            raise ConfigError("pipeline_size", f"must be a positive integer, got {pipeline_size!r}")
        for name, value in (("id_field", id_field), ("epoch_field", epoch_field)):
            if not isinstance(value, str) or not value:
                raise ConfigError(name, "must be a non-empty string")
        require_distinct("epoch_field", epoch_field, "id_field", id_field)
        self.template = KeyTemplate.parse(key_template)
        if write != "stream" and not self.template.fields:
            raise ConfigError(
                "key_template",
                f"{key_template!r} names no column: every record would overwrite one key",
            )
        self._url = Secret(url)
        self._where = redact_dsn(url)
        self.write: Write = write
        self.ttl_ms = None if ttl_seconds is None else int(round(ttl_seconds * 1000))
        self.pipeline_size = pipeline_size
        self.id_field = id_field
        self.epoch_field = epoch_field
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.prefix = prefix or f"{namespace(query_name, self.sink_name)}:sink"
        self._redis: Any = None
        self._ready = False
        if check:
            self.preflight()

    @property
    def sink_name(self) -> str:
        return self._sink_name or f"redis:{self.write}:{self.template.text}"

    @property
    def id_column(self) -> str:
        return self.id_field

    @property
    def head_key(self) -> str:
        return f"{self.prefix}:head"

    @property
    def dead_letter_key(self) -> str:
        return f"{self.prefix}:dead-letters"

    @property
    def stream_registry_key(self) -> str:
        """A set of every stream key the sink appended to (``write="stream"``)."""
        return f"{self.prefix}:streams"

    def _done_key(self, epoch: int | str) -> str:
        return f"{self.prefix}:done:{epoch}"

    # -- connections -------------------------------------------------------------------

    @property
    def _client(self) -> Any:
        if self._redis is None:
            self._redis = connect(
                self._url,
                retries=self.retries,
                socket_timeout=self.socket_timeout,
                connect_timeout=self.connect_timeout,
            )
        return self._redis

    @contextlib.contextmanager
    def _reaching(self) -> Iterator[None]:
        """Connection failures as SinkUnavailableError; never with the password."""
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            reason = scrub(str(exc).strip(), dsn_password(self._url.reveal()))
            raise SinkUnavailableError(f"cannot reach Redis at {self._where}: {reason}") from None
        except redis.ResponseError as exc:
            raise _script_error(exc, self._where) from None

    # -- preflight ---------------------------------------------------------------------

    def preflight(self, schema: StructType | None = None) -> None:
        """Check the server (reachable, not a cluster) and, with ``schema``, the columns."""
        if schema is not None:
            self._check_columns(list(schema.names))
        if self._ready:
            return
        probe = connect(
            self._url,
            retries=0,
            socket_timeout=self.connect_timeout,
            connect_timeout=self.connect_timeout,
        )
        try:
            with self._reaching():
                probe.ping()
                if int(probe.info("cluster").get("cluster_enabled", 0)):
                    raise ConfigError(
                        "url",
                        "Redis Cluster is not supported: one atomic step spans the records' "
                        "keys, which a cluster spreads over slots. Use a standalone primary.",
                    )
                kind = probe.type(self.head_key).decode()
                if kind not in ("none", "hash"):
                    raise ConfigError("prefix", f"{self.head_key} already holds a {kind}")
                self._warn_without_persistence(probe)
        finally:
            probe.close()
        self._ready = True

    def _check_columns(self, names: list[str]) -> None:
        self._check_id_columns(names)
        missing = [f for f in self.template.fields if f not in names]
        if missing:
            raise ConfigError(
                "key_template",
                f"{self.template.text!r} names column(s) {missing} that are not in the "
                f"stream's columns {names}",
            )
        reserved = [(self.id_field, "id_field"), (self.epoch_field, "epoch_field")]
        if self.write == "string":
            reserved.append((VALUE_COLUMN, "write"))
        self._refuse_reserved_columns(names, reserved, "; choose another")

    def _warn_without_persistence(self, client: Any) -> None:
        try:
            aof = client.config_get("appendonly").get("appendonly")
        except redis.RedisError:
            return  # CONFIG is often disabled on managed Redis
        if aof != "yes":
            log.warning(
                "%s: the sink's Redis at %s runs without AOF persistence; a restart would lose "
                "committed records and their head. Run it with appendonly yes (appendfsync "
                "always for every commit to be durable when acknowledged).",
                self,
                self._where,
            )

    # -- the head ----------------------------------------------------------------------

    def _read_head(self) -> Head | None:
        with self._reaching():
            raw = patient(lambda: self._client.hgetall(self.head_key))
        if not raw:
            return None
        got = {k.decode(): v.decode() for k, v in raw.items()}
        return Head(int(got["epoch"]), got.get("spark_query_id") or None, int(got["num_shards"]))

    def _create_head(self, head: Head) -> None:
        with self._reaching():
            script = self._client.register_script(LUA_CREATE_HEAD)
            args = [head.epoch, head.num_shards, head.spark_query_id or "", time.time()]
            patient(lambda: script(keys=[self.head_key], args=args))

    def _bind_query_id(self, spark_query_id: str) -> None:
        with self._reaching():
            patient(lambda: self._client.hsetnx(self.head_key, "spark_query_id", spark_query_id))

    def _advance_head(self, epoch: int, spark_query_id: str | None) -> None:
        """One script: the head moves to ``epoch``; shard markers at or below it go."""
        script = self._client.register_script(LUA_ADVANCE)
        keys = [self.head_key, f"{self.prefix}:done-epochs", f"{self.prefix}:stages"]
        args = [epoch, spark_query_id or "", time.time(), f"{self.prefix}:done:"]
        with self._reaching():
            patient(lambda: script(keys=keys, args=args))

    def reset_head(self) -> None:
        """Forget what this query committed (not the data): for a deliberate fresh start."""
        with self._reaching():
            r = self._client
            epochs = [e.decode() for e in r.smembers(f"{self.prefix}:done-epochs")]
            stages = list(r.smembers(f"{self.prefix}:stages"))
            r.delete(self.head_key, f"{self.prefix}:done-epochs", f"{self.prefix}:stages")
            leftovers = [*map(self._done_key, epochs), *stages]
            if leftovers:
                r.delete(*leftovers)
        self._head = None
        log.warning("%s: head reset", self)

    def head(self) -> Head | None:
        """The committed head as the sink's Redis has it now."""
        return self._read_head()

    # -- the write ---------------------------------------------------------------------

    def _project(self, df: DataFrame, epoch: int) -> DataFrame:
        """Stored columns as their Spark string form; null template columns are bad records."""
        from pyspark.sql import functions as F

        self._check_columns(list(df.columns))
        user = list(df.columns)
        kinds = {f.name: f.dataType for f in df.schema.fields}
        with_ids = self._with_ids(df, self.epoch_field, epoch)
        record_json = F.to_json(F.struct(*map(F.col, user)), {"ignoreNullFields": "false"})
        stored = list(self.template.fields) if self.write == "string" else user
        columns = [_as_text(name, kinds[name]).alias(name) for name in stored]
        columns += [F.col(self.id_field), F.col(self.epoch_field)]
        if self.write == "string":
            columns.append(record_json.alias(VALUE_COLUMN))
        error, payload = F.col(ERROR_COLUMN), F.col(PAYLOAD_COLUMN)
        if self.template.fields:
            null = F.lit(False)
            for name in self.template.fields:
                null = null | F.col(name).isNull()
            reason = F.concat(
                F.lit("null key template column(s): "),
                F.concat_ws(
                    ", ", *[F.when(F.col(n).isNull(), F.lit(n)) for n in self.template.fields]
                ),
            )
            error = F.coalesce(error, F.when(null, reason))
            payload = F.coalesce(payload, F.when(null, record_json))
        columns += [error.alias(ERROR_COLUMN), payload.alias(PAYLOAD_COLUMN)]
        return with_ids.select(*columns)

    def _task_writer(self, epoch: int, columns: Sequence[str]) -> TaskWriter:
        assert self._head is not None
        target = RedisTarget(
            url=self._url,
            write=self.write,
            template=self.template,
            columns=tuple(columns),
            fields=tuple(c for c in columns if c not in (self.id_field, self.epoch_field))
            if self.write != "string"
            else (),
            id_field=self.id_field,
            epoch_field=self.epoch_field,
            ttl_ms=self.ttl_ms,
            pipeline_size=self.pipeline_size,
            prefix=self.prefix,
            query_name=self.query_name,
            sink_name=self.sink_name,
            num_shards=self._head.num_shards,
            socket_timeout=self.socket_timeout,
            connect_timeout=self.connect_timeout,
            retries=self.retries,
            dedup=self.dedup_plan,
        )
        return RedisShardWriter(target, epoch)

    @property
    def unique_sink(self) -> bool:
        """Hash and string writes: the key is the identity. A stream append is not."""
        return self.write != "stream"

    def _rebuild_source(self) -> RebuildSource | None:
        """Stream mode: the record IDs and epochs of every stream the sink appended to.

        Exact while the streams are neither trimmed nor expired: with ``ttl_seconds``, keep
        the catalog's retention within the TTL, or a rebuild misses the expired entries.
        """
        if self.write != "stream":
            return None
        idf, ef = self.id_field.encode(), self.epoch_field.encode()

        def read(from_epoch: int) -> Iterator[tuple[Any, Any]]:
            r = self._client
            with self._reaching():
                keys = patient(lambda: list(r.sscan_iter(self.stream_registry_key, count=1000)))
            for key in keys:
                start: bytes = b"-"
                while True:
                    with self._reaching():
                        entries = r.xrange(key, min=start, max="+", count=20_000)
                    mine = [(f[idf], int(f[ef])) for _, f in entries if idf in f and ef in f]
                    ids = [rid for rid, at in mine if at >= from_epoch]
                    if ids:
                        epochs = [at for _, at in mine if at >= from_epoch]
                        yield np.array(ids, dtype="S32"), np.array(epochs, dtype=np.int64)
                    if len(entries) < 20_000:
                        break
                    start = b"(" + entries[-1][0]

        return read


def _as_text(name: str, kind: Any) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    c = F.col(name)
    if isinstance(kind, T.StringType):
        return c
    if isinstance(kind, T.BinaryType):
        return F.base64(c)
    if isinstance(kind, (T.ArrayType, T.MapType, T.StructType)):
        return F.to_json(c)
    return c.cast("string")


# -- the executor side ---------------------------------------------------------------------


@dataclass(frozen=True)
class RedisTarget:
    """Everything a task needs to write; picklable, holds no connection."""

    url: Secret
    write: str
    template: KeyTemplate
    columns: tuple[str, ...]
    fields: tuple[str, ...]
    id_field: str
    epoch_field: str
    ttl_ms: int | None
    pipeline_size: int
    prefix: str
    query_name: str
    sink_name: str
    num_shards: int
    socket_timeout: float
    connect_timeout: float
    retries: int
    dedup: DedupPlan | None = None


class RedisShardWriter(ShardWriter[RedisTarget]):
    """The ``mapInArrow`` function of one epoch. Spark pickles it to every task."""

    def _task(self) -> RedisShardTask:
        return RedisShardTask(self.target, self.epoch)


class RedisShardTask(ShardTask):
    """One task's atomic step: chunks inline or staged, then one apply script."""

    def __init__(self, target: RedisTarget, epoch: int) -> None:
        super().__init__(epoch, target.id_field, target.columns, target.dedup)
        self.t = target
        self.r: Any = None
        self.token = f"{self.result.writer}:{uuid.uuid4().hex[:12]}"
        self.stage_key = f"{target.prefix}:stage:{epoch}:{uuid.uuid4().hex}"
        self.letters = 0
        self.pending: list[bytes] = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.staged = 0
        self.status: int | None = None  # of the apply script: see LUA_APPLY

    def _open(self) -> set[int]:
        self.r = connect(
            self.t.url,
            retries=self.t.retries,
            socket_timeout=self.t.socket_timeout,
            connect_timeout=self.t.connect_timeout,
        )

        def read() -> list[Any]:
            pipe = self.r.pipeline(transaction=True)
            pipe.hget(f"{self.t.prefix}:head", "epoch")
            pipe.hkeys(f"{self.t.prefix}:done:{self.epoch}")
            return list(pipe.execute())

        head, done = patient(read)
        if head is None:
            raise _script_error(redis.ResponseError("EO_HEAD_LOST"), "the sink")
        if int(head) >= self.epoch:  # a late attempt: the epoch is committed whole
            return set(range(self.t.num_shards))
        return {int(s) for s in done if s.isdigit()}

    def _write_rows(self, rows: pa.RecordBatch) -> None:
        size = self.t.pipeline_size
        for start in range(0, rows.num_rows, size):
            self._add_encoded(rows.slice(start, size))

    def _add_encoded(self, rows: pa.RecordBatch) -> None:
        chunk = self._encode(rows)
        if len(chunk) > MAX_INLINE_BYTES and rows.num_rows > 1:  # big records: smaller chunks
            half = rows.num_rows // 2
            self._add_encoded(rows.slice(0, half))
            self._add_encoded(rows.slice(half))
            return
        self._add(chunk, rows.num_rows)

    def _encode(self, rows: pa.RecordBatch) -> bytes:
        keys = self.t.template.render(rows)
        ids = rows.column(self.t.id_field).to_pylist()
        if self.t.write == "string":
            body: Any = rows.column(VALUE_COLUMN).to_pylist()
        else:
            body = [rows.column(f).to_pylist() for f in self.t.fields]
        return _dumps(["r", keys, ids, body])

    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        rows = [[d.epoch, d.shard, d.record_id, d.error, d.payload] for d in letters]
        self.letters += len(rows)
        self._add(_dumps(["d", rows]), len(rows))

    def _add(self, chunk: bytes, rows: int) -> None:
        if self.pending and (
            self.pending_rows + rows > self.t.pipeline_size
            or self.pending_bytes + len(chunk) > MAX_INLINE_BYTES
        ):
            self._stage()
        self.pending.append(chunk)
        self.pending_rows += rows
        self.pending_bytes += len(chunk)

    def _stage(self) -> None:
        """Send the pending chunks to the staging hash (numbered: a re-send is idempotent)."""
        first = self.staged + 1

        def send() -> list[Any]:
            pipe = self.r.pipeline(transaction=False)
            pipe.sadd(f"{self.t.prefix}:stages", self.stage_key)
            for n, chunk in enumerate(self.pending, start=first):
                pipe.hset(self.stage_key, str(n), chunk)
            pipe.pexpire(self.stage_key, STAGING_TTL_MS)
            return list(pipe.execute())

        patient(send)
        self.staged += len(self.pending)
        self.pending.clear()
        self.pending_rows = self.pending_bytes = 0
        crash_point("mid_write", self.epoch)

    def _commit(self, new_shards: Sequence[int]) -> None:
        if not new_shards:
            if self.staged:
                patient(lambda: self.r.delete(self.stage_key))
                patient(lambda: self.r.srem(f"{self.t.prefix}:stages", self.stage_key))
            return
        p = self.t.prefix
        config = {
            "mode": self.t.write,
            "ttl": self.t.ttl_ms or 0,
            "fields": list(self.t.fields),
            "idf": self.t.id_field,
            "ef": self.t.epoch_field,
            "query": self.t.query_name,
            "sink": self.t.sink_name,
        }
        script = self.r.register_script(LUA_APPLY)
        keys = [
            f"{p}:head",
            f"{p}:done:{self.epoch}",
            f"{p}:done-epochs",
            self.stage_key,
            f"{p}:dead-letters",
            f"{p}:streams",
            f"{p}:stages",
        ]
        args = [
            self.epoch,
            self.token,
            self.staged,
            json.dumps(config),
            json.dumps([str(s) for s in new_shards]),
            *self.pending,
        ]
        try:
            status, written, failed = patient(lambda: script(keys=keys, args=args))
        except redis.ResponseError as exc:
            raise _script_error(exc, "the sink") from None
        self.pending.clear()
        self.status = int(status)
        self.result.written += int(written)
        self.result.dead_letters += int(failed)
        if int(status) <= 0:  # another attempt wrote these shards, and their dead letters
            self.result.dead_letters -= self.letters
            self.result.skipped_shards = sorted(set(self.result.skipped_shards) | set(new_shards))

    def _close(self) -> None:
        if self.r is not None:
            self.r.close()
            self.r = None


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
