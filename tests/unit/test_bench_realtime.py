"""bench.realtime's arithmetic: latencies from send and visible times, and the targets."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import ClassVar

import pytest

from bench.realtime import (
    ArrivalVisible,
    KafkaVisible,
    cpu_figures,
    figures,
    judged,
    max_by_second,
    median_run,
    percentile,
    rounds,
    sustained,
    text_table,
)


def test_figures_count_missing_events_and_rate_over_the_send_window() -> None:
    sent = {f"e{i}": 100.0 + i * 0.01 for i in range(100)}  # 100 events/s for 1 s
    seen = {e: t + 0.2 for e, t in sent.items() if e != "e5"}
    out = figures("rtm_kafka", sent, seen, 100.0)
    assert out["missing"] == 1 and out["events"] == 100
    assert abs(out["p50_s"] - 0.2) < 1e-6 and abs(out["max_s"] - 0.2) < 1e-6
    assert out["steady_max_s"] == 0.2  # the median second's slowest event
    assert 80 < out["events_per_s"] <= 100


def test_percentile_takes_the_value_at_or_above_the_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 0.5) == 51.0 and percentile(values, 0.99) == 100.0


def test_targets_are_ratios_of_p99s() -> None:
    paths = {
        "rtm_kafka": {"p99_s": 0.5},
        "spark_rtm_kafka": {"p99_s": 0.25},
        "microbatch_kafka": {"p99_s": 5.0},
    }
    assert judged(paths) == {
        "rtm_kafka_p99_le_1s": True,
        "rtm_kafka_vs_spark_rtm_p99": 2.0,
        "rtm_kafka_within_3x_of_spark_rtm": True,
        "microbatch_vs_rtm_kafka_p99": 10.0,
        "rtm_kafka_5x_below_microbatch": True,
    }


def test_each_sink_is_set_against_the_floor_of_its_transport() -> None:
    paths = {
        "rtm_arrow_arrival": {"p99_s": 0.4},
        "rtm_foreach_arrival": {"p99_s": 2.0},
        "rtm_redis": {"p99_s": 0.5},
        "rtm_foreach_redis": {"p99_s": 3.0},
        "spark_rtm_kafka": {"p99_s": 0.2},
    }
    assert judged(paths) == {
        "arrow_arrival_vs_spark_rtm_p99": 2.0,
        "rtm_redis_vs_arrow_arrival_p99": 1.25,
        "foreach_arrival_vs_spark_rtm_p99": 10.0,
        "rtm_foreach_redis_vs_foreach_arrival_p99": 1.5,
    }


def test_the_slowest_event_of_each_second_shows_where_the_tail_is() -> None:
    sent = {f"e{i}": 100.0 + i * 0.5 for i in range(6)}  # seconds 0, 0, 1, 1, 2, 2
    seen = {e: t + (1.5 if e == "e3" else 0.1) for e, t in sent.items()}
    assert max_by_second(sent, seen) == [0.1, 1.5, 0.1]


def test_the_table_has_a_line_per_path() -> None:
    f = {"p50_s": 0.1, "p99_s": 0.2, "max_s": 0.3, "events_per_s": 2000.0, "missing": 0}
    lines = text_table({"rtm_postgres": f, "rtm_kafka": f})
    assert len(lines) == 3 and lines[1].startswith("rtm_postgres")


def test_the_highest_sustained_rate_delivers_everything_in_time() -> None:
    def stage(rate: float, delivered: float, p99: float, missing: int = 0) -> dict[str, float]:
        return {"sent_per_s": rate, "events_per_s": delivered, "p99_s": p99, "missing": missing}

    stages = [
        stage(2000, 1990, 0.3),
        stage(5000, 4900, 0.6),
        stage(10000, 9000, 0.8),  # fell behind: 90% of the rate
        stage(20000, 19900, 0.9, missing=3),
    ]
    assert sustained(stages)["max_rate_sustained_per_s"] == 5000
    assert sustained([stage(2000, 2000, 1.5)])["max_rate_sustained_per_s"] == 0.0
    assert len(sustained(stages)["stages"]) == 4


def test_a_path_keeps_its_median_run_by_p99_and_every_run() -> None:
    runs = [
        {"p50_s": 0.05, "p99_s": 0.3, "max_s": 0.6, "events_per_s": 1990, "missing": 0},
        {"p50_s": 0.04, "p99_s": 0.9, "max_s": 1.2, "events_per_s": 1980, "missing": 0},
        {"p50_s": 0.06, "p99_s": 0.2, "max_s": 0.5, "events_per_s": 1995, "missing": 0},
    ]
    out = median_run(runs)
    assert (out["p50_s"], out["p99_s"], out["max_s"]) == (0.05, 0.3, 0.6)  # one run's
    assert [r["p99_s"] for r in out["runs"]] == [0.3, 0.9, 0.2]


def test_the_median_of_two_runs_is_the_slower_one() -> None:
    out = median_run([{"p99_s": 0.2}, {"p99_s": 0.4}])
    assert out["p99_s"] == 0.4


def test_rounds_run_every_path_once_each_in_a_rotated_order() -> None:
    assert rounds(["a", "b", "c"], 2) == ["a", "b", "c", "b", "c", "a"]


def test_cpu_is_reported_per_million_events_sent() -> None:
    out = cpu_figures({"spark": 3.0, "kafka": 1.0, "total": 4.0, "wall": 61.0}, 120_000)
    assert out["cpu_s_per_million"] == {"spark": 25.0, "kafka": 8.33, "total": 33.33}
    assert cpu_figures({}, 10) == {}


def test_epoch_gaps_are_between_one_tasks_last_row_and_the_next_tasks_first(
    tmp_path: Path,
) -> None:
    # event index i went to source partition i % 2; one file per task
    (tmp_path / "a.txt").write_text("s0e0 10.0\ns0e2 10.5\n")
    (tmp_path / "b.txt").write_text("s0e4 10.8\ns0e6 11.0\n")
    (tmp_path / "c.txt").write_text("s0e1 10.1\n")
    (tmp_path / "d.txt").write_text("w3 10.4\n")
    assert ArrivalVisible(tmp_path).epoch_gaps() == [0.3, 0.3]


def test_the_kafka_reader_takes_each_record_when_it_arrives_not_when_a_batch_fills(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """confluent-kafka's ``consume(n, timeout)`` waits until n records or the timeout: a
    reader built on it saw records up to the timeout late (20 ms steps in bench realtime's
    Kafka latencies). The reader waits in ``poll`` (which returns at the first record) and
    takes what else was fetched without waiting."""
    import confluent_kafka

    class Record:
        def __init__(self, event_id: str) -> None:
            self.event_id = event_id

        def error(self) -> None:
            return None

        def value(self) -> bytes:
            return json.dumps({"event_id": self.event_id}).encode()

    class Partitions:
        partitions = {0: None}

    class FakeConsumer:
        waits: ClassVar[list[float]] = []

        def __init__(self, config: dict[str, object]) -> None:
            self.queue = [Record("e1"), Record("e2"), Record("e3")]

        def list_topics(self, topic: str, timeout: float) -> object:
            return type("Meta", (), {"topics": {topic: Partitions()}})()

        def assign(self, partitions: object) -> None:
            pass

        def poll(self, timeout: float) -> Record | None:
            return self.queue.pop(0) if self.queue else None

        def consume(self, num_messages: int, timeout: float) -> list[Record]:
            FakeConsumer.waits.append(timeout)
            taken, self.queue = self.queue, []
            return taken

        def close(self) -> None:
            pass

    monkeypatch.setattr(confluent_kafka, "Consumer", FakeConsumer)
    reader = KafkaVisible("broker:9092", "out").start()
    deadline = time.monotonic() + 5
    while len(reader.seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    reader.close()
    assert set(reader.seen) == {"e1", "e2", "e3"}
    assert FakeConsumer.waits and set(FakeConsumer.waits) == {0}
