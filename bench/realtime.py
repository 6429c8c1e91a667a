"""``python -m bench realtime``: end-to-end latency of Spark Real-time Mode sinks, in one run.

Each path (:mod:`bench.realtime_job`) runs as its own Spark application (``local[4]``:
Real-time Mode needs a task slot per source partition) reading a fresh topic of 2 partitions.
Once it is up (warm-up events seen) and has run ``--warmup-s`` at the full rate (not measured:
the broker's and Spark's JIT, the first epoch end), a producer sends ``--rate`` events per
second for ``--seconds``, each stamped with its send time, then one more second of events,
not measured (:data:`TAIL_S`); an independent reader records when each event
first becomes visible in the sink: a confluent-kafka ``read_committed`` consumer for Kafka,
``LISTEN`` on a per-row ``pg_notify`` trigger for PostgreSQL (a notification is delivered at
commit: when the row becomes visible), ``XREAD`` for Redis. Latency is visible minus sent.

Paths: ``rtm_postgres``, ``rtm_kafka``, ``rtm_redis`` (our Real-time Mode writers, exactly
once, fed by the default ``arrow`` transport: ``mapInArrow``, each row sent on as it arrives),
``rtm_foreach_<sink>`` (the same writers fed by Spark's ``foreach``, whose rows wait in batches
that double while under 1 MiB), ``rtm_arrow_arrival`` and ``rtm_foreach_arrival`` (the floor of
any Python writer on each transport: when rows reach Python, noted and nothing else),
``spark_rtm_kafka`` (Spark's own Real-time Mode Kafka sink, at-least-once),
``microbatch_postgres`` and ``microbatch_kafka`` (our ``foreachBatch`` sinks with
``processingTime="0 seconds"``). Per path: ``p50_s``, ``p99_s``, ``max_s``, ``events_per_s``
(events delivered per second of the send window, against ``--rate`` sent), ``missing`` and
``max_s_by_second`` (the slowest event sent in each second: an epoch's end, every
``--real-time``, shows as one slow second). Every Real-time Mode path checkpoints every
``--real-time`` (Spark's default is 5 minutes; the send window should hold a few epoch ends).
Each path also reports ``cpu_s_per_million``: the CPU seconds (user + system) of the job's
process tree (Spark, its Python workers), the producer and the reader, and of the Kafka broker,
PostgreSQL and Redis, per million events sent, from the window's first event until its last
is visible.

Every path runs ``--repeats`` times, in rounds (each round runs every path once, in a rotated
order), so a slow minute of the shared machine falls on one run, not on one path. A path's
figures are those of its median run by p99; ``runs`` holds every run's.

The highest rate sustained: each of ``--sweep-paths`` runs one more job, sent each of
``--sweep-rates`` in turn for ``--sweep-seconds``; ``max_rate_sustained_per_s`` is the highest
stage with every event delivered, at >= 95% of the rate sent, with p99 <= 1 s (``sustained``
holds every stage's figures).

Targets (issue 33): ``rtm_postgres`` and ``rtm_kafka`` p99 <= 1 s at >= 2,000 events/s,
within 3x of ``spark_rtm_kafka``'s p99, and at least 5x below their micro-batch p99. Written
to ``bench/results/realtime.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.ceiling import CpuMeter, service_pids
from bench.common import (
    add_results_arguments,
    machine_with_load,
    now_utc,
    progress,
    ratio,
    save_results,
    versions,
)
from exactlyonce.connectors.base.realtime import COMMIT_INTERVAL_S
from exactlyonce.connectors.kafka.consume import arrived

PATHS = (
    "rtm_arrow_arrival",
    "rtm_foreach_arrival",
    "rtm_postgres",
    "rtm_kafka",
    "rtm_redis",
    "rtm_foreach_postgres",
    "rtm_foreach_kafka",
    "rtm_foreach_redis",
    "spark_rtm_kafka",
    "microbatch_postgres",
    "microbatch_kafka",
)
TARGET_P99_S = 1.0
TARGET_VS_SPARK = 3.0
TARGET_VS_MICROBATCH = 5.0
JOB = Path(__file__).with_name("realtime_job.py")
ROOT = JOB.parents[1]
WARMUP_EVENTS = 20
# Sent after each measured window, not measured: the window is a slice of steady traffic. On
# the Arrow transport Spark hands a row to Python only once the next row of its partition has
# come (docs/guides/real-time-mode.md, "Sparse traffic"), so without a tail each partition's
# last measured event would wait for the epoch's end (bench/results/realtime_sparse.json
# measures that on its own).
TAIL_S = 1.0


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


class Visible:
    """When each event first became visible: ``seen[event_id] = time.time()``."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> Visible:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        raise NotImplementedError

    def see(self, event_id: str) -> None:
        self.seen.setdefault(event_id, time.time())

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)


