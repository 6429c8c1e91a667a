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
from exactlyonce.integration.lab.chaos.control.reading import Reading, tally
from exactlyonce.integration.lab.chaos.report import (
    ControlReport,
    pipeline_kills,
    server_restarts,
)
from exactlyonce.integration.lab.chaos.schedule import (
    COMMIT_KILL,
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


def _clean() -> SinkAudit:
    return _audit(Counter({record_id([f"e{n}"]): 1 for n in range(3)}))


EXPECTED_KEYS = {(f"e{n}",) for n in range(3)}


def _reading(found: dict[str, int]) -> Reading:
    return Reading(
        "psycopg SQL", "postgres table public.t", Counter({(k,): n for k, n in found.items()})
    )


def _control(duplicates: int, missed: int = 0) -> ControlReport:
    """A control whose reading has ``duplicates`` writes beyond what was sent (each key sent
    once), after the schedule of :func:`_outcomes` with its first ``missed`` faults missed."""
    found = {"e0": 1 + duplicates, "e1": 1, "e2": 1}
    counted = tally(_reading(found), EXPECTED_KEYS, Counter(dict.fromkeys(EXPECTED_KEYS, 1)))
    outcomes = [
        Outcome(o.fault, o.happened and n >= missed, "n", 1, 1.0, in_window=n == 1)
        for n, o in enumerate(_outcomes(all_happen=True))
    ]
    return ControlReport("postgres table public.t_control_x", outcomes, counted)


def _outcomes(all_happen: bool = False) -> list[Outcome]:
    faults = [
        Fault(1, DRIVER_KILL, epochs=1, delay_s=0.5),
        Fault(2, POINT_KILL, point="mid_copy"),
        Fault(3, SERVER_HARD, server="redis", epochs=2, down_s=1.0),
        Fault(4, SERVER_CLEAN, server="redis", epochs=1, down_s=1.0),
        Fault(5, DRIVER_KILL, epochs=3, delay_s=1.0),
        Fault(6, COMMIT_KILL, epochs=1, delay_s=0.2),
    ]
    happened = [True, True, True, True, all_happen, True]
    return [
        Outcome(f, h, "note", f.n, float(f.n), in_window=f.kind == COMMIT_KILL)
        for f, h in zip(faults, happened, strict=True)
    ]


def test_every_fault_done_and_a_control_with_duplicates_say_exactly_once() -> None:
    report = ChaosReport(
        "p.yaml", 42, 6, _outcomes(all_happen=True), _clean(), sink="postgres",
        write_mode="append", source="kafka", id_from="source",
        independent=tally(_reading({"e0": 1, "e1": 1, "e2": 1}), EXPECTED_KEYS),
        control=_control(4),
    )  # fmt: skip
    assert report.result == "EXACTLY ONCE" and report.exactly_once
    assert verdict(report) == (
        "CHAOS: EXACTLY ONCE (seed 42, 6 faults: 2 driver kills, 1 named-point kill, "
        "1 commit kill, 2 redis restarts (1 hard, 1 clean); 4 pipeline kills (1 in the commit "
        "window), 2 server restarts; 3 IDs, 0 duplicates, 0 missing, independent read: "
        "0 duplicates, 0 missing; control: 4 duplicates, 1 kills in the commit window)"
    )
    doc = report_json(report)
    cell = {k: doc[k] for k in ("sink", "write_mode", "source", "id_from", "seed", "ids",
                                "pipeline_kills", "server_restarts", "worker_kills",
                                "faults_missed", "duplicates", "missing", "unexpected", "reader",
                                "control_duplicates", "commit_window_kills",
                                "control_commit_window_kills", "result")}  # fmt: skip
    assert cell == {
        "sink": "postgres",
        "write_mode": "append",
        "source": "kafka",
        "id_from": "source",
        "seed": 42,
        "ids": 3,
        "pipeline_kills": 4,
        "server_restarts": 2,
        "worker_kills": 0,
        "faults_missed": 0,
        "duplicates": 0,
        "missing": 0,
        "unexpected": 0,
        "reader": "psycopg SQL",
        "control_duplicates": 4,
        "commit_window_kills": 1,
        "control_commit_window_kills": 1,
        "result": "EXACTLY ONCE",
    }
    assert doc["counts"] == {
        "driver_kills": 2,
        "point_kills": 1,
        "commit_kills": 1,
        "server_hard": 1,
        "server_clean": 1,
        "lost_replies": 0,
        "refusals": 0,
        "stalls": 0,
        "worker_kills": 0,
        "drainer_kills": 0,
    }
    assert doc["control"]["pipeline_kills"] == 4 and doc["control"]["faults_missed"] == 0
    assert [f["in_window"] for f in doc["faults"]] == [False] * 5 + [True]


def test_a_missed_fault_makes_a_clean_audit_inconclusive_naming_it() -> None:
    report = ChaosReport("p.yaml", 42, 6, _outcomes(), _clean(), control=_control(4))
    assert report.audit_clean and not report.exactly_once
    assert report.result == "INCONCLUSIVE"
    line = verdict(report)
    assert line.startswith("CHAOS: INCONCLUSIVE (seed 42, 5 faults: ")
    assert line.endswith("; not evidence: fault 5 (driver_kill) MISSED)")
    doc = report_json(report)
    assert doc["exactly_once"] is False and doc["faults_missed"] == 1
    assert doc["not_evidence"] == ["fault 5 (driver_kill) MISSED"]


def test_a_fault_missed_in_the_control_makes_it_inconclusive_too() -> None:
    report = ChaosReport("p.yaml", 1, 6, _outcomes(True), _clean(), control=_control(3, 1))
    assert report.result == "INCONCLUSIVE"
    assert report.not_evidence() == ["control fault 1 (driver_kill) MISSED"]


def test_a_control_without_duplicates_is_not_evidence() -> None:
    report = ChaosReport("p.yaml", 1, 6, _outcomes(True), _clean(), control=_control(0))
    assert report.result == "INCONCLUSIVE"
    assert verdict(report).endswith("; not evidence: the control shows 0 duplicates)")
    assert report_json(report)["control_duplicates"] == 0


def test_no_control_is_not_evidence() -> None:
    report = ChaosReport("p.yaml", 1, 6, _outcomes(True), _clean(), control_skipped="--no-control")
    assert report.result == "INCONCLUSIVE"
    assert report.not_evidence() == ["no negative control (--no-control)"]


def test_kills_of_the_pipeline_are_counted_apart_from_server_restarts_and_proxy_faults() -> None:
    faults = [
        Fault(1, LOST_REPLY),
        Fault(2, REFUSE, down_s=2.0),
        Fault(3, STALL, down_s=2.0),
        Fault(4, WORKER_KILL, target="worker2"),
        Fault(5, DRAINER_KILL),
        Fault(6, LOST_REPLY),
        Fault(7, SERVER_HARD, server="pg"),
        Fault(8, COMMIT_KILL),
    ]
    happened = [True, True, True, True, True, False, True, True]
    outcomes = [Outcome(f, h, "n", 1, 1.0) for f, h in zip(faults, happened, strict=True)]
    assert (pipeline_kills(outcomes), server_restarts(outcomes)) == (3, 1)
    report = ChaosReport("p.yaml", 3, 8, outcomes, _clean(), control=_control(2))
    assert verdict(report).startswith(
        "CHAOS: INCONCLUSIVE (seed 3, 7 faults: 1 commit kill, 1 pg restart (1 hard, 0 clean), "
        "1 lost reply, 1 refusal, 1 stall, 1 worker kill, 1 drainer kill, 1 MISSED; "
        "3 pipeline kills (0 in the commit window), 1 server restart; "
    )
    doc = report_json(report)
    assert (doc["pipeline_kills"], doc["server_restarts"], doc["worker_kills"]) == (3, 1, 1)
    counts = {k: v for k, v in doc["counts"].items() if v}
    assert counts == {
        "commit_kills": 1,
        "server_hard": 1,
        "lost_replies": 1,
        "refusals": 1,
        "stalls": 1,
        "worker_kills": 1,
        "drainer_kills": 1,
    }
    assert doc["faults"][3]["target"] == "worker2"


def test_a_duplicate_or_a_missing_id_fails_the_verdict() -> None:
    twice = Counter({record_id(["e0"]): 2, record_id(["e1"]): 1})
    report = ChaosReport("p.yaml", 7, 6, _outcomes(), _audit(twice), control=_control(1))
    assert not report.exactly_once and report.result == "FAILED"
    assert verdict(report).startswith("CHAOS: FAILED (seed 7, ")
    assert "; 3 IDs, 1 duplicates, 1 missing; control: 1 duplicates" in verdict(report)
    assert report_json(report)["exactly_once"] is False


def test_a_duplicate_the_independent_reader_sees_fails_a_clean_project_audit() -> None:
    seen_twice = tally(_reading({"e0": 2, "e1": 1, "e2": 1}), EXPECTED_KEYS)
    report = ChaosReport(
        "p.yaml", 7, 6, _outcomes(True), _clean(), independent=seen_twice, control=_control(1)
    )
    assert report.result == "FAILED"
    assert "independent read: 1 duplicates, 0 missing" in verdict(report)
    assert report_json(report)["duplicates"] == 1


def test_the_control_may_write_a_key_as_often_as_it_was_sent() -> None:
    sent = Counter({("e0",): 3, ("e1",): 1, ("e2",): 1})
    counted = tally(_reading({"e0": 3, "e1": 2, "e2": 1, "zz": 1}), EXPECTED_KEYS, sent)
    assert counted.duplicate_keys == {("e1",): 1}
    assert counted.unexpected_keys == [("zz",)] and counted.missing_keys == []
    ours = tally(_reading({"e0": 3, "e1": 1}), EXPECTED_KEYS)
    assert ours.duplicates == 2 and ours.missing_keys == [("e2",)]


def test_a_failed_last_run_fails_the_verdict_even_with_a_clean_audit() -> None:
    report = ChaosReport("p.yaml", 1, 0, [], _clean(), failure="the last run 3 failed 3 times:\nx")
    assert not report.exactly_once and report.result == "FAILED"
    assert verdict(report) == (
        "CHAOS: FAILED (seed 1, 0 faults; 0 pipeline kills (0 in the commit window), "
        "0 server restarts; 3 IDs, 0 duplicates, 0 missing, the last run 3 failed 3 times:)"
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
    ("found", "failure", "control", "missed", "code"),
    [
        ({"e0": 1, "e1": 1, "e2": 1}, "", 2, False, 0),
        ({"e0": 2, "e1": 1, "e2": 1}, "", 2, False, 1),  # a duplicate
        ({"e0": 1, "e1": 1}, "", 2, False, 1),  # a missing ID
        ({"e0": 1, "e1": 1, "e2": 1}, "the last run 4 failed 3 times:", 2, False, 1),
        ({"e0": 1, "e1": 1, "e2": 1}, "", 0, False, 3),  # the control shows no duplicate
        ({"e0": 1, "e1": 1, "e2": 1}, "", 2, True, 3),  # a fault was missed
        ({"e0": 1, "e1": 1, "e2": 1}, "", None, False, 3),  # --no-control
    ],
)
def test_the_command_exits_0_only_for_a_clean_audit_every_fault_and_a_failing_control(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    found: dict[str, int],
    failure: str,
    control: int | None,
    missed: bool,
    code: int,
) -> None:
    """The runs, the sink's readings and the control are stood in for (their real ones are
    tests/crash/test_chaos_command.py's and the audit's own tests): what is checked is that
    the audit's verdict, a failed last run, a missed fault and the control's duplicates
    become the command's exit code (0, 1 FAILED, 3 INCONCLUSIVE) and report."""
    from exactlyonce.integration.cli import main
    from exactlyonce.integration.lab.chaos import command

    monkeypatch.setenv("EXACTLYONCE_HOME", str(tmp_path / "no-services"))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.json").write_text(
        "".join(f'{{"event_id": "e{n}"}}\n' for n in range(3))
    )
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "query_name: q\n"
        f"checkpoint: {tmp_path}/ckpt\n"
        f"source: {{type: files, path: {tmp_path}/in, schema: 'event_id STRING'}}\n"
        "sink: {type: postgres, dsn: 'postgresql://u:pw@127.0.0.1:1/db', table: t,\n"
        "       id_columns: [event_id], dedup: false}\n"
    )
    fault = Fault(1, DRIVER_KILL, epochs=1, delay_s=0.5)

    class NoRuns:
        outcomes = [Outcome(fault, not missed, "n", 1, 1.0)]
        runs = runs_died = 0

    monkeypatch.setattr(command, "_run", lambda *_, **__: (NoRuns(), failure))
    counts = Counter({record_id([key]): n for key, n in found.items()})
    monkeypatch.setattr(command, "audit_pipeline", lambda *_, **__: _audit(counts))
    seen = tally(_reading(found), EXPECTED_KEYS)
    monkeypatch.setattr(command, "_independent", lambda *_, **__: seen)
    if control is not None:
        monkeypatch.setattr(command, "_control", lambda *_: _control(control))
    report = tmp_path / "report.json"
    argv = ["chaos", str(config), "--kills", "1", "--seed", "5", "--json", str(report)]
    argv += ["--server-faults", "0", "--no-proxy", "--points", ""]
    argv += ["--no-control"] if control is None else []
    assert main(argv) == code
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "CHAOS seed 5 (replay with --seed 5)"
    word = {0: "EXACTLY ONCE", 1: "FAILED", 3: "INCONCLUSIVE"}[code]
    assert f"CHAOS: {word} (seed 5, " in out
    doc = json.loads(report.read_text())
    assert doc["exactly_once"] is (code == 0) and doc["result"] == word


