"""A sink of one's own, joined through the registry with no edit outside its package: the
in-memory sink of ``exactlyonce.testing`` (its store a file, so Spark's Python workers reach
it), named by an ``exactlyonce.sinks`` entry point as an installed sink package would be,
runs with ``exactlyonce run``, ``exactlyonce drain`` behind the Kafka buffer, and
``exactlyonce audit`` in subprocesses, exactly as a built-in sink does.

The audit counts committed writes per record ID (the store counts every row a committing step
tried to write, as a ``BEFORE INSERT`` trigger would), so a second write shows even in
``mode: insert``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exactlyonce.dedup.ids import record_id
from exactlyonce.testing import FileStore

pytestmark = pytest.mark.integration

RUN_TIMEOUT_S = 300
EVENTS = 40

PIPELINE = """\
query_name: {name}
checkpoint: {work}/checkpoint
trigger: {{available_now: true}}
source:
  type: files
  format: json
  path: {work}/input
  schema: "event_id STRING, n BIGINT"
  max_files_per_trigger: 1
sink:
  type: memory
  path: {work}/store.pickle
  table: events
  mode: {mode}
  id_columns: [event_id]
  shards: 2
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
{buffer}
spark:
  master: local[2]
  conf: {{spark.sql.shuffle.partitions: "2"}}
"""

BUFFER = """\
  buffer:
    topic: {name}
    bootstrap_servers: ${{KAFKA_BOOTSTRAP_SERVERS}}
    partitions: 2
"""


def install_plugin(root: Path) -> Path:
    """A distribution's metadata naming the memory sink in the ``exactlyonce.sinks`` entry
    point group (what ``pip install`` of a sink package leaves), on a path of its own."""
    dist = root / "exactlyonce_memory_sink-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: exactlyonce-memory-sink\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        "[exactlyonce.sinks]\nmemory = exactlyonce.testing.kind:KIND\n"
    )
    return root


def write_input(work: Path) -> dict[str, list[str]]:
    """Four files of events, one event produced twice (the catalog drops the second)."""
    (work / "input").mkdir(parents=True)
    events = [{"event_id": f"e{i}", "n": i} for i in range(EVENTS)]
    events.append(events[3])  # an at-least-once upstream
    for k in range(4):
        lines = [json.dumps(e) for e in events[k::4]]
        (work / "input" / f"part-{k}.json").write_text("\n".join(lines) + "\n")
    (work / "expected.txt").write_text("".join(f"e{i}\n" for i in range(EVENTS)))
    return {record_id([f"e{i}"]): [f"e{i}"] for i in range(EVENTS)}


def exactlyonce(work: Path, plugins: Path, services: dict[str, str], *args: str) -> str:
    env = {**os.environ, **services}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugins), env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "exactlyonce", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout


@pytest.mark.parametrize("buffered", [False, True], ids=["direct", "buffered"])
def test_an_installed_sink_runs_drains_and_audits_exactly_once(
    tmp_path: Path, services: dict[str, str], unique_name: str, buffered: bool
) -> None:
    plugins = install_plugin(tmp_path / "plugins")
    expected = write_input(tmp_path)
    buffer = BUFFER.format(name=unique_name) if buffered else ""
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        PIPELINE.format(name=unique_name, work=tmp_path, mode="append", buffer=buffer)
    )

    exactlyonce(tmp_path, plugins, services, "run", "pipeline.yaml")
    if buffered:
        exactlyonce(tmp_path, plugins, services, "drain", "pipeline.yaml", "--until-idle", "2")
    report = json.loads(
        exactlyonce(
            tmp_path,
            plugins,
            services,
            "audit",
            "pipeline.yaml",
            "--expected-ids",
            "expected.txt",
            "--json",
        )
    )

    assert report["ok"] is True, report
    store = FileStore(tmp_path / "store.pickle")
    with store.lock:
        rows = store.rows("events")
        writes = dict(store.committed_writes)
    assert sorted(r["record_id"] for r in rows) == sorted(expected)
    assert writes == {rid: 1 for rid in expected}  # the duplicate event never reached it
    assert {r["event_id"]: r["n"] for r in rows} == {f"e{i}": i for i in range(EVENTS)}