class ArrivalVisible(Visible):
    """The arrival notes of :class:`bench.realtime_job.ArrivalWriter`, read as they grow."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.read_to: dict[Path, int] = {}

    def _run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            time.sleep(0.05)
        self.poll()

    def poll(self) -> None:
        for path in self.directory.glob("*.txt"):
            with path.open() as notes:
                notes.seek(self.read_to.get(path, 0))
                text = notes.read()
            done = text.rfind("\n") + 1
            self.read_to[path] = self.read_to.get(path, 0) + len(text[:done].encode())
            for line in text[:done].splitlines():
                event_id, _, at = line.partition(" ")
                self.seen.setdefault(event_id, float(at))

    def epoch_gaps(self) -> list[float]:
        """Per source partition, the time between a task's last row in Python and the next
        task's first: what each epoch's end costs any Python writer (Spark's commit of the
        epoch, its next tasks, their Python runners), before a sink does anything."""
        spans: dict[int, list[tuple[float, float]]] = {}
        for path in self.directory.glob("*.txt"):
            pairs = [line.split(" ") for line in path.read_text().splitlines() if " " in line]
            if not pairs:
                continue
            times = [float(at) for _, at in pairs]
            partition = int(pairs[0][0].lstrip("swtue").rpartition("e")[2]) % 2
            spans.setdefault(partition, []).append((min(times), max(times)))
        gaps = []
        for tasks in spans.values():
            tasks.sort()
            gaps += [round(b[0] - a[1], 3) for a, b in zip(tasks, tasks[1:], strict=False)]
        return sorted(gaps)


class KafkaVisible(Visible):
    """A confluent-kafka ``read_committed`` consumer of the output topic."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__()
        self.bootstrap, self.topic = bootstrap, topic

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 5,
            }
        )
        try:
            while not self.stop.is_set():
                meta = consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
                if meta is not None and meta.partitions:
                    break
                time.sleep(0.2)
            else:
                return
            consumer.assign([TopicPartition(self.topic, p, 0) for p in meta.partitions])
            while not self.stop.is_set():
                for msg in arrived(consumer, 0.02, most=10_000):  # not a batch's wait
                    value = msg.value() if msg.error() is None else None
                    if value:
                        self.see(str(json.loads(value)["event_id"]))
        finally:
            consumer.close()


class PostgresVisible(Visible):
    """``LISTEN`` on a channel a per-row trigger notifies at commit."""

    def __init__(self, dsn: str, table: str, channel: str) -> None:
        super().__init__()
        self.dsn, self.table, self.channel = dsn, table, channel

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'LISTEN "{self.channel}"')
            while not self.stop.is_set():
                for note in conn.notifies(timeout=0.2):
                    self.see(note.payload)


