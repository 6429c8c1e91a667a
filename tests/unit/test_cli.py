"""The ``exactlyonce`` command: bad configuration fails fast, before any Spark work."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactlyonce.integration import cli

BAD = """\
query_name: q
checkpoint: /tmp/never-used
source: {type: files, path: /tmp/never-used, schema: "event_id STRING"}
sink: {type: postgres, dsn: "postgresql://u:hunter2@nowhere/db", id_columns: [event_id]}
"""


@pytest.fixture(autouse=True)
def restore_environ() -> Iterator[None]:
    """main() fills unset service variables from services.env; keep that out of other tests."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def bad_config(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    return path


def test_run_bad_config_exits_2_naming_the_field(
    bad_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", str(bad_config)]) == 2
    err = capsys.readouterr().err
    assert "config error: sink.table:" in err
    assert "hunter2" not in err


def test_run_as_a_process_fails_on_bad_config_before_any_jvm(bad_config: Path) -> None:
    """No Java reachable (JAVA_HOME nowhere, no java on PATH): a run that started Spark first
    would fail on the missing JVM, not with the config error."""
    no_java = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not shutil.which("java", path=d)
    ]
    env = {**os.environ, "JAVA_HOME": "/nonexistent-java-home", "PATH": os.pathsep.join(no_java)}
    result = subprocess.run(
        [sys.executable, "-m", "exactlyonce", "run", str(bad_config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 2, result.stderr
    assert "config error: sink.table:" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(tmp_path / "absent.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_reset_head_refuses_without_yes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(BAD.replace("id_columns: [event_id]", "table: t, id_columns: [event_id]"))
    assert cli.main(["reset-head", str(path)]) == 2
    assert "--yes" in capsys.readouterr().err


def test_failure_summary_keeps_the_python_error() -> None:
    text = (
        "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function.\n"
        "org.apache.spark.SparkException: boom\n"
        '  File "x.py", line 1, in f\n'
        "exactlyonce.errors.CheckpointResetError: postgres:public.t: use a new "
        "query_name\n"
        "\tat org.apache.spark.Foo(Foo.scala:1)\n"
    )
    summary = cli.run._summarize(text)
    assert summary == (
        "exactlyonce.errors.CheckpointResetError: postgres:public.t: use a new query_name"
    )
