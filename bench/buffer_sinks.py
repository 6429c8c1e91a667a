"""The buffer benchmark's Redis and Elasticsearch sinks (PostgreSQL's is :func:`bench.buffer.run`).

For each sink, in the Spark session of :mod:`bench.buffer`, with its rows ``(id, value, note)``,
the same figures as PostgreSQL's, under the same keys:

``fast``
    the sink (``shards=2``, its defaults: the catalog on) writing ``batch_rows`` per batch.
``slow_unbuffered``
    the same sink behind a :class:`~bench.slow_proxy.LatencyProxy` that delays each reply
    of the server, calibrated so that a batch takes about ``SLOW_FACTOR`` (10) times the fast
    median: ``slow_vs_fast_p50`` says what it reached. Fewer batches (they are slow).
``slow_buffered``
    ``Buffered(slowed sink, KafkaBuffer(...))`` while a :class:`~exactlyonce.buffer.Drainer`
    thread drains into the slowed sink, in the same process. ``buffered_vs_fast_p99``
    (target <= 1.2).
``drain`` vs ``direct``
    ``drain_rows`` rows written by the sink in one batch into a fresh target, against a fresh
    Drainer moving the same rows, already in a buffer topic, into another fresh target, set up
    as ``exactlyonce drain`` runs it; best of ``drain_repeat``. ``drain_vs_direct`` (target
    >= 0.8). Every target must end with exactly the rows written.

Redis: a throwaway ``redis-server`` (:class:`bench.redis_sink.Server`), ``write="hash"``.
Elasticsearch: ``$ELASTICSEARCH_URL``, else the stand-in ``lab/es_stand_in/`` in its own
process (:func:`bench.elasticsearch.start_server`), ``op_type="create"``.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from bench.batch_timing import summary, timed_batches
from bench.common import BenchError, forget_catalog, progress, ratio
from bench.slow_proxy import LatencyProxy

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SLOW_FACTOR = 10.0
TARGET_BUFFERED_VS_FAST_P99 = 1.2
TARGET_DRAIN_VS_DIRECT = 0.8


@dataclass
class Kit:
    """How to make, count and clean up one sink kind's targets."""

    name: str
    make: Callable[[str, str], Any]  # (target name, server url) -> sink
    count: Callable[[Any], int]
    url: str  # the server, unslowed
    drop: Callable[[Any], None]
    made: list[Any] = field(default_factory=list)

    def sink(self, label: str, tag: str, proxy: LatencyProxy | None = None) -> Any:
        url = self.url
        if proxy is not None:
            parts = urlsplit(self.url)
            host = parts.hostname or "127.0.0.1"
            url = self.url.replace(f"{host}:{parts.port}", f"127.0.0.1:{proxy.port}", 1)
        made = self.make(f"bench-buf-{self.name}-{label}-{tag}", url)
        self.made.append(made)
        return made

    def cleanup(self) -> None:
        for sink in self.made:
            forget_catalog(sink)
            self.drop(sink)


def redis_kit(url: str) -> Kit:
    from exactlyonce.connectors.redis import RedisSink

    def make(name: str, server: str) -> Any:
        return RedisSink(server, f"{name}:{{id}}", ["id"], name, write="hash", shards=2)

    def count(sink: Any) -> int:
        r = _redis(url)
        return sum(1 for _ in r.scan_iter(match=f"{sink.query_name}:*", count=10_000))

    def drop(sink: Any) -> None:
        r = _redis(url)
        for pattern in (f"{sink.query_name}:*", f"{sink.prefix}*"):
            keys = list(r.scan_iter(match=pattern, count=10_000))
            for i in range(0, len(keys), 10_000):
                r.delete(*keys[i : i + 10_000])

    return Kit("redis", make, count, url, drop)


def _redis(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_timeout=120)


def es_kit(url: str) -> Kit:
    from elasticsearch import Elasticsearch

    from exactlyonce.connectors.elasticsearch import ElasticsearchSink

    def make(name: str, server: str) -> Any:
        return ElasticsearchSink(server, name, ["id"], name, shards=2, request_timeout=300)

    def count(sink: Any) -> int:
        with Elasticsearch(url, request_timeout=300) as es:
            es.indices.refresh(index=sink.index)
            return int(es.count(index=sink.index)["count"])

    def drop(sink: Any) -> None:
        with Elasticsearch(url, request_timeout=300) as es:
            for index in (sink.index, sink.dead_letter_index):
                es.options(ignore_status=404).indices.delete(index=index)

    return Kit("elasticsearch", make, count, url, drop)