class RedisVisible(Visible):
    """``XREAD BLOCK`` on the output stream."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__()
        self.url, self.key = url, key

    def _run(self) -> None:
        import redis

        r = redis.Redis.from_url(self.url)
        last: Any = "0-0"
        while not self.stop.is_set():
            answer: Any = r.xread({self.key: last}, count=10_000, block=50)
            for _, entries in answer or []:
                for entry_id, fields in entries:
                    last = entry_id
                    self.see(fields[b"event_id"].decode())


def notify_trigger(dsn: str, table: str, channel: str) -> None:
    """The output table (the sink's columns) with a trigger that notifies each row's event."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'CREATE TABLE "{table}" (topic text, partition integer, "offset" bigint, '
            "event_id text, ts double precision, record_id uuid NOT NULL, epoch bigint NOT NULL)"
        )
        conn.execute(
            f'CREATE FUNCTION "{table}_n"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
            f"PERFORM pg_notify('{channel}', NEW.event_id); RETURN NULL; END $$"
        )
        conn.execute(
            f'CREATE TRIGGER "{table}_t" AFTER INSERT ON "{table}" FOR EACH ROW '
            f'EXECUTE FUNCTION "{table}_n"()'
        )


def make_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def produce(bootstrap: str, topic: str, prefix: str, events: int, rate: float) -> dict[str, float]:
    """``events`` stamped events at ``rate`` per second; each one's send time."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    sent: dict[str, float] = {}
    start = time.monotonic()
    for i in range(events):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        event_id, now = f"{prefix}{i}", time.time()
        value = json.dumps({"event_id": event_id, "ts": now})
        producer.produce(topic, value.encode(), partition=i % 2)
        producer.poll(0)
        sent[event_id] = now
    producer.flush(30)
    return sent


def run_path(
    path: str, args: argparse.Namespace, env: dict[str, str], stages: Sequence[tuple[float, float]]
) -> list[dict[str, Any]]:
    """One job of ``path``; per stage ``(rate, seconds)``, in turn, its figures."""
    name = f"rt_{path}_{uuid.uuid4().hex[:6]}"
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
    make_topic(bootstrap, name)
    out = f"{name}_out"
    work = Path(args.work) / name
    work.mkdir(parents=True)
    watcher: Visible
    if path.endswith("_arrival"):
        out = str((work / "arrivals").resolve())
        watcher = ArrivalVisible(Path(out))
    elif path.endswith("postgres"):
        notify_trigger(env["EXACTLYONCE_PG_DSN"], out, out)
        watcher = PostgresVisible(env["EXACTLYONCE_PG_DSN"], out, out)
    elif path.endswith("redis"):
        watcher = RedisVisible(env["BENCH_SINK_REDIS_URL"], f"{out}:events")
    else:
        if path == "spark_rtm_kafka":
            make_topic(bootstrap, out)
        watcher = KafkaVisible(bootstrap, out)
    checkpoint = work / "checkpoint"
    log = (work / "job.log").open("wb")
    cmd = [sys.executable, str(JOB), "--path", path, "--topic", name, "--out", out,
           "--checkpoint", str(checkpoint), "--real-time", args.real_time]  # fmt: skip
    if args.commit_interval is not None:
        cmd += ["--commit-interval", str(args.commit_interval)]
    job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                           start_new_session=True)  # fmt: skip
    watcher.start()
    try:
        warm = produce(bootstrap, name, "w", WARMUP_EVENTS, 50)
        deadline = time.monotonic() + 180
        while not all(e in watcher.seen for e in warm):
            if job.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{path}: not up; see {work / 'job.log'}")
            time.sleep(0.2)
        if args.warmup_s > 0 and stages:
            rate = stages[0][0]
            progress(f"{path}: up; {rate:g} events/s for {args.warmup_s:g} s, not measured")
            produce(bootstrap, name, "u", int(rate * args.warmup_s), rate)
        meter = CpuMeter(service_pids("kafka", "postgres", "redis"))
        results = []
        for n, (rate, seconds) in enumerate(stages):
            progress(f"{path}: {rate:g} events/s for {seconds:g} s")
            with meter.measure() as cpu:
                sent = produce(bootstrap, name, f"s{n}e", int(rate * seconds), rate)
                tail = produce(bootstrap, name, f"t{n}e", int(rate * TAIL_S), rate)
                wait_until = time.monotonic() + args.drain_s
                while time.monotonic() < wait_until and not all(e in watcher.seen for e in sent):
                    time.sleep(0.2)
            results.append(
                {
                    **figures(path, sent, dict(watcher.seen), rate),
                    **cpu_figures(cpu, len(sent) + len(tail)),
                }
            )
        if isinstance(watcher, ArrivalVisible) and results:
            results[-1]["epoch_gaps_s"] = watcher.epoch_gaps()
    finally:
        Path(f"{checkpoint}.stop").touch()
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
        watcher.close()
        log.close()
    return results


def figures(
    path: str, sent: dict[str, float], seen: dict[str, float], rate: float
) -> dict[str, Any]:
    latencies = [seen[e] - t for e, t in sent.items() if e in seen]
    if not latencies:
        raise SystemExit(f"{path}: no event became visible")
    first, last = min(sent.values()), max(seen[e] for e in sent if e in seen)
    out = {
        "p50_s": round(percentile(latencies, 0.5), 4),
        "p99_s": round(percentile(latencies, 0.99), 4),
        "max_s": round(max(latencies), 4),
        "events_per_s": round(len(latencies) / max(1e-9, last - first), 1),
        "sent_per_s": rate,
        "events": len(sent),
        "missing": len(sent) - len(latencies),
        "max_s_by_second": max_by_second(sent, seen),
    }
    # the typical second's slowest event: a commit interval plus a commit, away from the
    # few epoch-end seconds (what p99 adds on top of it comes from those)
    by_second = sorted(out["max_s_by_second"])
    out["steady_max_s"] = by_second[len(by_second) // 2] if by_second else None
    progress(f"{path}: p50 {out['p50_s']} s, p99 {out['p99_s']} s, max {out['max_s']} s")
    return out


def cpu_figures(cpu: dict[str, float], events: int) -> dict[str, Any]:
    """The window's CPU seconds per process tree, and per million events sent."""
    if not cpu or not events:
        return {}
    per_million = {k: round(v * 1e6 / events, 2) for k, v in cpu.items() if k != "wall"}
    return {"cpu": cpu, "cpu_s_per_million": per_million}


