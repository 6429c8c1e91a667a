"""The search sinks' benchmark: our exactly-once sink against a plain ``streaming_bulk``, same docs.

Shared by ``python -m bench elasticsearch`` (:mod:`bench.elasticsearch`) and ``python -m bench
opensearch`` (:mod:`bench.opensearch`): the same paths, documents and checks; each of the two
gives only its :class:`Engine` (the client library, the sink class) and its :class:`Server`
(where it writes). ``--rows N`` generated rows are written two ways, in one Spark session
(``local[2]``), into one server process; each run writes a new index, which is counted and
deleted afterwards.

``eos``
    The sink, ``Sink(url, index, id_columns=["id"], query_name=..., shards=2)`` with its
    other defaults: ``op_type="create"``, the ID catalog on (in the catalog's Redis from
    ``$EXACTLYONCE_REDIS_URL`` or the services file, as users run it), bulk requests cut at
    1,000 actions / 10 MiB. Called as a ``foreachBatch`` callable, ``sink(df, 0)``, on a cached
    DataFrame: head read and creation, record IDs, the shuffle into shards, dedup, the shard
    commits read (realtime ``mget``) and written, every item's status checked, the head
    advanced. The index and its preflight (index creation) are made before the clock starts.
``plain``
    ``df.mapInArrow(fn, "n long")`` over the same 2 partitions: each task opens one client of
    the same library and sends its rows through its ``helpers.streaming_bulk`` (``chunk_size``
    1,000, ``max_chunk_bytes`` 10 MiB, the sink's defaults) as ``create`` actions.
    At-least-once: no record IDs, no shuffle, no dedup, no commit documents, no head. To make
    the server do the same work, a plain document is the one the sink stores: ``_id`` is the
    row's ``id`` (32 hex chars, like the sink's record ID), ``_source`` is the row plus the
    sink's ``epoch`` field (0, the epoch of ``sink(df, 0)``), in an index created with the
    sink's mapping.
``server_raw`` (context; not against a server given by URL)
    The server's own ceiling: the same documents pre-serialised on the driver into
    ``_bulk`` bodies of 1,000 ``create`` actions, POSTed over 2 keep-alive connections
    (2 threads), no Spark, no client library. When this is not much faster than ``plain``,
    the server is the bottleneck and the eos/plain ratio compares two paths that wait on it.

The rows ``(id string(32), value bigint, note string)`` come from ``spark.range(N)`` through
md5/sha1 (as in the Redis and Kafka benchmarks), 2 partitions, cached and counted before any
timing. Each path is warmed up on a small run, then timed ``--repeat`` times (3), the paths
interleaved (plain, eos, raw, plain, eos, raw ...); the best run counts (the machine is
shared). After each run the index must hold exactly N documents (``_refresh`` + ``_count``),
and the sink must report N written, or the benchmark fails. Each round starts with the
ceilings (:mod:`bench.ceiling`: the same rows into Spark's ``noop`` sink and through a counting
``mapInArrow``), and each run records the CPU seconds (user + system, from ``/proc``) of the
Spark tree, the catalog's Redis and, for a server process started here, the server's tree
(also as ``server_cpu_seconds`` in the run's details).

Writes ``bench/results/<engine>.json`` with ``eos_docs_per_s``, ``plain_docs_per_s``, ``ratio``
(eos / plain), ``server``, ``server_version``, ``rows``, each path as a fraction of the
ceilings (``of_python_ceiling``, ``of_noop_ceiling``), ``cpu_s_per_million`` and the details.
"""

from __future__ import annotations

import argparse
import http.client
import importlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from bench import common
from bench.ceiling import Ceilings, CpuMeter, service_pids, timed_cpu
from bench.common import BenchError, PathTiming, progress

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

TARGET = 0.8
CHUNK_SIZE = 1000  # the sink's bulk_max_actions default
CHUNK_BYTES = 10 * 1024 * 1024  # the sink's bulk_max_bytes default
EPOCH_FIELD = "epoch"
RAW_PLACEHOLDER = "bench-raw-placeholder"


# -- the engine and the server -------------------------------------------------------------


