"""``exactlyonce chaos`` on an OpenSearch pipeline, against a genuine OpenSearch node
(tests/support/opensearch_node.py), with ``op_type: index``: a second write of a record is a
new ``_version`` of its document, which the independent reader (raw HTTP scroll with
``version: true``) counts as a duplicate.

Three faults: a SIGKILL at the named point ``mid_bulk`` (half a task's bulk sent), one aimed
at the commit window (the run SIGKILLed as its bulk's documents become visible), and a lost
reply to a ``_bulk`` the node applied (through chaos's fault proxy). The same schedule runs
against the negative control (a plain ``_bulk`` of each batch, without ``_id``), which must
show duplicates where ours shows none. The node is not a service chaos may restart (it is
the test's own): the command must say it skipped it.

The input is sized for the faster side, the control: a fault waits up to 3 epochs + 2 s and
then for a commit, about 10 of the control's epochs per run, so three runs need ~21 files;
with 16, a control whose commit kill landed late ran out of input before its lost reply was
armed, and chaos rightly called the cell INCONCLUSIVE (seed 416356559).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.crash.harness import crash_seed, make_input
from tests.crash.test_chaos_command import _assert_no_credentials, _chaos, _event_log
from tests.support.opensearch_node import OpenSearchNode

pytestmark = [pytest.mark.crash, pytest.mark.integration]

FILES = 32  # enough input for the control's three runs to reach every fault (see above)

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
  type: opensearch
  hosts: ["{url}"]
  index: {name}
  op_type: index
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


def test_chaos_on_a_genuine_opensearch_node_ends_exactly_once_where_the_control_doubles(
    tmp_path: Path, opensearch: OpenSearchNode, unique_name: str
) -> None:
    seed = crash_seed("chaos opensearch")
    data = make_input(tmp_path / "input", files=FILES, rows=10, seed=seed)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        PIPELINE.format(
            name=unique_name.lower(),
            work=tmp_path,
            url=opensearch.url,
            event_log=_event_log(tmp_path),
        )  # fmt: skip
    )
    report_path = tmp_path / "report.json"
    args = ["--kills", "3", "--seed", str(seed), "--points", "mid_bulk", "--commit-kills", "1"]
    args += ["--server-faults", "0", "--proxy-faults", "1", "--proxy-kinds", "lost_reply"]
    args += ["--json", str(report_path), "--log-dir", str(tmp_path / "logs")]
    done = _chaos(config, {"EXACTLYONCE_HOME": str(tmp_path / "no-services")}, *args)
    print(done.stdout[-8000:], done.stderr[-3000:], sep="\n")
    assert done.returncode == 0, done.stderr[-2000:]
    _assert_no_credentials(tmp_path, done, ["run-*.log", "events_*", "report.json"])
    report = json.loads(report_path.read_text())
    assert report["result"] == "EXACTLY ONCE" and report["not_evidence"] == []
    assert (report["sink"], report["write_mode"]) == ("opensearch", "index")
    assert report["reader"].startswith("raw HTTP scroll with _version")
    for side in (report, report["control"]):
        assert (side["pipeline_kills"], side["server_restarts"], side["faults_missed"]) == (2, 0, 0)
        assert {k: v for k, v in side["counts"].items() if v} == {
            "point_kills": 1,
            "commit_kills": 1,
            "lost_replies": 1,
        }
    assert (report["duplicates"], report["missing"], report["unexpected"]) == (0, 0, 0)
    assert report["ids"] == len(data.expected_ids)
    assert report["control_duplicates"] > 0, report["control"]
    assert "opensearch" in done.stdout and "skipped" in done.stdout.lower()
