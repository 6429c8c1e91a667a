"""``exactlyonce chaos --events`` on the pipeline users run: a Kafka source into PostgreSQL
(``mode: append``: a second write is a second row). chaos creates the source topic, produces
a seeded input with at-least-once duplicates and null keys into it before the first run, and
the runs read it 40 records at a time (``max_offsets_per_trigger``: about 16 batches). One
kill, aimed at the commit window (the run SIGKILLed as its commit becomes visible): ours must
end exactly once, and the same kill against the negative control (a plain ``foreachBatch``
reading the same topic) must show duplicates. Every scheduled fault is asserted to have
happened. Run with IDs from the key column, then from the source (``id_from: source``: every record
produced is an ID, its coordinates from the producer's delivery reports).

The batches are sized so the kill cannot outlive the input: it waits up to 3 epochs + 2 s
(about 6 more epochs of ~0.33 s) and then for a commit, so a run needs ~10 batches; at 100
records a trigger (7 batches) seed 969 ran out first on both sides (INCONCLUSIVE)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.crash.harness import crash_seed
from tests.crash.test_chaos_command import _chaos, _event_log

pytestmark = [pytest.mark.crash, pytest.mark.integration]

EVENTS = 150
PIPELINE = """\
query_name: {name}
checkpoint: {work}/checkpoint
trigger: {{available_now: true}}
source:
  type: kafka
  bootstrap_servers: ${{KAFKA_BOOTSTRAP_SERVERS}}
  topic: {name}-in
  max_offsets_per_trigger: 40
  schema: "event_id STRING, user_id BIGINT, action STRING"
sink:
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  {identity}
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
IDENTITIES = {"columns": "id_columns: [event_id]", "source": "id_from: source"}


@pytest.mark.parametrize("identity", sorted(IDENTITIES))
def test_chaos_feeds_a_kafka_source_and_the_control_doubles_where_ours_does_not(
    tmp_path: Path, services: dict[str, str], unique_name: str, identity: str
) -> None:
    seed = crash_seed("chaos kafka source")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        PIPELINE.format(
            name=unique_name,
            work=tmp_path,
            identity=IDENTITIES[identity],
            event_log=_event_log(tmp_path),
        )
    )
    began = time.monotonic()
    report_path = tmp_path / "report.json"
    args = ["--events", str(EVENTS), "--kills", "1", "--commit-kills", "1", "--points", ""]
    args += ["--seed", str(seed), "--no-proxy", "--server-faults", "0"]
    args += ["--json", str(report_path), "--log-dir", str(tmp_path / "logs")]
    done = _chaos(config, {"EXACTLYONCE_HOME": str(tmp_path / "no-services")}, *args)
    print(done.stdout[-8000:], done.stderr[-3000:], sep="\n")
    print(f"chaos took {time.monotonic() - began:.0f} s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"topic {unique_name}-in (4 partitions)" in done.stdout
    report = json.loads(report_path.read_text())
    assert report["result"] == "EXACTLY ONCE" and report["not_evidence"] == []
    for side in (report, report["control"]):
        assert (side["pipeline_kills"], side["faults_missed"]) == (1, 0)
        assert {k: v for k, v in side["counts"].items() if v} == {"commit_kills": 1}
    assert (report["duplicates"], report["missing"], report["unexpected"]) == (0, 0, 0)
    produced = len((tmp_path / "logs" / "expected-ids.txt").read_text().splitlines())
    assert report["ids"] == (EVENTS if identity == "columns" else produced) > 0
    assert report["audit"]["duplicates"] == 0 and report["audit"]["missing"] == 0
    assert report["control_duplicates"] > 0, report["control"]
    assert report["control"]["independent"]["missing"] == 0
