"""The sink's start refuses, in one sentence and before any task writes, Spark Python
workers that cannot import exactlyonce (deliverable 7 of issue 15).

The workers' Python is a wrapper around this venv's interpreter run with ``-S`` (no site:
the editable install's ``.pth`` is not read) and a PYTHONPATH without any directory that
holds the package, plus site-packages for pyspark and pyarrow: pyspark starts, exactlyonce
is not importable, as for a venv's python that was never activated.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("worker_probe_job.py")

WRAPPER = """#!/bin/sh
new=""
IFS=:
for p in $PYTHONPATH; do [ -d "$p/exactlyonce" ] || new="$new${{new:+:}}$p"; done
PYTHONPATH="$new:{site}"
export PYTHONPATH
exec {python} -S "$@"
"""


def run_job(tmp_path: Path, bad: str, good: str, dsn: str, table: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": bad}
    done = subprocess.run(
        [sys.executable, str(JOB), bad, good, dsn, table],
        cwd=tmp_path,  # not the worktree: a worker's sys.path[0] must not hold the package
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout


def test_workers_without_exactlyonce_are_refused_before_any_write(
    tmp_path: Path, pg_dsn: str
) -> None:
    wrapper = tmp_path / "python-without-exactlyonce"
    site = sysconfig.get_paths()["purelib"]
    wrapper.write_text(WRAPPER.format(site=site, python=sys.executable))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    table = f"probe_{uuid.uuid4().hex[:8]}"

    out = run_job(tmp_path, str(wrapper), sys.executable, pg_dsn, table)
    refused = [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 1, out
    message = refused[0]
    assert f"(started as {wrapper}) run {sys.executable}" in message
    assert "cannot import exactlyonce (ModuleNotFoundError: No module named 'exactlyonce')" in (
        message
    )
    assert "PYSPARK_PYTHON or spark.pyspark.python" in message
    assert "exactlyonce.integration.spark.session()" in message
    assert message.count(". ") == 0  # one sentence
    # no task ran the writer: the refusal came before the preflight, so not even the table
    # exists; the second session (workers on this venv's python) then created and wrote it
    assert "TABLE_AFTER_REFUSAL False" in out.splitlines(), out
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith("PROBE"))
    print(f"worker probe cost: {lines['PROBE_MS']} ms (first batch of a start)")
    assert lines["PROBE_MS_AGAIN"] == lines["PROBE_MS"]  # cached for the start
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (2,)
        conn.execute(f"DROP TABLE {table}")
