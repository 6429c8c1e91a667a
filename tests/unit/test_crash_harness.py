"""The crash harness's own checks can fail: a password in a run's log or in Spark's event
log is caught, and a job that left no event log fails the scan."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from tests.crash.harness import Job, service_passwords
from tests.support.realtime import remove_first_epoch_leftovers


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Job:
    monkeypatch.setenv("EXACTLYONCE_PG_DSN", "postgresql://u:s3cret%2Fpw@127.0.0.1:5432/db")
    monkeypatch.setenv("EXACTLYONCE_REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.delenv("EXACTLYONCE_SINK_REDIS_URL", raising=False)
    assert service_passwords() == ["s3cret/pw"]
    (tmp_path / "run-1.log").write_text("connecting to postgresql://u:***@127.0.0.1/db\n")
    return Job(tmp_path, "t", "", env={"SINK_URL": "redis://:sink-pw@127.0.0.1:1/0"})


def test_a_password_in_a_run_log_fails_the_job(job: Job) -> None:
    with pytest.raises(AssertionError, match="no non-empty file matches"):
        job.assert_no_credentials()  # no event log: the scan proves too little
    event_log = job.workdir / "eventlog" / "eventlog_v2_local-1" / "events_1_local-1"
    event_log.parent.mkdir(parents=True)
    event_log.write_text('{"Event":"SparkListenerLogStart"}\n')
    assert job.assert_no_credentials().names() == ["events_1_local-1", "run-1.log"]
    (job.workdir / "run-2.log").write_text("connecting to postgresql://u:s3cret%2Fpw@db\n")
    with pytest.raises(AssertionError, match="run-2.log:1 shows secret #0"):
        job.assert_no_credentials()
    (job.workdir / "run-2.log").unlink()
    event_log.write_text(f'{{"url":"redis://:{quote("sink-pw")}@h"}}\n')
    with pytest.raises(AssertionError, match="events_1_local-1:1 shows secret #1"):
        job.assert_no_credentials()


def test_a_first_epoch_temp_offset_file_spark_left_is_removed(tmp_path: Path) -> None:
    """In Real-time Mode Spark writes offsets/N at epoch N's end, through a temp file renamed
    into place; a SIGKILL between the two leaves only the temp file, and Spark then refuses
    to start (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY). Only such leftovers go."""
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    leftovers = [".0.6f1c.tmp", "..0.6f1c.tmp.crc"]
    for name in leftovers:
        (offsets / name).write_text("partial")
    assert sorted(remove_first_epoch_leftovers(tmp_path)) == sorted(
        f"offsets/{name}" for name in leftovers
    )
    assert list(offsets.iterdir()) == []


def test_a_first_epoch_temp_commit_file_goes_even_beside_a_written_offset(tmp_path: Path) -> None:
    """A SIGKILL while Spark renames commits/0 into place leaves offsets/0 and only a temp
    commit file: Spark then drops offsets/0 (no batch committed) and refuses the commits
    directory (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY, seen in CI). The temp commit goes;
    offsets/0 stays for Spark to drop."""
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1")
    commits = tmp_path / "commits"
    commits.mkdir()
    leftovers = [".0.3fc2.tmp", "..0.3fc2.tmp.crc"]
    for name in leftovers:
        (commits / name).write_text("v1")
    assert sorted(remove_first_epoch_leftovers(tmp_path)) == sorted(
        f"commits/{name}" for name in leftovers
    )
    assert list(commits.iterdir()) == []
    assert [p.name for p in (tmp_path / "offsets").iterdir()] == ["0"]


def test_temp_files_beside_a_written_batch_stay(tmp_path: Path) -> None:
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    commits = tmp_path / "commits"
    commits.mkdir()
    for name in ("0", ".0.crc", ".1.6f1c.tmp"):
        (offsets / name).write_text("v1")
        (commits / name).write_text("v1")
    assert remove_first_epoch_leftovers(tmp_path) == []
    assert len(list(offsets.iterdir())) == 3
    assert len(list(commits.iterdir())) == 3
    assert remove_first_epoch_leftovers(tmp_path / "missing") == []