class Engine:
    """What differs between the two engines' benchmarks: the client library and the sink.

    Subclasses are module-level singletons: the plain path's writer carries one to Spark's
    workers by pickle (they import its module)."""

    name = ""  # the benchmark's name and results file
    title = ""  # for people
    prefix = ""  # of the indices and query names the runs make
    modules: tuple[str, ...] = ()  # whose versions the results record
    logger = ""  # the client's transport logger, quietened
    helpers = ""  # the client library's helpers module (its own streaming_bulk)
    sink_class = ("", "")  # the sink: module, class
    url_variable = ""  # the environment variable that names a server to use

    def client(self, url: str) -> Any:
        raise NotImplementedError

    def create_index(self, client: Any, name: str, mappings: dict[str, Any]) -> None:
        raise NotImplementedError

    def delete_index(self, client: Any, name: str) -> None:
        """Delete the index; one that is not there is no error."""
        raise NotImplementedError

    def delete_doc(self, client: Any, index: str, doc_id: str) -> None:
        """Delete the document; one that is not there is no error."""
        raise NotImplementedError

    def streaming_bulk(self, client: Any, actions: Iterator[dict[str, Any]]) -> Iterator[Any]:
        """The library's own ``helpers.streaming_bulk`` at the sink's chunk sizes, items'
        errors reported (not raised)."""
        return importlib.import_module(self.helpers).streaming_bulk(
            client,
            actions,
            chunk_size=CHUNK_SIZE,
            max_chunk_bytes=CHUNK_BYTES,
            raise_on_error=False,
        )

    def sink(self, url: str, index: str, query: str, shards: int) -> Any:
        """The sink with its defaults but for the benchmark's shards, chunks and timeout."""
        module, name = self.sink_class
        return getattr(importlib.import_module(module), name)(
            url,
            index,
            ["id"],
            query_name=query,
            shards=shards,
            bulk_max_actions=CHUNK_SIZE,
            bulk_max_bytes=CHUNK_BYTES,
            request_timeout=300,
        )


