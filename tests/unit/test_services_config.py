"""Pure unit tests of the services config (no service is started): env-file parsing, the
rule that environment variables win over the env file, and password masking."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from exactlyonce.integration.envfile import (
    ENV_FILE,
    ENV_KEYS,
    format_env_file,
    parse_env_file,
    service_env,
    write_env_file,
)
from exactlyonce.integration.lab import services
from exactlyonce.integration.lab.services import describe, local_env, mask_dsn
from exactlyonce.integration.lab.services import postgres as pg_service

FILE_VALUES = {
    "EXACTLYONCE_PG_DSN": "postgresql://exactlyonce:eo-local-pw@127.0.0.1:54329/exactlyonce",
    "EXACTLYONCE_REDIS_URL": "redis://127.0.0.1:63790/0",
    "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:19092",
}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's or CI's own settings must not leak into these tests."""
    for key in (*ENV_KEYS, "EXACTLYONCE_HOME", *services.PORT_ENV.values()):
        monkeypatch.delenv(key, raising=False)


def test_parse_env_file_skips_comments_and_keeps_equals_in_values() -> None:
    text = (
        "# written by services up\n"
        "\n"
        "EXACTLYONCE_PG_DSN=postgresql://u:p@h:1/db?options=-c%20x=1\n"
        "export KAFKA_BOOTSTRAP_SERVERS='127.0.0.1:19092'\n"
        '  EXACTLYONCE_REDIS_URL = "redis://127.0.0.1:63790/0"  \n'
        "not a pair\n"
    )
    assert parse_env_file(text) == {
        "EXACTLYONCE_PG_DSN": "postgresql://u:p@h:1/db?options=-c%20x=1",
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:19092",
        "EXACTLYONCE_REDIS_URL": "redis://127.0.0.1:63790/0",
    }


def test_format_and_parse_round_trip() -> None:
    text = format_env_file(FILE_VALUES)
    assert text.splitlines() == [f"{k}={v}" for k, v in FILE_VALUES.items()]
    assert parse_env_file(text) == FILE_VALUES


def test_local_env_uses_port_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A home without ports.json: the checkout's own (services up moved to free ports because
    # another checkout's services held the defaults) must not decide what this test sees.
    monkeypatch.setenv("EXACTLYONCE_HOME", str(tmp_path))
    assert local_env() == FILE_VALUES
    monkeypatch.setenv("EXACTLYONCE_PG_PORT", "6000")
    monkeypatch.setenv("EXACTLYONCE_KAFKA_PORT", "6001")
    values = local_env()
    assert values["EXACTLYONCE_PG_DSN"].endswith("@127.0.0.1:6000/exactlyonce")
    assert values["KAFKA_BOOTSTRAP_SERVERS"] == "127.0.0.1:6001"
    monkeypatch.setenv("EXACTLYONCE_REDIS_PORT", "not-a-port")
    with pytest.raises(RuntimeError, match="EXACTLYONCE_REDIS_PORT"):
        local_env()


def test_home_dir_default_and_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert services.home_dir() == tmp_path / ".exactlyonce"
    monkeypatch.setenv("EXACTLYONCE_HOME", str(tmp_path / "elsewhere"))
    assert services.home_dir() == tmp_path / "elsewhere"
    assert services.home_dir(tmp_path / "given") == tmp_path / "given"


def test_service_env_reads_the_file(tmp_path: Path) -> None:
    path = write_env_file(FILE_VALUES, tmp_path)
    assert path == tmp_path / ENV_FILE
    assert service_env(tmp_path) == FILE_VALUES


def test_environment_wins_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_env_file(FILE_VALUES, tmp_path)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")
    monkeypatch.setenv("EXACTLYONCE_REDIS_URL", "")  # empty counts as unset
    env = service_env(tmp_path)
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "localhost:9092"
    assert env["EXACTLYONCE_REDIS_URL"] == FILE_VALUES["EXACTLYONCE_REDIS_URL"]
    assert env["EXACTLYONCE_PG_DSN"] == FILE_VALUES["EXACTLYONCE_PG_DSN"]


