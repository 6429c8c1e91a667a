"""The credential scanner can fail: every form of a planted password is caught, and a scan
of nothing, of no secret or of a file it cannot read fails."""

from __future__ import annotations

import base64
import gzip
from pathlib import Path

import pytest

from tests.support.secrets_scan import assert_no_secrets, secret_forms, url_passwords

PW = "p@ss/w+rd s3cret"


@pytest.mark.parametrize("form", list(secret_forms(PW)))
def test_every_form_of_a_planted_password_is_caught(tmp_path: Path, form: str) -> None:
    log = tmp_path / "logs" / "events_1_local-1"
    log.parent.mkdir()
    planted = secret_forms(PW)[form]
    log.write_bytes(b'{"Event":"SparkListenerEnvironmentUpdate","x":"' + planted + b'"}\n')
    with pytest.raises(AssertionError) as caught:
        assert_no_secrets([tmp_path], [PW])
    assert "events_1_local-1:1 shows secret #0" in str(caught.value)
    assert PW not in str(caught.value) and planted.decode() not in str(caught.value)


def test_a_password_inside_a_basic_auth_header_is_caught(tmp_path: Path) -> None:
    for user in ("u", "us", "use"):  # each byte offset of the password in the encoding
        token = base64.b64encode(f"{user}:{PW}".encode()).decode()
        with pytest.raises(AssertionError, match="base64"):
            assert_no_secrets([], [PW], texts={"stderr": f"Authorization: Basic {token}\n"})


def test_a_clean_scan_says_what_it_scanned(tmp_path: Path) -> None:
    (tmp_path / "run-1.log").write_text("connecting to postgresql://u:***@db/app\n")
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "events_1.gz").write_bytes(gzip.compress(b'{"Event":"x"}\n'))
    scanned = assert_no_secrets([tmp_path], [PW, None], expect=["run-*.log", "events_*"])
    assert scanned.names() == ["events_1.gz", "run-1.log"]
    with pytest.raises(AssertionError, match="no non-empty file matches"):
        assert_no_secrets([tmp_path], [PW], expect=["empty*"])


def test_a_gzipped_log_is_read_and_a_zstd_one_refused(tmp_path: Path) -> None:
    (tmp_path / "events_1.gz").write_bytes(gzip.compress(PW.encode()))
    with pytest.raises(AssertionError, match="events_1.gz:1 shows secret #0"):
        assert_no_secrets([tmp_path], [PW])
    (tmp_path / "events_1.gz").unlink()
    (tmp_path / "events_1.zstd").write_bytes(b"(\xb5/\xfd")
    with pytest.raises(AssertionError, match="compressed"):
        assert_no_secrets([tmp_path], [PW])


def test_a_scan_of_nothing_or_for_nothing_fails(tmp_path: Path) -> None:
    (tmp_path / "empty.log").write_text("")
    with pytest.raises(AssertionError, match="a scan of nothing"):
        assert_no_secrets([tmp_path, tmp_path / "missing"], [PW], texts={"stdout": ""})
    (tmp_path / "run-1.log").write_text("fine\n")
    with pytest.raises(AssertionError, match="no secret to look for"):
        assert_no_secrets([tmp_path], [None, ""])


def test_url_passwords_are_unquoted() -> None:
    urls = ["postgresql://u:p%40ss@db/app", "redis://127.0.0.1:6379/0", None]
    assert url_passwords(*urls) == ["p@ss"]


def test_a_log_renamed_while_scanned_is_scanned_under_its_new_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's JVM renames its event log from ``.inprogress`` as it ends: a file that
    vanished while the scan ran makes it start again, and the new name is read."""
    from tests.support import secrets_scan

    log = tmp_path / "events_1.inprogress"
    log.write_text(f"leaked {PW}\n")
    real_read = secrets_scan._read

    def renamed_once(path: Path) -> bytes:
        if path.name.endswith(".inprogress"):
            path.rename(path.with_suffix(""))
        return real_read(path)

    monkeypatch.setattr(secrets_scan, "_read", renamed_once)
    with pytest.raises(AssertionError, match=r"events_1:1 shows secret #0"):
        assert_no_secrets([tmp_path], [PW])