def write_elsewhere_env(home: Path) -> None:
    """A services.env in ``home`` whose pg, redis and kafka are on ports no test uses."""
    from exactlyonce.integration.envfile import write_env_file

    write_env_file(
        {
            "EXACTLYONCE_PG_DSN": "postgresql://u:pw@127.0.0.1:1/db",
            "EXACTLYONCE_REDIS_URL": "redis://127.0.0.1:2/0",
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:3",
        },
        home,
    )


def test_a_running_3_node_cluster_is_one_server_whose_faults_are_failovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from exactlyonce.integration.lab.chaos.servers import FAILOVER_ROLES
    from exactlyonce.integration.lab.services.kafka_cluster import KafkaCluster

    assert FAILOVER_ROLES == {"kafka3": ("leader", "controller")}
    monkeypatch.setenv("EXACTLYONCE_KAFKA3_PORT", "19300")
    write_elsewhere_env(tmp_path)
    nodes = "127.0.0.1:19300,localhost:19301,127.0.0.1:19302"
    cfg = PipelineConfig.model_validate(
        {
            "query_name": "q",
            "checkpoint": "/tmp/ckpt",
            "source": {"type": "files", "path": "/tmp/in", "schema": "e STRING"},
            "sink": {
                "type": "kafka",
                "bootstrap_servers": nodes,
                "topic": "t",
                "id_columns": ["e"],
            },
        }
    )
    monkeypatch.setattr(KafkaCluster, "alive", lambda self: [1, 3])
    servers, skipped = restartable(cfg, tmp_path)  # a node down: no failover on it
    assert [s.role for s in skipped if s.address.endswith(("19300", "19301", "19302"))] == [
        "sink"
    ] * 3
    monkeypatch.setattr(KafkaCluster, "alive", lambda self: [1, 2, 3])
    servers, skipped = restartable(cfg, tmp_path)
    assert [(s.service, s.roles) for s in servers] == [("kafka3", ("sink",))]  # one server
    assert not [s for s in skipped if s.role == "sink"]