def test_environment_alone_needs_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compose = {
        "EXACTLYONCE_PG_DSN": "postgresql://exactlyonce:eo-local-pw@localhost:5432/exactlyonce",
        "EXACTLYONCE_REDIS_URL": "redis://localhost:6379/0",
        "KAFKA_BOOTSTRAP_SERVERS": "localhost:9092",
    }
    for key, value in compose.items():
        monkeypatch.setenv(key, value)
    assert service_env(tmp_path) == compose


def test_missing_file_and_env_says_run_make_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(RuntimeError, match="make services"):
        service_env(tmp_path)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")
    with pytest.raises(RuntimeError, match="EXACTLYONCE_PG_DSN"):
        service_env(tmp_path)


def test_mask_dsn_hides_the_password() -> None:
    dsn = FILE_VALUES["EXACTLYONCE_PG_DSN"]
    assert mask_dsn(dsn) == "postgresql://exactlyonce:***@127.0.0.1:54329/exactlyonce"
    assert mask_dsn("postgresql://u:s3cr%40t@db:5432/x?sslmode=require") == (
        "postgresql://u:***@db:5432/x?sslmode=require"
    )
    assert mask_dsn("postgresql://u@db/x") == "postgresql://u@db/x"


def test_printed_lines_and_cli_never_show_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    values = dict(FILE_VALUES)
    values["EXACTLYONCE_PG_DSN"] = "postgresql://exactlyonce:hunter2@127.0.0.1:54329/exactlyonce"
    lines = describe(values)
    assert any("exactlyonce:***@127.0.0.1:54329" in line for line in lines)
    assert not any("hunter2" in line for line in lines)

    write_env_file(values, tmp_path)
    monkeypatch.setenv("EXACTLYONCE_HOME", str(tmp_path))
    assert services.main(["env"]) == 0
    out = capsys.readouterr().out
    assert "exactlyonce:***@" in out
    assert "hunter2" not in out


def test_pg_data_leaves_a_home_the_postgres_user_cannot_traverse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As root, initdb runs as ``postgres``: a project under ``mktemp -d`` (0700) is out of
    its reach, so the cluster goes to a per-project dir under /var/tmp instead."""
    monkeypatch.setattr(pg_service, "is_root", lambda: True)
    with tempfile.TemporaryDirectory(dir="/tmp") as top:  # pytest's tmp_path is 0700
        tmp_path = Path(top)
        tmp_path.chmod(0o755)
        _check_pg_paths(tmp_path, monkeypatch)


def _check_pg_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o755)
    if not pg_service.traversable_by_others(tmp_path):
        pytest.fail(f"pytest's tmp_path {tmp_path} is itself private; cannot tell the cases")
    home = private / "p" / ".exactlyonce"
    data, _, _ = pg_service.paths(home)
    assert not data.is_relative_to(home)
    assert data.parent.parent.parent == Path("/var/tmp")
    assert pg_service.paths(home)[0] == data, "the same project gets the same dir"
    assert pg_service.paths(open_dir / ".exactlyonce")[0] == open_dir / ".exactlyonce/pg/data"
    monkeypatch.setattr(pg_service, "is_root", lambda: False)
    assert pg_service.paths(home)[0] == home / "pg" / "data", "non-root runs initdb itself"


def test_poll_until_waits_for_the_condition_up_to_the_deadline() -> None:
    from exactlyonce.integration.lab.services.processes import START_POLL, poll_until

    calls = iter([False, False, True])
    assert poll_until(lambda: next(calls), START_POLL.replace(initial_s=0.01, max_s=0.01))
    assert not poll_until(lambda: False, START_POLL.replace(initial_s=0.01, deadline_s=0.1))


def test_wait_until_names_the_service_and_fails_fast_when_its_process_died(
    tmp_path: Path,
) -> None:
    from exactlyonce.integration.lab.services.processes import wait_until

    log = tmp_path / "x.log"
    log.write_text("last words\n")
    with pytest.raises(RuntimeError, match="did not answer within 0 s") as timeout:
        wait_until("x", lambda: False, log, timeout=0.2)
    assert "last words" in str(timeout.value)
    with pytest.raises(RuntimeError, match="x exited while starting"):
        wait_until("x", lambda: False, log, timeout=30, pid=lambda: None)