# -- the figures ---------------------------------------------------------------------------


def calibrate(
    kit: Kit,
    proxy: LatencyProxy,
    rows: Callable[[int], DataFrame],
    batch_rows: int,
    fast_p50: float,
    tag: str,
) -> float:
    """The reply delay that makes a batch take about SLOW_FACTOR times ``fast_p50``: a batch
    with a first guess, the delay scaled to what it added; once more from there."""
    sink = kit.sink("calibrate", tag, proxy)
    proxy.delay_s = 0.0
    sink(rows(batch_rows), 0)  # the start: not what a batch costs
    wanted = (SLOW_FACTOR - 1) * fast_p50
    delay = max(0.005, fast_p50 / 10)
    for epoch in (1, 2):
        proxy.delay_s = delay
        began = time.perf_counter()
        sink(rows(batch_rows), epoch)
        added = time.perf_counter() - began - fast_p50
        scaled = delay * wanted / added if added > 0 else delay * 10
        progress(f"{kit.name}: {delay:.3f}s a reply added {added:.2f}s; next {scaled:.3f}s")
        delay = min(max(scaled, 0.001), 30.0)
    return delay


def measure(
    spark: SparkSession,
    generate: Callable[[SparkSession, int, int], DataFrame],
    kit: Kit,
    *,
    bootstrap: str,
    batch_rows: int,
    batches: int,
    slow_batches: int,
    drain_rows: int,
    drain_repeat: int,
    first_id: int,
) -> dict[str, Any]:
    """Every figure of one sink kind (the keys of :func:`bench.buffer.run`)."""
    from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer

    tag = uuid.uuid4().hex[:8]
    start = first_id

    def rows(n: int) -> DataFrame:
        nonlocal start
        df = generate(spark, n, start)
        start += n
        return df

    proxy = LatencyProxy(*_host_port(kit.url))
    try:
        progress(f"buffer {kit.name}: batches of {batch_rows:,} rows, {drain_rows:,} to drain")
        fast = timed_batches(kit.sink("fast", tag), [rows(batch_rows) for _ in range(batches)])
        fast_p50 = statistics.median(fast)
        progress(f"{kit.name} fast p50 {fast_p50:.3f}s")
        delay = calibrate(kit, proxy, rows, batch_rows, fast_p50, tag)
        proxy.delay_s = delay
        slow_sink = kit.sink("slow", tag, proxy)
        slow = timed_batches(slow_sink, [rows(batch_rows) for _ in range(slow_batches)])
        progress(f"{kit.name} slow unbuffered p50 {statistics.median(slow):.3f}s")

        target = kit.sink("slowbuf", tag, proxy)
        buffer = KafkaBuffer(topic=target.query_name, bootstrap_servers=bootstrap, partitions=2)
        buffered = Buffered(target, buffer)
        buffered.preflight(rows(1).schema)
        drainer = Drainer(target, buffer, batch_size=batch_rows, poll_interval_s=0.2)
        drainer.start()
        try:
            slow_buffered = timed_batches(buffered, [rows(batch_rows) for _ in range(batches)])
        finally:
            drainer.stop()
        if drainer.error is not None:
            raise BenchError(f"{kit.name} drainer failed: {drainer.error}")
        progress(
            f"{kit.name} slow buffered p50 {statistics.median(slow_buffered):.3f}s; the drainer "
            f"wrote {drainer.total.written:,} rows meanwhile, lag {drainer.lag}"
        )
        proxy.delay_s = 0.0
        direct_runs, drain_runs = throughput(kit, rows, bootstrap, drain_rows, drain_repeat, tag)
    finally:
        proxy.stop()
        kit.cleanup()
    slowed_by = f"a latency proxy delaying each reply {delay:.3f}s"
    return figures(
        fast, slow, slow_buffered, direct_runs, drain_runs, drain_rows, slowed_by, batch_rows
    )


