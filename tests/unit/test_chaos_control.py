"""The negative control's pure parts: where ours and the control write (targets, fresh
names, the mode a sink runs), the last batch of Spark's commit log (the commit window's
other side), and the raw RESP client's parsing (no server: a socket pair)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from exactlyonce.errors import ConfigError
from exactlyonce.faults import POINTS
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.lab.chaos.control import target as targets
from exactlyonce.integration.lab.chaos.control.resp import RespClient
from exactlyonce.integration.lab.chaos.rewrite import rewrite_pipeline
from exactlyonce.integration.lab.chaos.schedule import sink_points

SINKS: dict[str, dict[str, Any]] = {
    "pg": {"type": "postgres", "dsn": "postgresql://u:pw@127.0.0.1:1/db", "table": "ev",
           "mode": "append", "redis_url": "redis://127.0.0.1:1/0"},
    "redis": {"type": "redis", "url": "redis://127.0.0.1:1/0", "key_template": "s:events",
              "write": "stream", "redis_url": "redis://127.0.0.1:1/0"},
    "es": {"type": "elasticsearch", "hosts": ["http://127.0.0.1:1"], "index": "ev",
           "op_type": "index", "redis_url": "redis://127.0.0.1:1/0"},
    "os": {"type": "opensearch", "hosts": ["http://127.0.0.1:1"], "index": "ev",
           "op_type": "index", "redis_url": "redis://127.0.0.1:1/0"},
    "kafka": {"type": "kafka", "bootstrap_servers": "127.0.0.1:1", "topic": "ev"},
    "buffer": {"type": "postgres", "dsn": "postgresql://u:pw@127.0.0.1:1/db", "table": "ev",
               "mode": "append", "redis_url": "redis://127.0.0.1:1/0",
               "buffer": {"topic": "ev-buffer", "bootstrap_servers": "127.0.0.1:2"}},
}  # fmt: skip


def _cfg(sink: dict[str, Any]) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "query_name": "q",
            "checkpoint": "/tmp/ckpt",
            "source": {"type": "files", "path": "/tmp/in", "schema": "event_id STRING"},
            "sink": {**sink, "id_columns": ["event_id"]},
        }
    )


@pytest.mark.parametrize(
    ("sink", "mode", "written", "final", "control_kind"),
    [
        ("pg", "append", "postgres table public.ev", "postgres table public.ev", "postgres"),
        ("redis", "stream", "redis stream s:events", "redis stream s:events", "redis"),
        ("es", "index", "elasticsearch index ev", "elasticsearch index ev", "elasticsearch"),
        ("os", "index", "opensearch index ev", "opensearch index ev", "elasticsearch"),
        ("kafka", "transactions", "kafka topic ev", "kafka topic ev", "kafka"),
        ("buffer", "buffered-append", "kafka topic ev-buffer", "postgres table public.ev",
         "postgres"),
    ],
)  # fmt: skip
def test_ours_is_read_where_its_records_end_and_watched_where_its_runs_commit(
    sink: str, mode: str, written: str, final: str, control_kind: str
) -> None:
    cfg = _cfg(SINKS[sink])
    assert targets.write_mode(cfg) == mode
    ours_written, ours_final = targets.ours(cfg)
    assert (ours_written.describe(), ours_final.describe()) == (written, final)
    assert ours_final.keys == ("event_id",)
    name = targets.control_name(cfg, "abc123")
    control = targets.control(cfg, name)
    assert control.kind == control_kind and "control" in name and name.endswith("abc123")
    assert control.epoch == "epoch" and control.name != ours_final.name
    assert control.address == ours_final.address  # the same server
    assert "pw" not in repr(control)  # the address (credentials) never shows


@pytest.mark.parametrize("sink", ["pg", "redis", "es", "os", "kafka"])
def test_the_control_passes_the_crash_points_of_the_sink_it_stands_in_for(sink: str) -> None:
    cfg = _cfg(SINKS[sink])
    points = sink_points(cfg.sink, buffered=False)
    control = targets.control(cfg, targets.control_name(cfg, "abc123"))
    assert control.points == points[1:3]  # mid-write, after the commit
    assert set(points) <= set(POINTS)  # each a named point the sink's code passes
    assert points[0] == "before_write" and points[-1] == "after_head"
    # on a standalone cluster the executors do not inherit a run's crash point: the driver's
    assert sink_points(cfg.sink, buffered=False, cluster=True) == ("before_write", "after_head")


@pytest.mark.parametrize(("sink", "field"), [("pg", "dsn"), ("redis", "url"), ("os", "hosts")])
def test_the_proxied_address_replaces_the_field_the_registry_names(
    sink: str, field: str, tmp_path: Path
) -> None:
    source = tmp_path / "p.yaml"
    source.write_text(yaml.safe_dump({"query_name": "q", "sink": SINKS[sink]}))
    written, env = rewrite_pipeline(str(source), tmp_path / "out.yaml", sink_address="X")
    rewritten = yaml.safe_load(Path(written).read_text())["sink"][field]
    assert rewritten in ("${EXACTLYONCE_CHAOS_SINK_ADDRESS}", ["${EXACTLYONCE_CHAOS_SINK_ADDRESS}"])
    assert env == {"EXACTLYONCE_CHAOS_SINK_ADDRESS": "X"}


def test_a_long_table_name_gets_a_control_name_postgres_takes() -> None:
    cfg = _cfg({**SINKS["pg"], "table": "t" * 63})
    schema, _, table = targets.control_name(cfg, "abc123").rpartition(".")
    assert schema == "public" and len(table) <= 63 and table.endswith("_control_abc123")


def test_a_redis_write_where_a_second_write_never_shows_has_no_independent_reading() -> None:
    with pytest.raises(ConfigError, match="stream writes"):
        targets.ours(_cfg({**SINKS["redis"], "write": "hash", "key_template": "e:{event_id}"}))
    control = targets.control(_cfg({**SINKS["redis"], "write": "hash",
                                    "key_template": "e:{event_id}"}), "c")  # fmt: skip
    assert control.describe() == "redis stream c"  # the control appends anyway


def test_spark_commit_log_last_batch(tmp_path: Path) -> None:
    assert targets.spark_committed(tmp_path) == -1
    commits = tmp_path / "commits"
    commits.mkdir()
    for name in ("0", "1", "7", ".7.crc", ".8.tmp"):
        (commits / name).write_text("v1\n")
    assert targets.spark_committed(tmp_path) == 7


def test_the_raw_resp_client_parses_every_reply_kind() -> None:
    ours, server = socket.socketpair()
    client = RespClient.__new__(RespClient)
    client.sock, client.buf = ours, b""
    server.sendall(
        b"+OK\r\n:42\r\n$5\r\nhello\r\n$-1\r\n*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nk\r\n"
        b"$1\r\nv\r\n*0\r\n-ERR nope\r\n"
    )
    assert client.reply() == b"OK" and client.reply() == 42 and client.reply() == b"hello"
    assert client.reply() is None
    assert client.reply() == [[b"1-0", [b"k", b"v"]], []]
    with pytest.raises(Exception, match="ERR nope"):
        client.reply()
    client.send("XRANGE", "s", b"-", 10)
    assert server.recv(100) == b"*4\r\n$6\r\nXRANGE\r\n$1\r\ns\r\n$1\r\n-\r\n$2\r\n10\r\n"
    ours.close()
    server.close()
