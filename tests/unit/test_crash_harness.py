"""The crash harness's own checks can fail: a password in a run's log or in Spark's event
log is caught, and a job that left no event log fails the scan."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from tests.crash.harness import Job, service_passwords


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
