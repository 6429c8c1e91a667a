"""``exactlyonce chaos`` as a user runs it: the real command, a subprocess, on a small
PostgreSQL pipeline (files source, ``available_now``, a few hundred records with duplicates
and null keys), under 6 seeded faults: a SIGKILL of the driver at a random moment, one at
the named point ``mid_copy`` (small COPY chunks: data sent before and after it), one hard
restart (SIGKILL) of the catalog's Redis, a PRIVATE one started here (the shared services are
never restarted; the shared PostgreSQL is the sink and is left alone, which the command must
say), and three faults of the proxy chaos puts in front of the sink's PostgreSQL: the reply
to a COMMIT the server applied is lost (F6), connections are cut and refused for a while, and
replies are held for a while.

Asserted: the printed seed, every fault printed and done (none missed: a proxy fault is done
only when the proxy saw it fire), the verdict line and the JSON report (0 duplicates, 0
missing, the null keys as dead letters), no form of a service password in the output or in
any file chaos leaves (its logs, Spark's event log, the report), and, counting WRITES with an
audit trigger (committed insert attempts, those ON CONFLICT DO NOTHING skips included), every
expected ID inserted once and attempted once, but for what the catalog's restart (it comes
back empty) makes insert mode send again: exactly the records written before it that a later
epoch holds, once each (the unique index absorbs them). These two run without the negative
control (``--no-control``), so their verdict is INCONCLUSIVE (exit 3) with a clean audit; the
control is the third test's: the same schedule (a kill aimed at the commit window, one at
``after_head``) against our sink in append mode and against the plain writer, which must show
duplicates where ours shows none. That a failing audit (or a failed last run, a missed fault,
a control without duplicates) makes the command say FAILED or INCONCLUSIVE is
tests/unit/test_chaos_report.py's (the audit's own tests mutate real sinks), which saves
these tests more runs of Spark.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from exactlyonce.connectors.postgres.schema import TableName, create_table_ddl
from exactlyonce.integration.config import load_config
from exactlyonce.integration.lab.chaos import plan
from exactlyonce.integration.lab.chaos.schedule import (
    LOST_REPLY,
    REFUSE,
    SERVER_HARD,
    STALL,
    Extras,
    Fault,
)
from exactlyonce.integration.lab.services import redis as local_redis
from exactlyonce.integration.lab.services.env import PORT_ENV
from tests.crash.harness import (
    ROOT,
    crash_seed,
    holding_epochs,
    input_ids,
    make_input,
    service_passwords,
)
from tests.support.audit import (
    assert_exactly_once,
    assert_forgotten_rewrites,
    install_audit,
    write_counts,
)
from tests.support.private_kafka import free_port
from tests.support.secrets_scan import assert_no_secrets, event_log_conf

pytestmark = [pytest.mark.crash, pytest.mark.integration]

# Sized for the schedule's longest waits: 6 faults, each up to 3 epochs + 2 s after the one
# before, with kills replaying epochs. Seed 760 waits 15 epochs (the point kill's nominal 1
# counted) + 7.4 s in all: with 30 files it ran out before its last fault (MISSED, the test
# failed); with 40 it passes. Its waits are the bound a seed must keep (WAIT_BOUND, in epochs,
# a second counted as 1/EPOCH_S of one): 0.18% of seeds with a hard restart wait longer (the
# longest of 200,000: 16 epochs + 8.4 s), and the test passes them by for the next seed.
FILES, ROWS = 40, 12
EPOCH_S = 0.5
WAIT_BOUND = 15 + 7.41 / EPOCH_S
KILLS, POINT = 6, "mid_copy"
PROXY_KINDS = (LOST_REPLY, REFUSE, STALL)
SERVICES_HOME = "services"  # the private Redis's services home, under the test's tmp_path
SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("amount", LongType()),
        StructField("action", StringType()),
    ]
)
PIPELINE = """\
query_name: {name}
checkpoint: {work}/checkpoint
trigger: {{available_now: true}}
source:
  type: files
  format: json
  path: {work}/input
  schema: "event_id STRING, amount BIGINT, action STRING"
  max_files_per_trigger: 1
