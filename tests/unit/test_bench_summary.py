"""bench/summary.py's panels, from results files only: PostgreSQL's streaming panel puts
format("exactlyonce") first, so its "ours Nx" is the format/foreachBatch ratio."""

from __future__ import annotations

from pathlib import Path

from bench.summary import draw, throughput_panels

PG = {
    "rows": 1000,
    "eos_rows_per_s": 300.0,
    "spark_jdbc_rows_per_s": 400.0,
    "format_vs_foreach_batch": 0.9,
    "stream": {
        "eos_stream_rows_per_s": 200.0,
        "eos_format_stream_rows_per_s": 180.0,
        "raw_copy_stream_rows_per_s": 250.0,
    },
}


def test_the_postgres_streaming_panel_compares_format_with_foreach_batch(tmp_path: Path) -> None:
    panels = dict(throughput_panels({"postgres": PG}))
    stream = panels["PostgreSQL streaming, one micro-batch (1,000 rows)"]
    assert stream == [
        ("format('exactlyonce')", 180.0),
        ("foreachBatch(sink)", 200.0),
        ("raw COPY in foreachBatch", 250.0),
    ]
    assert draw({"postgres": PG}, tmp_path / "summary.png").stat().st_size > 0


def test_results_without_streaming_runs_leave_the_panel_out() -> None:
    older = {k: v for k, v in PG.items() if k != "stream"}
    titles = [title for title, _ in throughput_panels({"postgres": older})]
    assert titles == ["PostgreSQL (1,000 rows)"]


def test_opensearch_has_its_own_panel_naming_the_node_version() -> None:
    results = {
        "opensearch": {
            "rows": 2000,
            "server_version": "2.19.6",
            "eos_docs_per_s": 90.0,
            "plain_docs_per_s": 100.0,
        }
    }
    panels = dict(throughput_panels(results))
    assert panels["OpenSearch (2,000 docs, OpenSearch 2.19.6)"] == [
        ("OpenSearchSink", 90.0),
        ("streaming_bulk", 100.0),
    ]


def test_each_sink_stands_beside_the_ceilings_of_its_run(tmp_path: Path) -> None:
    redis = {
        "rows": 3000,
        "eos_records_per_s": 60.0,
        "plain_records_per_s": 80.0,
        "ceiling_python_rows_per_s": 100,
        "ceiling_noop_rows_per_s": 400,
    }
    panels = dict(throughput_panels({"redis": redis, "postgres": PG}))
    assert panels["Redis (3,000 records)"] == [
        ("RedisSink", 60.0),
        ("pipelined writes", 80.0),
        ("Python ceiling (counting mapInArrow)", 100.0),
        ("Spark noop sink (ceiling)", 400.0),
    ]
    # a file from before the ceilings: the sink's panel as it was
    assert panels["PostgreSQL (1,000 rows)"] == [("PostgresSink", 300.0), ("Spark JDBC", 400.0)]
    assert draw({"redis": redis}, tmp_path / "summary.png").stat().st_size > 0


def test_a_ratio_far_below_a_ceiling_keeps_two_significant_digits() -> None:
    from bench.summary import _times

    assert (_times(1.3333), _times(0.123), _times(0.0049)) == ("1.33", "0.12", "0.0049")


def test_realtime_latencies_are_drawn_per_path_in_the_files_order(tmp_path: Path) -> None:
    from bench.summary import latency_rows

    realtime = {
        "paths": {
            "rtm_kafka": {"p50_s": 0.7, "p99_s": 3.1},
            "spark_rtm_kafka": {"p50_s": 0.01, "p99_s": 0.3},
        }
    }
    assert latency_rows(realtime) == [("rtm_kafka", 0.7, 3.1), ("spark_rtm_kafka", 0.01, 0.3)]
    assert draw({"realtime": realtime}, tmp_path / "summary.png").stat().st_size > 0
