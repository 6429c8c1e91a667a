"""No `exactlyonce` subcommand prints a credential (DESIGN invariant 8; issue 16).

Every subcommand runs as a real subprocess with the test services' passwords in its
environment and pipeline file, on its success path and on its failure paths (a wrong
password, an unreachable host), and its stdout and stderr are searched for every password it
was given, in every form (:mod:`tests.support.secrets_scan`); so is every file the commands
leave in the work directory, Spark's event log of the runs included. ``services env`` is left
out on purpose: printing the local services' URLs for a shell to ``eval`` is its job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.crash.harness import service_passwords
from tests.support.secrets_scan import assert_no_secrets, event_log_conf

pytestmark = pytest.mark.integration

WRONG_PG_PASSWORD = "wr0ng-pg-s3cret"
REDIS_PASSWORD = "r3dis-s3cret-pw"
UNREACHABLE = "127.0.0.1:1"

PIPELINE = """
query_name: {name}
checkpoint: {workdir}/checkpoint
trigger: {{available_now: true}}
source:
  type: files
  format: json
  path: {workdir}/input
  schema: "event_id STRING, n BIGINT"
sink:
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {name}
  id_columns: [event_id]
  shards: 2
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
spark:
  master: local[1]
  conf: {conf}
"""


def with_password(url: str, password: str, netloc: str | None = None) -> str:
    parts = urlsplit(url)
    user = parts.username or ""
    host = netloc or f"{parts.hostname}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def exactlyonce(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exactlyonce", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_silent(result: subprocess.CompletedProcess[str], secrets: list[str]) -> None:
    """Neither output of the command shows any form of a password (and it printed
    something: a scan of nothing fails)."""
    command = " ".join(str(a) for a in result.args[3:5])
    texts = {f"{command} stdout": result.stdout, f"{command} stderr": result.stderr}
    assert_no_secrets([], secrets, texts=texts)


@pytest.fixture
def workdir(tmp_path: Path, unique_name: str) -> Path:
    (tmp_path / "input").mkdir()
    lines = [json.dumps({"event_id": f"e{i}", "n": i}) for i in range(50)]
    (tmp_path / "input" / "part-0.json").write_text("\n".join(lines) + "\n")
    (tmp_path / "ids.txt").write_text("\n".join(f"e{i}" for i in range(50)) + "\n")
    # Spark's event log of every run, uncompressed, to be scanned too.
    conf = {"spark.sql.shuffle.partitions": "2", **event_log_conf(tmp_path / "eventlog")}
    pipeline = PIPELINE.format(name=unique_name, workdir=tmp_path, conf=json.dumps(conf))
    (tmp_path / "pipeline.yaml").write_text(pipeline)
    return tmp_path


def test_no_subcommand_prints_a_password_on_success_or_failure(
    workdir: Path, services: dict[str, str]
) -> None:
    real = service_passwords()
    assert real, "the test services have no password to look for"
    base = {**os.environ, **services, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    secrets = [*real, WRONG_PG_PASSWORD, REDIS_PASSWORD]
    pipeline, ids = str(workdir / "pipeline.yaml"), str(workdir / "ids.txt")
    pg = services["EXACTLYONCE_PG_DSN"]
    url = f"{pg}?table={workdir.name}"
    wrong_pg = {"EXACTLYONCE_PG_DSN": with_password(pg, WRONG_PG_PASSWORD)}
    no_pg = {"EXACTLYONCE_PG_DSN": with_password(pg, urlsplit(pg).password or "", UNREACHABLE)}
    no_redis = {"EXACTLYONCE_REDIS_URL": f"redis://:{REDIS_PASSWORD}@{UNREACHABLE}/0"}
    run = exactlyonce(base, "run", pipeline, cwd=workdir)  # first: the others read its output
    assert_silent(run, secrets)
    assert run.returncode == 0, run.stderr[-2000:]
    cases: list[tuple[dict[str, str], list[str], int | None]] = [
        ({}, ["check", pipeline], 0),
        ({}, ["check", pipeline, "--json"], 0),
        ({}, ["heads", pipeline], 0),
        ({}, ["heads", pipeline, "--json"], 0),
        ({}, ["heads", url, "--query-name", workdir.name], 0),
        ({}, ["audit", pipeline, "--expected-ids", ids], 0),
        ({}, ["audit", pipeline, "--expected-ids", ids, "--json"], 0),
        ({}, ["drain", pipeline, "--until-idle", "1"], 2),  # not buffered: refused
        ({}, ["services", "status"], None),
        (wrong_pg, ["check", pipeline], 1),
        (wrong_pg, ["run", pipeline], 2),
        (wrong_pg, ["heads", pipeline], 2),
        (wrong_pg, ["audit", pipeline, "--expected-ids", ids], 2),
        (wrong_pg, ["rewind", pipeline, "--to-epoch", "0", "--yes"], 2),
        (wrong_pg, ["reset-head", pipeline, "--yes"], 2),
        (
            no_pg,
            ["heads", with_password(pg, "x", UNREACHABLE) + "?table=t", "--query-name", "q"],
            2,
        ),
        (no_pg, ["audit", pipeline, "--expected-ids", ids, "--json"], 2),
        (no_redis, ["check", pipeline], 1),
        (no_redis, ["heads", pipeline], 2),
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda c: exactlyonce({**base, **c[0]}, *c[1], cwd=workdir), cases))
    for (_, args, code), result in zip(cases, results, strict=True):
        assert_silent(result, secrets)
        if code is not None:
            assert result.returncode == code, (args, result.returncode, result.stderr[-1500:])
        assert "Traceback" not in result.stderr, (args, result.stderr[-1500:])
    # Last, as they change the head: a rewind (to the head: refused, nothing to do), a reset.
    for args, code in (
        (["rewind", pipeline, "--to-epoch", "0", "--yes"], 2),
        (["reset-head", pipeline, "--yes"], 0),
    ):
        result = exactlyonce(base, *args, cwd=workdir)
        assert_silent(result, secrets)
        assert result.returncode == code, (args, result.stderr[-1500:])
    # What the commands left: Spark's event log, the checkpoint, the pipeline file.
    assert_no_secrets([workdir], secrets, expect=["events_*"])