sink:
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  id_columns: [event_id]
  shards: 2
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
spark:
  master: local[2]
  conf:
    spark.sql.shuffle.partitions: "2"
    spark.driver.extraJavaOptions: "-XX:TieredStopAtLevel=1"
{event_log}
"""


@pytest.fixture
def private_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A Redis of this test's own (services home, port): the environment the command needs
    to find it as a local service it may restart."""
    home, port = tmp_path / SERVICES_HOME, free_port()
    monkeypatch.setenv(PORT_ENV["redis"], str(port))
    local_redis.start(home)
    yield {
        "EXACTLYONCE_HOME": str(home),
        PORT_ENV["redis"]: str(port),
        "EXACTLYONCE_REDIS_URL": f"redis://127.0.0.1:{port}/0",
    }
    local_redis.stop(home)


def _event_log(work: Path) -> str:
    """The pipeline's Spark settings that write the runs' event log (uncompressed) under
    ``work``, to be scanned for credentials with everything else chaos leaves."""
    conf = event_log_conf(work / "eventlog")
    return "\n".join(f"    {key}: {json.dumps(value)}" for key, value in conf.items())


def _assert_no_credentials(
    work: Path, done: subprocess.CompletedProcess[str], expect: list[str]
) -> None:
    """No form of a service password in chaos's output, its logs (the runs', the drainer's,
    the cluster's and its executors'), Spark's event log, reports or checkpoint. A private
    services home is left out: its ``services.env`` holds the services' URLs on purpose (as
    ``exactlyonce services env`` prints them)."""
    texts = {"chaos stdout": done.stdout, "chaos stderr": done.stderr}
    paths = [path for path in work.iterdir() if path.name != SERVICES_HOME]
    scanned = assert_no_secrets(paths, service_passwords(), texts=texts, expect=expect)
    print(f"credential scan: {len(scanned.files)} files, {scanned.size} bytes")


def _chaos(
    config: Path, env: dict[str, str], *args: str, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "exactlyonce", "chaos", str(config), *args]
    run_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, env=run_env, timeout=timeout)


def _hard_restart_seed() -> int:
    """The first seed from a fresh (or replayed) one whose schedule restarts Redis hard and
    whose waits, in all, fit the input (see :data:`WAIT_BOUND`)."""
    base = crash_seed("chaos schedule")
    extras = Extras(proxy_kinds=PROXY_KINDS, proxy_faults=3)
    for seed in itertools.count(base):
        faults = plan(
            seed, KILLS, (POINT,), ("redis",), server_faults=1, extras=extras, commit_kills=0
        )
        if any(f.kind == SERVER_HARD for f in faults) and _waits(faults) <= WAIT_BOUND:
            return seed
    raise AssertionError("unreachable")


def _waits(faults: list[Fault]) -> float:
    """How long a schedule waits in all, in epochs (a second counted as 1/EPOCH_S of one)."""
    return round(sum(f.epochs + f.delay_s / EPOCH_S for f in faults), 6)


