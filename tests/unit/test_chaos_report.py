"""``exactlyonce chaos``'s verdict and JSON report from outcomes and an audit, and which of a
pipeline's addresses are local services it may restart (no service runs here: every one is
named as skipped, with the reason)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from exactlyonce.dedup.ids import record_id
from exactlyonce.integration.audit import SinkAudit
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.lab.chaos import ChaosReport, Fault, Outcome, report_json, verdict
from exactlyonce.integration.lab.chaos.schedule import (
    DRAINER_KILL,
    DRIVER_KILL,
    LOST_REPLY,
    POINT_KILL,
    REFUSE,
    SERVER_CLEAN,
    SERVER_HARD,
    STALL,
    WORKER_KILL,
)
from exactlyonce.integration.lab.chaos.servers import host_port, pipeline_addresses, restartable


def _audit(found: Counter[str], expected_ids: int = 3) -> SinkAudit:
    expected = {record_id([f"e{n}"]): [f"e{n}"] for n in range(expected_ids)}
    return SinkAudit(
        query_name="q",
        sink="postgres:public.t",
        kind="postgres",
        read_with="",
        unit="rows in sink",
        expected=expected,
        counts=found,
        head_epoch=4,
        dead_letters=0,
    )


def _outcomes() -> list[Outcome]:
    faults = [
        Fault(1, DRIVER_KILL, epochs=1, delay_s=0.5),
        Fault(2, POINT_KILL, point="mid_copy"),
        Fault(3, SERVER_HARD, server="redis", epochs=2, down_s=1.0),
        Fault(4, SERVER_CLEAN, server="redis", epochs=1, down_s=1.0),
        Fault(5, DRIVER_KILL, epochs=3, delay_s=1.0),
    ]
    happened = [True, True, True, True, False]
    return [Outcome(f, h, "note", f.n, float(f.n)) for f, h in zip(faults, happened, strict=True)]


def test_the_verdict_says_exactly_once_and_counts_each_sort_of_fault() -> None:
    audit = _audit(Counter({record_id([f"e{n}"]): 1 for n in range(3)}))
    report = ChaosReport("p.yaml", 42, 5, _outcomes(), audit)
    assert report.exactly_once
    assert verdict(report) == (
        "CHAOS: EXACTLY ONCE (seed 42, 4 faults: 1 driver kill, 1 named-point kill, "
        "2 redis restarts (1 hard, 1 clean), 1 MISSED; 3 IDs, 0 duplicates, 0 missing)"
    )
    doc = report_json(report)
    assert doc["exactly_once"] is True and doc["faults_missed"] == 1
    assert doc["counts"] == {
        "driver_kills": 1,
        "point_kills": 1,
        "server_hard": 1,
        "server_clean": 1,
        "lost_replies": 0,
        "refusals": 0,
        "stalls": 0,
        "worker_kills": 0,
        "drainer_kills": 0,
    }
    assert [f["happened"] for f in doc["faults"]] == [True, True, True, True, False]
    assert doc["audit"]["duplicates"] == 0 and doc["audit"]["missing"] == 0


def test_proxy_worker_and_drainer_faults_are_counted_only_when_they_happened() -> None:
    faults = [
        Fault(1, LOST_REPLY),
        Fault(2, REFUSE, down_s=2.0),
        Fault(3, STALL, down_s=2.0),
        Fault(4, WORKER_KILL, target="worker2"),
        Fault(5, DRAINER_KILL),
        Fault(6, LOST_REPLY),
    ]
    happened = [True, True, True, True, True, False]
    outcomes = [Outcome(f, h, "n", 1, 1.0) for f, h in zip(faults, happened, strict=True)]
    audit = _audit(Counter({record_id([f"e{n}"]): 1 for n in range(3)}))
    report = ChaosReport("p.yaml", 3, 6, outcomes, audit)
    assert verdict(report) == (
        "CHAOS: EXACTLY ONCE (seed 3, 5 faults: 1 lost reply, 1 refusal, 1 stall, "
        "1 worker kill, 1 drainer kill, 1 MISSED; 3 IDs, 0 duplicates, 0 missing)"
    )
    doc = report_json(report)
    counts = {k: v for k, v in doc["counts"].items() if v}
    assert counts == {
        "lost_replies": 1,
        "refusals": 1,
        "stalls": 1,
        "worker_kills": 1,
        "drainer_kills": 1,
    }
    assert doc["faults"][3]["target"] == "worker2"


def test_a_duplicate_or_a_missing_id_fails_the_verdict() -> None:
    twice = Counter({record_id(["e0"]): 2, record_id(["e1"]): 1})
    report = ChaosReport("p.yaml", 7, 5, _outcomes(), _audit(twice))
    assert not report.exactly_once
    assert verdict(report).startswith("CHAOS: FAILED (seed 7, ")
    assert verdict(report).endswith("; 3 IDs, 1 duplicates, 1 missing)")
    assert report_json(report)["exactly_once"] is False


def test_a_failed_last_run_fails_the_verdict_even_with_a_clean_audit() -> None:
    audit = _audit(Counter({record_id([f"e{n}"]): 1 for n in range(3)}))
    report = ChaosReport("p.yaml", 1, 0, [], audit, failure="the last run 3 failed 3 times:\nx")
    assert not report.exactly_once
    assert verdict(report) == (
        "CHAOS: FAILED (seed 1, 0 faults; 3 IDs, 0 duplicates, 0 missing, "
        "the last run 3 failed 3 times:)"
    )


@pytest.mark.parametrize(
    ("address", "default", "expected"),
    [
        ("postgresql://u:pw@localhost:5433/db", 5432, "127.0.0.1:5433"),
        ("postgresql://u@db.example/db", 5432, "db.example:5432"),
        ("host=10.0.0.2 port=6000 dbname=x password=pw", 5432, "10.0.0.2:6000"),
        ("redis://:pw@127.0.0.1:63790/0", 6379, "127.0.0.1:63790"),
        ("broker:9093", 9092, "broker:9093"),
        ("http://es:9200", 9200, "es:9200"),
    ],
)
def test_addresses_are_compared_as_host_and_port(address: str, default: int, expected: str) -> None:
    assert host_port(address, default) == expected


def _pipeline() -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "query_name": "q",
            "checkpoint": "/tmp/ckpt",
            "source": {
                "type": "kafka",
                "bootstrap_servers": "localhost:19092,other:9092",
                "topic": "in",
                "schema": "event_id STRING",
            },
            "sink": {
                "type": "postgres",
                "dsn": "postgresql://u:pw@127.0.0.1:54329/db",
                "table": "t",
                "id_columns": ["event_id"],
                "redis_url": "redis://127.0.0.1:63790/0",
            },
        }
    )


def test_every_server_of_the_pipeline_is_found_with_its_role() -> None:
    assert pipeline_addresses(_pipeline()) == [
        ("sink", "127.0.0.1:54329"),
        ("catalog", "127.0.0.1:63790"),
        ("source", "127.0.0.1:19092"),
        ("source", "other:9092"),
    ]


def test_without_local_services_every_server_is_named_as_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("EXACTLYONCE_PG_DSN", "EXACTLYONCE_REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(key, raising=False)
    servers, skipped = restartable(_pipeline(), tmp_path)
    assert servers == []
    assert [(s.role, s.address) for s in skipped] == pipeline_addresses(_pipeline())
    assert all("no local services" in s.why for s in skipped)


def test_bad_options_exit_2_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from exactlyonce.integration.cli import main

    monkeypatch.setenv("EXACTLYONCE_HOME", str(tmp_path / "no-services"))
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "query_name: q\n"
        f"checkpoint: {tmp_path}/ckpt\n"
        f"source: {{type: files, path: {tmp_path}/in, schema: 'event_id STRING'}}\n"
        "sink: {type: postgres, dsn: 'postgresql://u:pw@127.0.0.1:1/db', table: t,\n"
        "       id_columns: [event_id], dedup: false}\n"
    )
    assert main(["chaos", str(config), "--points", "rewind_mid_delete"]) == 2
    assert "--points" in capsys.readouterr().err
    assert main(["chaos", str(config), "--kills", "-1"]) == 2
    assert "--kills" in capsys.readouterr().err
    assert main(["chaos", str(config), "--kills", "3", "--server-faults", "1"]) == 2
    assert "no local server" in capsys.readouterr().err
    assert main(["chaos", str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.parametrize(
    ("found", "failure", "code"),
    [
        ({"e0": 1, "e1": 1, "e2": 1}, "", 0),
        ({"e0": 2, "e1": 1, "e2": 1}, "", 1),  # a duplicate
        ({"e0": 1, "e1": 1}, "", 1),  # a missing ID
        ({"e0": 1, "e1": 1, "e2": 1}, "the last run 4 failed 3 times:", 1),
    ],
)
def test_the_command_exits_1_unless_the_audit_says_exactly_once(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    found: dict[str, int],
    failure: str,
    code: int,
) -> None:
    """The runs and the sink's reading are stood in for (their real ones are
    tests/crash/test_chaos_command.py's and the audit's own tests): what is checked is that the
    audit's verdict, or a failed last run, becomes the command's exit code and report."""
    from exactlyonce.integration.cli import main
    from exactlyonce.integration.lab.chaos import command

    monkeypatch.setenv("EXACTLYONCE_HOME", str(tmp_path / "no-services"))
    (tmp_path / "in").mkdir()
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "query_name: q\n"
        f"checkpoint: {tmp_path}/ckpt\n"
        f"source: {{type: files, path: {tmp_path}/in, schema: 'event_id STRING'}}\n"
        "sink: {type: postgres, dsn: 'postgresql://u:pw@127.0.0.1:1/db', table: t,\n"
        "       id_columns: [event_id], dedup: false}\n"
    )
    (tmp_path / "expected.txt").write_text("e0\ne1\ne2\n")

    class NoRuns:
        outcomes: list[Outcome] = []
        runs = runs_died = 0

    monkeypatch.setattr(command, "_run", lambda *_: (NoRuns(), failure))
    counts = Counter({record_id([key]): n for key, n in found.items()})
    monkeypatch.setattr(command, "audit_pipeline", lambda *_, **__: _audit(counts))
    report = tmp_path / "report.json"
    argv = ["chaos", str(config), "--kills", "0", "--seed", "5"]
    argv += ["--expected-ids", str(tmp_path / "expected.txt"), "--json", str(report)]
    assert main(argv) == code
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "CHAOS seed 5 (replay with --seed 5)"
    assert ("CHAOS: EXACTLY ONCE (seed 5, " in out) == (code == 0)
    assert json.loads(report.read_text())["exactly_once"] is (code == 0)
