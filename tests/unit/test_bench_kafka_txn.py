"""bench.kafka_txn's arithmetic: visibility latencies of the writes, and the ones not seen."""

from __future__ import annotations

from bench.kafka_txn import latencies


def test_latency_is_visible_minus_started_and_unseen_writes_are_missing() -> None:
    started = {b"%d" % i: float(i) for i in range(100)}
    seen = {k: t + 0.02 for k, t in started.items() if k != b"7"}
    out = latencies(started, seen)
    assert out["writes"] == 100 and out["missing"] == 1
    assert abs(out["p50_s"] - 0.02) < 1e-9 and abs(out["max_s"] - 0.02) < 1e-9
    assert latencies(started, {}) == {"writes": 100, "missing": 100}