def test_chaos_kills_and_restarts_then_audits_exactly_once(
    tmp_path: Path,
    pg: psycopg.Connection[Any],
    pg_dsn: str,
    unique_name: str,
    private_redis: dict[str, str],
) -> None:
    seed = _hard_restart_seed()
    data = make_input(tmp_path / "input", files=FILES, rows=ROWS, seed=seed)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        PIPELINE.format(name=unique_name, work=tmp_path, event_log=_event_log(tmp_path))
    )
    for statement in create_table_ddl(
        TableName.parse(unique_name), SCHEMA, "record_id", "epoch", unique=True
    ):
        pg.execute(statement)
    install_audit(pg, unique_name)

    began = time.monotonic()
    args = ["--kills", str(KILLS), "--seed", str(seed), "--points", POINT, "--server-faults", "1"]
    args += ["--proxy-faults", "3", "--proxy-kinds", ",".join(PROXY_KINDS)]
    args += ["--commit-kills", "0", "--no-control"]
    report_path = tmp_path / "report.json"
    done = _chaos(
        config,
        private_redis,
        *args,
        "--json",
        str(report_path),
        "--log-dir",
        str(tmp_path / "logs"),
    )
    print(done.stdout[-6000:], done.stderr[-3000:], sep="\n")
    print(f"chaos took {time.monotonic() - began:.0f} s")
    assert done.returncode == 3, done.stderr[-2000:]  # INCONCLUSIVE: no control
    out = done.stdout
    assert f"CHAOS seed {seed} (replay with --seed {seed})" in out.splitlines()[0]
    assert "server faults SKIPPED for the sink at 127.0.0.1:" in out  # the shared PostgreSQL
    assert "CHAOS proxy faults on the sink at 127.0.0.1:" in out
    _assert_no_credentials(tmp_path, done, ["run-*.log", "events_*", "report.json"])
    for n in range(1, KILLS + 1):
        assert f"CHAOS fault {n}/{KILLS} done: " in out, f"fault {n} did not happen"
    assert "MISSED" not in out

    report = json.loads(report_path.read_text())
    assert report["seed"] == seed and report["result"] == "INCONCLUSIVE"
    assert report["not_evidence"] == ["no negative control (--no-control)"]
    assert report["faults_happened"] == KILLS and report["faults_missed"] == 0
    assert (report["pipeline_kills"], report["server_restarts"]) == (2, 1)
    assert report["counts"] == {
        "driver_kills": 1,
        "point_kills": 1,
        "commit_kills": 0,
        "server_hard": 1,
        "server_clean": 0,
        "lost_replies": 1,
        "refusals": 1,
        "stalls": 1,
        "worker_kills": 0,
        "drainer_kills": 0,
    }
    by_kind = {f["kind"]: f for f in report["faults"]}
    assert by_kind["point_kill"]["note"].startswith("SIGKILLed run ")
    assert f"at {POINT}@" in by_kind["point_kill"]["note"]
    assert "SIGKILLed redis" in by_kind["server_hard"]["note"]
    assert "lost the reply" in by_kind[LOST_REPLY]["note"]
    assert "to a COMMIT the server applied" in by_kind[LOST_REPLY]["note"]
    assert "the proxy cut" in by_kind[REFUSE]["note"]
    assert by_kind[STALL]["note"].startswith("the proxy held ")
    assert [s["service"] for s in report["servers"]] == ["redis"]
    audit = report["audit"]
    assert audit["expected_ids"] == len(data.expected_ids)
    assert (audit["duplicates"], audit["missing"], audit["unexpected"]) == (0, 0, 0)
    assert audit["dead_letters"] == audit["expected_dead_letters"] == data.null_keys
    verdict = [line for line in out.splitlines() if line.startswith("CHAOS: ")]
    window = report["commit_window_kills"]
    assert verdict == [
        f"CHAOS: INCONCLUSIVE (seed {seed}, 6 faults: 1 driver kill, 1 named-point kill, "
        f"1 redis restart (1 hard, 0 clean), 1 lost reply, 1 refusal, 1 stall; "
        f"2 pipeline kills ({window} in the commit window), 1 server restart; "
        f"{len(data.expected_ids)} IDs, 0 duplicates, 0 missing, independent read: "
        "0 duplicates, 0 missing; not evidence: no negative control (--no-control))"
    ]
    # The catalog's Redis (no persistence) came back empty: insert mode sends again what it
    # forgot and the unique index absorbs it. The audit counts those committed attempts and
    # checks them exactly; every ID is inserted once.
    holding = holding_epochs(tmp_path / "checkpoint", input_ids(tmp_path / "input"))
    again = assert_forgotten_rewrites(pg, unique_name, holding, shards=2)
    assert_exactly_once(pg, unique_name, data.expected_ids, again)