def median_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A path's figures over its repeats: those of its median run by p99 (one run's, so
    p50, p99 and max agree; of an even number, the slower middle one), with every run's
    headline figures under ``runs``."""
    ordered = sorted(runs, key=lambda r: r["p99_s"])
    median = ordered[len(ordered) // 2]
    keys = ("p50_s", "p99_s", "max_s", "steady_max_s", "events_per_s", "missing",
            "cpu_s_per_million")  # fmt: skip
    return {**median, "runs": [{k: r.get(k) for k in keys} for r in runs]}


def rounds(paths: Sequence[str], repeats: int) -> list[str]:
    """Every path once per round, each round's order rotated by one."""
    return [paths[(i + r) % len(paths)] for r in range(repeats) for i in range(len(paths))]


def max_by_second(sent: dict[str, float], seen: dict[str, float]) -> list[float]:
    """The slowest event of each second of sending: where the tail comes from (an epoch's
    end shows as one slow second every ``real_time``)."""
    start = min(sent.values())
    worst: dict[int, float] = {}
    for event, at in sent.items():
        if event in seen:
            second = int(at - start)
            worst[second] = max(worst.get(second, 0.0), seen[event] - at)
    return [round(worst.get(s, 0.0), 3) for s in range(max(worst) + 1)] if worst else []


def sustained(stages: list[dict[str, Any]]) -> dict[str, Any]:
    """The highest rate a path kept up with: every event delivered, at >= 95% of the rate
    sent, with p99 within the latency target (``TARGET_P99_S``)."""
    kept = [
        s["sent_per_s"]
        for s in stages
        if s["missing"] == 0
        and s["events_per_s"] >= 0.95 * s["sent_per_s"]
        and s["p99_s"] <= TARGET_P99_S
    ]
    return {
        "max_rate_sustained_per_s": max(kept, default=0.0),
        "stages": [{k: v for k, v in s.items() if k != "max_s_by_second"} for s in stages],
    }