def throughput(
    kit: Kit,
    rows: Callable[[int], DataFrame],
    bootstrap: str,
    drain_rows: int,
    repeat: int,
    tag: str,
) -> tuple[list[float], list[float]]:
    """Direct writes and drains of the same rows, interleaved, ``repeat`` times each."""
    from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer
    from exactlyonce.buffer.drain.drainer import DRAIN_PROCESS_SWITCH_INTERVAL_S

    direct_runs: list[float] = []
    drain_runs: list[float] = []
    for i in range(repeat):
        data = rows(drain_rows)
        sink = kit.sink(f"direct{i}", tag)
        sink(rows(100), 0)  # the start (index or keys, head, catalog) is not what we time
        began = time.perf_counter()
        sink(data, 1)
        direct_runs.append(time.perf_counter() - began)
        if kit.count(sink) != drain_rows + 100:
            raise BenchError(f"{kit.name} direct: wrong count")
        kit.drop(sink)  # a lean server for the next run (the stand-in slows as it fills)
        progress(f"{kit.name} run {i + 1}/{repeat}: direct {direct_runs[-1]:.2f}s")

        target = kit.sink(f"drain{i}", tag)
        buffer = KafkaBuffer(topic=target.query_name, bootstrap_servers=bootstrap, partitions=2)
        feed = Buffered(target, buffer)
        feed.preflight(data.schema)
        feed(data, 0)
        drainer = Drainer(
            target, buffer, batch_size=20_000, switch_interval_s=DRAIN_PROCESS_SWITCH_INTERVAL_S
        )
        try:
            began = time.perf_counter()
            report = drainer.drain_available(timeout_s=900)
            drain_runs.append(time.perf_counter() - began)
        finally:
            drainer.close()
        if report.written != drain_rows or kit.count(target) != drain_rows:
            raise BenchError(f"{kit.name} drain: wrote {report.written:,} of {drain_rows:,}")
        kit.drop(target)
        progress(f"{kit.name} run {i + 1}/{repeat}: drain {drain_runs[-1]:.2f}s")
    return direct_runs, drain_runs


def figures(
    fast: list[float],
    slow: list[float],
    slow_buffered: list[float],
    direct_runs: list[float],
    drain_runs: list[float],
    drain_rows: int,
    slowed_by: str,
    batch_rows: int,
) -> dict[str, Any]:
    """One sink's figures (every sink's, PostgreSQL's too: :mod:`bench.buffer` adds its
    drainer-pool keys): batch percentiles, best drain and direct rates, their ratios."""
    fast_s, slow_s, buf_s = summary(fast), summary(slow), summary(slow_buffered)
    direct_rate = drain_rows / min(direct_runs)
    drain_rate = drain_rows / min(drain_runs)
    return {
        "fast_batch_p50_s": fast_s["p50_s"],
        "fast_batch_p99_s": fast_s["p99_s"],
        "slow_unbuffered_batch_p50_s": slow_s["p50_s"],
        "slow_unbuffered_batch_p99_s": slow_s["p99_s"],
        "slow_buffered_batch_p50_s": buf_s["p50_s"],
        "slow_buffered_batch_p99_s": buf_s["p99_s"],
        "buffered_vs_fast_p99": ratio(buf_s["p99_s"], fast_s["p99_s"]),
        "buffered_vs_fast_p50": ratio(buf_s["p50_s"], fast_s["p50_s"]),
        "slow_vs_fast_p50": ratio(slow_s["p50_s"], fast_s["p50_s"]),
        "target_buffered_vs_fast_p99": TARGET_BUFFERED_VS_FAST_P99,
        "drain_rows_per_s": round(drain_rate),
        "direct_rows_per_s": round(direct_rate),
        "drain_vs_direct": ratio(drain_rate, direct_rate),
        "target_drain_vs_direct": TARGET_DRAIN_VS_DIRECT,
        "buffer": {
            "batch_rows": batch_rows,
            "slowed_by": slowed_by,
            "fast": fast_s,
            "slow_unbuffered": slow_s,
            "slow_buffered": buf_s,
            "drain_rows": drain_rows,
            "direct_runs_seconds": [round(s, 3) for s in direct_runs],
            "drain_runs_seconds": [round(s, 3) for s in drain_runs],
        },
    }


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.port is None:
        raise BenchError(f"{url}: name the port")
    return parts.hostname or "127.0.0.1", parts.port