BUFFERED_PIPELINE = """\
query_name: {name}
checkpoint: {work}/checkpoint
trigger: {{available_now: true}}
source:
  type: files
  format: json
  path: {work}/input
  schema: "event_id STRING, amount BIGINT, action STRING"
  max_files_per_trigger: 1
sink:
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  id_columns: [event_id]
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
  buffer:
    topic: {name}
    bootstrap_servers: ${{KAFKA_BOOTSTRAP_SERVERS}}
    partitions: 2
    batch_size: 15
spark:
  master: local[2]
  conf:
    spark.sql.shuffle.partitions: "2"
    spark.driver.extraJavaOptions: "-XX:TieredStopAtLevel=1"
    spark.executor.extraJavaOptions: "-XX:TieredStopAtLevel=1"
{event_log}
"""


def test_chaos_kills_a_cluster_worker_and_the_drainer_then_audits_exactly_once(
    tmp_path: Path, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """F9 and the drainer under ``exactlyonce chaos``: a buffered PostgreSQL pipeline run on
    a standalone cluster chaos starts (``--cluster``), its drainer going alongside the runs;
    one worker SIGKILLed with its executor (and started again), one SIGKILL of the drainer
    (started again); the sink's own services are shared, so nothing is restarted and no proxy
    is put in front of them (``--no-proxy``, a private empty services home)."""
    seed = crash_seed("chaos worker and drainer")
    data = make_input(tmp_path / "input", files=20, rows=10, seed=seed)
    config = tmp_path / "pipeline.yaml"
    pipeline = BUFFERED_PIPELINE.format(
        name=unique_name, work=tmp_path, event_log=_event_log(tmp_path)
    )
    config.write_text(pipeline)
    load_config(config).build_sink().preflight(SCHEMA)  # the table, to put the audit on
    install_audit(pg, unique_name)

    began = time.monotonic()
    report_path = tmp_path / "report.json"
    args = ["--kills", "2", "--seed", str(seed), "--cluster", "--worker-kills", "1"]
    args += ["--drainer-kills", "1", "--no-proxy", "--server-faults", "0", "--points", ""]
    args += ["--no-control"]
    args += ["--json", str(report_path), "--log-dir", str(tmp_path / "logs")]
    done = _chaos(config, {"EXACTLYONCE_HOME": str(tmp_path / "no-services")}, *args)
    print(done.stdout[-6000:], done.stderr[-3000:], sep="\n")
    print(f"chaos took {time.monotonic() - began:.0f} s")
    assert done.returncode == 3, done.stderr[-2000:]  # INCONCLUSIVE: no control
    out = done.stdout
    assert "CHAOS the runs go to spark://127.0.0.1:" in out
    _assert_no_credentials(tmp_path, done, ["run-*.log", "drain.log", "events_*", "stderr"])
    assert "CHAOS fault 1/2 done: " in out and "CHAOS fault 2/2 done: " in out
    report = json.loads(report_path.read_text())
    counts = {k: v for k, v in report["counts"].items() if v}
    assert counts == {"worker_kills": 1, "drainer_kills": 1}
    assert (report["pipeline_kills"], report["worker_kills"]) == (2, 1)
    by_kind = {f["kind"]: f for f in report["faults"]}
    worker = by_kind["worker_kill"]
    assert worker["note"].startswith(f"SIGKILLed {worker['target']} with its executor (pid ")
    assert by_kind["drainer_kill"]["note"].startswith("SIGKILLed the drainer (pid ")
    audit = report["audit"]
    assert audit["expected_ids"] == len(data.expected_ids)
    assert (audit["duplicates"], audit["missing"], audit["unexpected"]) == (0, 0, 0)
    assert audit["dead_letters"] == audit["expected_dead_letters"] == data.null_keys
    assert f"CHAOS: INCONCLUSIVE (seed {seed}, 2 faults: 1 worker kill, 1 drainer kill; " in out
    writes = write_counts(pg, unique_name)  # the audit trigger: attempts, not rows
    assert set(writes) == data.expected_ids and set(writes.values()) == {1}


APPEND_PIPELINE = """\
query_name: {name}
checkpoint: {work}/checkpoint
trigger: {{available_now: true}}
source:
  type: files
  format: json
  path: {work}/input
  schema: "event_id STRING, amount BIGINT, action STRING"
  max_files_per_trigger: 1
sink:
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  id_columns: [event_id]
  mode: append
  shards: 2
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
spark:
  master: local[2]
  conf:
    spark.sql.shuffle.partitions: "2"
    spark.driver.extraJavaOptions: "-XX:TieredStopAtLevel=1"
{event_log}
"""


def test_the_control_shows_duplicates_under_the_schedule_where_ours_shows_none(
    tmp_path: Path, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """The negative control: PostgreSQL in append mode (no unique index: a second write is a
    second row), two kills, one aimed at the commit window (the run SIGKILLed as its commit
    becomes visible: a NOTIFY from a trigger on the table) and one at ``after_head`` (after
    the head advanced, before Spark's commit log). The same schedule runs against a plain
    ``foreachBatch`` that COPYs each batch into a table of its own: there a batch whose
    commit Spark never logged is written again, and the duplicates must show; in ours none
    may. Both are read with plain SQL; ours' writes are counted with an audit trigger."""
    seed = crash_seed("chaos negative control")
    data = make_input(tmp_path / "input", files=16, rows=10, seed=seed)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        APPEND_PIPELINE.format(name=unique_name, work=tmp_path, event_log=_event_log(tmp_path))
    )
    load_config(config).build_sink().preflight(SCHEMA)  # the table, to put the audit on
    install_audit(pg, unique_name)

    began = time.monotonic()
    report_path = tmp_path / "report.json"
    args = ["--kills", "2", "--seed", str(seed), "--commit-kills", "1", "--points", "after_head"]
    args += ["--no-proxy", "--server-faults", "0"]
    args += ["--json", str(report_path), "--log-dir", str(tmp_path / "logs")]
    done = _chaos(config, {"EXACTLYONCE_HOME": str(tmp_path / "no-services")}, *args)
    print(done.stdout[-8000:], done.stderr[-3000:], sep="\n")
    print(f"chaos took {time.monotonic() - began:.0f} s")
    assert done.returncode == 0, done.stderr[-2000:]
    # the control's runs and logs too (the runs get the DSN only through the environment)
    _assert_no_credentials(tmp_path, done, ["run-*.log", "events_*", "report.json"])
    report = json.loads(report_path.read_text())
    assert report["result"] == "EXACTLY ONCE" and report["not_evidence"] == []
    assert (report["sink"], report["write_mode"]) == ("postgres", "append")
    assert report["reader"].startswith("psycopg SQL")
    # the kills as scheduled, on both sides: every one happened, none is a server's
    control = report["control"]
    for side in (report, control):
        assert (side["pipeline_kills"], side["server_restarts"], side["faults_missed"]) == (2, 0, 0)
        assert {k: v for k, v in side["counts"].items() if v} == {
            "point_kills": 1,
            "commit_kills": 1,
        }
        # the after_head kill is in the window by construction; the other most often
        assert side["commit_window_kills"] >= 1
        points = [f for f in side["faults"] if f["kind"] == "point_kill"]
        assert [f["in_window"] for f in points] == [True]
    assert report["commit_window_kills"] == sum(f["in_window"] for f in report["faults"])
    # ours: exactly once, to both readers and to the write counts; the control: duplicates
    assert (report["duplicates"], report["missing"], report["unexpected"]) == (0, 0, 0)
    assert report["ids"] == len(data.expected_ids)
    assert report["audit"]["duplicates"] == 0 and report["audit"]["missing"] == 0
    assert report["control_duplicates"] > 0, control
    assert control["independent"]["missing"] == 0
    writes = write_counts(pg, unique_name)
    assert set(writes) == data.expected_ids and set(writes.values()) == {1}
    verdict = [line for line in done.stdout.splitlines() if line.startswith("CHAOS: ")]
    assert verdict[0].startswith(f"CHAOS: EXACTLY ONCE (seed {seed}, 2 faults: ")
    assert f"; control: {report['control_duplicates']} duplicates, " in verdict[0]
