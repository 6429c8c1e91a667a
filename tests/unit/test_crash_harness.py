"""The crash harness's own checks can fail: a password in a run's log is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.harness import Job, service_passwords


def test_a_password_in_a_run_log_fails_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXACTLYONCE_PG_DSN", "postgresql://u:s3cret-pw@127.0.0.1:5432/db")
    monkeypatch.setenv("EXACTLYONCE_REDIS_URL", "redis://127.0.0.1:6379/0")
    assert service_passwords() == ["s3cret-pw"]
    job = Job(tmp_path, "t", "")
    (tmp_path / "run-1.log").write_text("connecting to postgresql://u:***@127.0.0.1/db\n")
    job.assert_no_credentials()
    (tmp_path / "run-2.log").write_text("connecting to postgresql://u:s3cret-pw@127.0.0.1/db\n")
    with pytest.raises(AssertionError, match="run-2.log shows a service password"):
        job.assert_no_credentials()