def text_table(paths: dict[str, dict[str, Any]]) -> list[str]:
    """The paths side by side, as the docs' benchmarks page shows them."""
    lines = [
        f"{'path':<22}{'p50 s':>9}{'p99 s':>9}{'max s':>9}{'events/s':>10}{'missing':>9}"
        f"{'max rate/s':>12}"
    ]
    for path, f in paths.items():
        top = f.get("max_rate_sustained_per_s")
        lines.append(
            f"{path:<22}{f['p50_s']:>9.3f}{f['p99_s']:>9.3f}{f['max_s']:>9.3f}"
            f"{f['events_per_s']:>10.0f}{f['missing']:>9}{'' if top is None else f'{top:.0f}':>12}"
        )
    return lines


def judged(paths: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets, each as ratio and met/not met; and what each sink adds over the
    floor of its transport (``rtm_<transport>_arrival``)."""
    spark = paths.get("spark_rtm_kafka", {}).get("p99_s")
    result: dict[str, Any] = {}
    for transport, prefix in (("arrow", "rtm_"), ("foreach", "rtm_foreach_")):
        floor = paths.get(f"rtm_{transport}_arrival", {}).get("p99_s")
        if floor and spark:
            result[f"{transport}_arrival_vs_spark_rtm_p99"] = ratio(floor, spark)
        for sink in ("postgres", "kafka", "redis"):
            ours = paths.get(f"{prefix}{sink}", {}).get("p99_s")
            if ours is not None and floor:
                result[f"{prefix}{sink}_vs_{transport}_arrival_p99"] = ratio(ours, floor)
    for sink in ("postgres", "kafka"):
        ours = paths.get(f"rtm_{sink}", {}).get("p99_s")
        micro = paths.get(f"microbatch_{sink}", {}).get("p99_s")
        if ours is None:
            continue
        result[f"rtm_{sink}_p99_le_1s"] = ours <= TARGET_P99_S
        if spark:
            result[f"rtm_{sink}_vs_spark_rtm_p99"] = ratio(ours, spark)
            result[f"rtm_{sink}_within_3x_of_spark_rtm"] = ours <= 3 * spark
        if micro:
            result[f"microbatch_vs_rtm_{sink}_p99"] = ratio(micro, ours)
            result[f"rtm_{sink}_5x_below_microbatch"] = micro >= 5 * ours
    return result


def services_env() -> dict[str, str]:
    from exactlyonce.integration.envfile import service_env

    env = {**os.environ, **service_env()}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench realtime", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--paths", default=",".join(PATHS), help=f"of {','.join(PATHS)}")
    p.add_argument("--rate", type=float, default=2_000.0, help="events per second sent")
    p.add_argument("--seconds", type=float, default=60.0, help="how long to send")
    p.add_argument(
        "--warmup-s", type=float, default=10.0, help="sent at --rate first, not measured"
    )
    p.add_argument(
        "--repeats", type=int, default=3, help="runs per path, in rounds; the median is kept"
    )
    p.add_argument("--real-time", default="20 seconds", help="Real-time Mode's epoch length")
    p.add_argument(
        "--commit-interval",
        type=float,
        default=None,
        help="our Real-time Mode writers' commit_interval (default: the sinks')",
    )
    p.add_argument("--drain-s", type=float, default=30.0, help="wait for the last events")
    p.add_argument("--work", default=".exactlyonce/bench-realtime", help="jobs' checkpoints, logs")
    p.add_argument("--sink-redis-url", default=None, help="the Redis stream's server (rtm_redis)")
    p.add_argument(
        "--sweep-paths",
        default="rtm_postgres,rtm_kafka,rtm_redis,spark_rtm_kafka",
        help="paths whose highest sustained rate is measured (none: '')",
    )
    p.add_argument(
        "--sweep-rates",
        default="2000,5000,10000,20000",
        help="rates sent in turn, one stage each, to find the highest sustained",
    )
    p.add_argument("--sweep-seconds", type=float, default=20.0, help="each sweep stage's length")
    add_results_arguments(p, "realtime")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    env = services_env()
    env["BENCH_SINK_REDIS_URL"] = args.sink_redis_url or env["EXACTLYONCE_REDIS_URL"]
    load_start = os.getloadavg()[0]
    names = [p.strip() for p in args.paths.split(",") if p.strip()]
    runs: dict[str, list[dict[str, Any]]] = {path: [] for path in names}
    for path in rounds(names, max(1, args.repeats)):
        runs[path] += run_path(path, args, env, [(args.rate, args.seconds)])
    paths = {path: median_run(runs[path]) for path in names}
    rates = [float(r) for r in args.sweep_rates.split(",") if r.strip()]
    sweeps = {
        path: sustained(run_path(path, args, env, [(r, args.sweep_seconds) for r in rates]))
        for path in [p.strip() for p in args.sweep_paths.split(",") if p.strip()]
    }
    for path, sweep in sweeps.items():
        if path in paths:
            paths[path]["max_rate_sustained_per_s"] = sweep["max_rate_sustained_per_s"]
    result = {
        "benchmark": "realtime",
        "date": now_utc(),
        "parameters": {"rate": args.rate, "seconds": args.seconds, "warmup_s": args.warmup_s,
                       "repeats": args.repeats, "master": "local[4]",
                       "partitions": 2, "real_time": args.real_time,
                       "foreach spark.buffer.size": 1, "sweep_rates": rates,
                       "commit_interval": args.commit_interval or COMMIT_INTERVAL_S,
                       "sweep_seconds": args.sweep_seconds},
        "measure": "visible minus sent, per event: a producer stamps each event; independent "
        "readers (a read_committed consumer, LISTEN on a per-row pg_notify trigger, XREAD) "
        "record when it first became visible",
        "table": text_table(paths),
        "notes": [
            "rtm_<transport>_arrival is when rows reach Python on that transport, noted and "
            "nothing else: no Python writer on it can show a row sooner. foreach: Spark "
            "pickles rows in batches that double while under 1 MiB (SerDeUtil."
            "AutoBatchedPickler), so at 1,000 rows/s per partition a row waits up to ~2 s. "
            "arrow (our default): mapInArrow with one row per Arrow batch, sent at once "
            "(exactlyonce.integration.spark.ARROW_TRANSPORT_CONF). <path>_vs_<transport>_"
            "arrival_p99 is what each sink adds on top.",
            "max_s_by_second shows where the tail comes from: the slow seconds are epoch ends "
            "(every real_time), where Spark commits the epoch and starts new tasks, for its own "
            "sink too. steady_max_s is its median: the slowest event of a typical second (a "
            "commit interval plus a commit for ours). epoch_gaps_s (rtm_arrow_arrival): per "
            "source partition, the time from one task's last row in Python to the next task's "
            "first, which every Python writer waits at each epoch's end.",
            "Each path ran `repeats` times in rounds (every path once per round, in a rotated "
            "order); its figures are its median run's by p99, `runs` has every run's. Each run "
            "first sent warmup_s at the rate, not measured. cpu_s_per_million: user + system "
            "CPU of the job (Spark, Python workers), the producer and reader, the Kafka broker, "
            "PostgreSQL and Redis from the window's first event until its last was visible, per "
            "million events sent (with the tail).",
            "sustained: one job per path sent each of sweep_rates in turn for sweep_seconds; "
            "max_rate_sustained_per_s is the highest stage with every event delivered, at >= "
            "95% of the rate sent, p99 <= 1 s.",
        ],
        "paths": paths,
        "sustained": sweeps,
        "targets": judged(paths),
        "machine": machine_with_load(load_start),
        "versions": versions("pyspark", "confluent_kafka", "psycopg", "redis"),
    }  # fmt: skip
    print("\n".join(result["table"]))
    print(json.dumps(result["targets"], indent=2))
    save_results(args, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