ON_DEMAND_SINKS = {
    "redis-aof": (
        "EXACTLYONCE_REDIS_AOF_PORT",
        {"type": "redis", "url": "redis://localhost:19391/0", "write": "stream",
         "key_template": "events", "id_columns": ["e"]},
    ),
    "opensearch": (
        "EXACTLYONCE_OPENSEARCH_PORT",
        {"type": "opensearch", "hosts": ["http://localhost:19391"], "index": "events",
         "op_type": "index", "id_columns": ["e"]},
    ),
}  # fmt: skip


@pytest.mark.parametrize("service", sorted(ON_DEMAND_SINKS))
def test_a_running_on_demand_service_is_its_sinks_restartable_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service: str
) -> None:
    """redis-aof (a Redis sink's server) and opensearch (an OpenSearch sink's) are started
    on demand, not written to services.env: restartable while they run, else skipped."""
    from exactlyonce.integration.lab.chaos import servers as chaos_servers

    port_env, sink = ON_DEMAND_SINKS[service]
    monkeypatch.setenv(port_env, "19391")
    write_elsewhere_env(tmp_path)
    cfg = PipelineConfig.model_validate(
        {
            "query_name": "q",
            "checkpoint": "/tmp/ckpt",
            "source": {"type": "files", "path": "/tmp/in", "schema": "e STRING"},
            "sink": sink,
        }
    )
    running = {service: 4242}
    monkeypatch.setattr(chaos_servers, "service_pid", lambda name, root: running.get(name))
    servers, _ = restartable(cfg, tmp_path)
    assert [(s.service, s.roles) for s in servers] == [(service, ("sink",))]
    running.clear()  # not running: named as skipped, with the reason
    servers, skipped = restartable(cfg, tmp_path)
    assert servers == [] and [k.address for k in skipped if k.role == "sink"] == ["127.0.0.1:19391"]


def test_servers_restricts_the_restarts_to_the_services_it_names() -> None:
    import argparse

    from exactlyonce.errors import ConfigError
    from exactlyonce.integration.lab.chaos.command import _chosen_servers
    from exactlyonce.integration.lab.chaos.servers import Server

    found = [Server("kafka3", "127.0.0.1:19300", ("sink",)), Server("redis", "r:1", ("catalog",))]
    servers, skipped = _chosen_servers(argparse.Namespace(servers="kafka3"), found, [])
    assert servers == found[:1]
    assert [(k.role, k.address, k.why) for k in skipped] == [("catalog", "r:1", "not in --servers")]
    assert _chosen_servers(argparse.Namespace(servers=None), found, []) == (found, [])
    with pytest.raises(ConfigError, match="--servers.*pg: not a local service.*kafka3, redis"):
        _chosen_servers(argparse.Namespace(servers="pg"), found, [])