class Server:
    """Where every path writes: a URL, and the process behind it when it was started here."""

    def __init__(
        self,
        engine: Engine,
        url: str,
        kind: str,
        describe: Callable[[Server], str],
        *,
        pid: int | None = None,
        stop: Callable[[], None] | None = None,
        raw: bool = True,
    ) -> None:
        self.engine = engine
        self.url = url.rstrip("/")
        self.kind = kind
        self.pid = pid
        self.raw = raw  # whether the server_raw path runs against it by default
        self._describe = describe
        self._stop = stop
        deadline = time.monotonic() + 30
        while True:
            try:
                client = engine.client(self.url)
                try:
                    self.info = dict(client.info())
                finally:
                    client.close()
                break
            except Exception as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise BenchError(
                        f"{engine.title} at {self.url} does not answer: {exc}"
                    ) from None
                time.sleep(0.1)

    @property
    def version(self) -> str | None:
        number = (self.info.get("version") or {}).get("number")
        return None if number is None else str(number)

    def describe(self) -> str:
        return self._describe(self)

    def run(self, fn: Callable[[Any], Any]) -> Any:
        client = self.engine.client(self.url)
        try:
            return fn(client)
        finally:
            client.close()

    def create_index(self, name: str) -> None:
        """An index with the mapping the sink gives its target (``epoch`` long, rest dynamic)."""
        mappings = {"properties": {EPOCH_FIELD: {"type": "long"}}}
        self.run(lambda c: self.engine.create_index(c, name, mappings))

    def count(self, index: str) -> int:
        def count(client: Any) -> int:
            client.indices.refresh(index=index)
            return int(client.count(index=index)["count"])

        return int(self.run(count))

    def drop(self, *indices: str) -> None:
        def drop(client: Any) -> None:
            for name in indices:
                self.engine.delete_index(client, name)

        self.run(drop)

    def stop(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            stop()


def given_server(engine: Engine, kind: str, label: str) -> Server | None:
    """The server at ``$<engine.url_variable>``, when it is set (no server_raw path)."""
    url = os.environ.get(engine.url_variable)
    if not url:
        return None
    return Server(
        engine,
        url,
        kind,
        lambda s: f"{label} {engine.title} {s.version} at ${engine.url_variable}",
        raw=False,
    )


# -- the write paths -----------------------------------------------------------------------


@dataclass(frozen=True)
class PlainWriter:
    """``mapInArrow`` function: one client per task, ``helpers.streaming_bulk``, no protocol."""

    engine: Engine
    url: str
    index: str

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        def actions() -> Iterator[dict[str, Any]]:
            for batch in batches:
                for doc in batch.to_pylist():
                    doc[EPOCH_FIELD] = 0
                    yield {"_op_type": "create", "_index": self.index, "_id": doc["id"], **doc}

        client = self.engine.client(self.url)
        ok = failed = 0
        for success, _item in self.engine.streaming_bulk(client, actions()):
            if success:
                ok += 1
            else:
                failed += 1
        client.close()
        if failed:
            raise RuntimeError(f"plain streaming_bulk: {failed} items failed")
        yield pa.RecordBatch.from_pydict({"n": pa.array([ok], pa.int64())})


def run_plain(
    df: DataFrame, server: Server, index: str, meter: CpuMeter
) -> tuple[float, dict[str, Any]]:
    server.create_index(index)
    fn = PlainWriter(server.engine, server.url, index)
    seconds, sent, cpu = timed_cpu(
        meter, lambda: sum(int(r["n"]) for r in df.mapInArrow(fn, "n long").collect())
    )
    return seconds, {"acknowledged": sent, "cpu": cpu}


def run_eos(
    df: DataFrame, server: Server, index: str, query: str, shards: int, meter: CpuMeter
) -> tuple[float, dict[str, Any]]:
    sink = server.engine.sink(server.url, index, query, shards)
    sink.preflight(df.schema)  # index creation here, before the clock
    try:
        seconds, _, cpu = timed_cpu(meter, lambda: sink(df, 0))
        detail = {**common.sink_report_detail(sink), "cpu": cpu}
    finally:
        forget(sink, server)
    return seconds, detail


def forget(sink: Any, server: Server) -> None:
    """Drop what the run left besides its index: the catalog's keys, the head, dead letters."""
    head = f"{sink.query_name}|{sink.sink_name}"
    server.run(lambda c: server.engine.delete_doc(c, sink.control_index, head))
    server.drop(sink.dead_letter_index)
    common.forget_catalog(sink)


def raw_bodies(df: DataFrame, index: str, connections: int) -> list[list[bytes]]:
    """The plain path's documents as ``_bulk`` bodies of CHUNK_SIZE creates, one list per
    connection (built once, on the driver; the server's index name is patched in per run)."""
    rows = df.toArrow().to_pylist()
    bodies: list[bytes] = []
    for i in range(0, len(rows), CHUNK_SIZE):
        lines = []
        for doc in rows[i : i + CHUNK_SIZE]:
            doc[EPOCH_FIELD] = 0
            lines.append(json.dumps({"create": {"_index": index, "_id": doc["id"]}}))
            lines.append(json.dumps(doc, separators=(",", ":")))
        bodies.append(("\n".join(lines) + "\n").encode())
    return [bodies[k::connections] for k in range(connections)]


def run_raw(
    server: Server, index: str, bodies: list[list[bytes]], meter: CpuMeter
) -> tuple[float, dict[str, Any]]:
    """POST pre-built bodies over one keep-alive connection per thread; check every item."""
    server.create_index(index)
    where = urlsplit(server.url)
    errors: list[str] = []
    placeholder = b'"_index": "' + RAW_PLACEHOLDER.encode() + b'"'
    actual = b'"_index": "' + index.encode() + b'"'
    ready = [[body.replace(placeholder, actual) for body in mine] for mine in bodies]

    def send(mine: list[bytes]) -> None:
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
        try:
            for body in mine:
                conn.request("POST", "/_bulk", body, {"Content-Type": "application/x-ndjson"})
                reply = conn.getresponse()
                answer = json.loads(reply.read())
                if reply.status != 200 or answer.get("errors"):
                    errors.append(f"HTTP {reply.status}, errors={answer.get('errors')}")
                    return
        except Exception as exc:  # reported below; the count check fails too
            errors.append(repr(exc))
        finally:
            conn.close()

    threads = [threading.Thread(target=send, args=(mine,)) for mine in ready]

    def go() -> None:
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    seconds, _, cpu = timed_cpu(meter, go)
    if errors:
        raise BenchError(f"server_raw: {errors[0]}")
    return seconds, {"connections": len(bodies), "cpu": cpu}


# -- running -------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, engine: Engine) -> None:
    common.add_size_arguments(parser, rows=200_000, unit="documents", repeat=3)
    parser.add_argument("--no-raw", action="store_true", help="skip the server_raw context path")
    common.add_results_arguments(parser, engine.name)
    common.add_fail_on_target_argument(parser, TARGET)


def run(args: argparse.Namespace, start_server: Callable[[], Server]) -> dict[str, Any]:
    """The benchmark against the server ``start_server`` gives (stopped at the end)."""
    common.prepare_sink_run(args)
    from exactlyonce.integration.spark import session

    server = start_server()
    engine = server.engine
    logging.getLogger(engine.logger).setLevel(logging.WARNING)
    load_start = common.load_average()
    progress(f"writing to {server.describe()} at {server.url}")
    try:
        spark = session(
            f"exactlyonce-bench-{engine.name}", extra={"spark.ui.showConsoleProgress": "false"}
        )
    except BaseException:
        server.stop()
        raise
    try:
        small = common.generate_rows(spark, args.warmup_rows)
        df = common.generate_rows(spark, args.rows)
        progress(f"{args.rows:,} rows generated and cached")
        with_raw = server.raw and not args.no_raw
        paths = ["plain", "eos"] + (["server_raw"] if with_raw else [])
        bodies: dict[int, list[list[bytes]]] = {}
        if with_raw:
            for data, n in ((small, args.warmup_rows), (df, args.rows)):
                bodies[n] = raw_bodies(data, RAW_PLACEHOLDER, common.PARTITIONS)
        timings = {p: PathTiming(p, args.rows) for p in paths}
        meter = CpuMeter({engine.name: server.pid, **service_pids("redis")})
        ceilings = Ceilings(args.rows, meter)
        run_id = uuid.uuid4().hex[:8]
        for label, data, timed_run in common.warm_then_timed(small, df, args.repeat):
            expected = args.rows if timed_run else args.warmup_rows
            ceilings.round(data, expected, timed_run)
            for path in paths:
                tag = f"{run_id}-{label}-{path.replace('_', '-')}"
                index = f"{engine.prefix}{tag}"
                try:
                    if path == "eos":
                        seconds, detail = run_eos(
                            data, server, index, f"{engine.prefix}{tag}", args.shards, meter
                        )
                        if detail.get("written") != expected:
                            raise BenchError(f"eos ({label}) reported {detail}, not {expected}")
                    elif path == "plain":
                        seconds, detail = run_plain(data, server, index, meter)
                    else:
                        seconds, detail = run_raw(server, index, bodies[expected], meter)
                    if engine.name in detail["cpu"]:
                        detail["server_cpu_seconds"] = detail["cpu"][engine.name]
                    found = server.count(index)
                finally:
                    server.drop(index)
                if found != expected:
                    raise BenchError(
                        f"{path} ({label}) left {found} documents, expected {expected}"
                    )
                if timed_run:
                    timings[path].record(seconds, detail)
                cpu = detail.get("server_cpu_seconds")
                progress(
                    f"{path} {label}: {expected:,} docs in {seconds:.2f}s"
                    + (f" (server CPU {cpu:.2f}s)" if cpu is not None else "")
                )
        eos, plain = timings["eos"], timings["plain"]
        table = common.print_table(
            list(timings.values()),
            "eos",
            title=f"{engine.title} ({server.kind} server), {args.rows:,} documents",
        )
        r = common.ratio(eos.rows_per_s, plain.rows_per_s)
        print(f"eos/plain = {r:.3f} (target >= {TARGET})")
        figures = ceilings.figures(timings)
        print(f"of the Python ceiling: {figures['of_python_ceiling']}")
        result: dict[str, Any] = {
            "benchmark": engine.name,
            "date": common.now_utc(),
            "server": server.kind,
            "server_detail": server.describe(),
            "server_version": server.version,
            "rows": args.rows,
            "repeat": args.repeat,
            "eos_docs_per_s": round(eos.rows_per_s),
            "plain_docs_per_s": round(plain.rows_per_s),
            "ratio": r,
            "target": {"ratio": TARGET, "met": r >= TARGET},
            **figures,
            "paths": {name: t.as_dict() for name, t in timings.items()},
            "table": table.splitlines(),
            "setup": {
                **common.spark_setup(spark, args.shards),
                "bulk_chunk_actions": CHUNK_SIZE,
                "bulk_chunk_bytes": CHUNK_BYTES,
                "op_type": "create (both paths)",
                "documents": "_id = 32 hex chars; _source = id, value, note, epoch (both paths)",
                "catalog": "the services' Redis (separate server), the sink's default dedup",
                "rows_schema": common.ROWS_SCHEMA,
            },
            "machine": common.machine_with_load(load_start),
            "versions": common.versions("pyspark", "pyarrow", *engine.modules),
        }
        if with_raw:
            raw = timings["server_raw"]
            result["server_raw_docs_per_s"] = round(raw.rows_per_s)
            result["plain_vs_server_raw"] = common.ratio(plain.rows_per_s, raw.rows_per_s)
        common.save_results(args, result)
        return result
    finally:
        spark.stop()
        server.stop()


def main(
    argv: Sequence[str] | argparse.Namespace | None,
    engine: Engine,
    start_server: Callable[[], Server],
    doc: str | None,
) -> int:
    """``python -m bench.<engine>``: parse ``argv`` (unless given parsed), run, exit code."""
    if isinstance(argv, argparse.Namespace):
        args = argv
    else:
        parser = argparse.ArgumentParser(
            prog=f"python -m bench.{engine.name}", description=(doc or "").split("\n\n")[0]
        )
        add_arguments(parser, engine)
        args = parser.parse_args(argv)
    return common.exit_code(
        lambda a: run(a, start_server),
        args,
        failure_prefix=f"bench {engine.name}",
        fail_on_miss=args.fail_on_target,
    )
