"""The crash-point hooks the kill -9 tests rely on: inactive by default, hold until released."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from exactlyonce.faults import crash_point


@pytest.fixture
def crash_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EXACTLYONCE_CRASH_DIR", str(tmp_path))
    monkeypatch.delenv("EXACTLYONCE_CRASH_AT", raising=False)
    monkeypatch.delenv("EXACTLYONCE_HOLD_AT", raising=False)
    return tmp_path


def test_without_a_spec_no_point_fires(crash_dir: Path) -> None:
    crash_point("mid_write", 3)
    assert list(crash_dir.iterdir()) == []


def test_a_hold_waits_for_its_release_and_fires_once(
    crash_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXACTLYONCE_HOLD_AT", "mid_write@3")
    crash_point("mid_write", 2)  # another epoch: goes on
    crash_point("before_write", 3)  # another point: goes on
    assert list(crash_dir.iterdir()) == []

    # daemon: a failed assertion below must not leave pytest waiting 600 s for the hold
    held = threading.Thread(target=crash_point, args=("mid_write", 3), daemon=True)
    held.start()
    marker = crash_dir / "held-mid_write"
    deadline = time.monotonic() + 10
    # The marker is created, then written: wait for its content, not only for the file.
    while time.monotonic() < deadline and not (marker.exists() and marker.read_text()):
        time.sleep(0.01)
    assert marker.read_text().split()[1] == "3"
    time.sleep(0.2)
    assert held.is_alive(), "the hold must wait for its release"
    (crash_dir / "release-mid_write").touch()
    held.join(timeout=5)
    assert not held.is_alive()

    (crash_dir / "release-mid_write").unlink()
    began = time.monotonic()
    crash_point("mid_write", 3)  # fired already (a second task of the epoch): goes on at once
    assert time.monotonic() - began < 1


def test_several_holds_each_hold_their_point_and_epoch(
    crash_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from exactlyonce.faults import armed

    monkeypatch.setenv("EXACTLYONCE_HOLD_AT", "after_shard_commit@2,mid_bulk@4")
    assert armed("after_shard_commit") and armed("mid_bulk") and not armed("mid_write")
    crash_point("mid_bulk", 2)  # the other hold's epoch: goes on
    assert list(crash_dir.iterdir()) == []
    for point, epoch in (("after_shard_commit", 2), ("mid_bulk", 4)):
        held = threading.Thread(target=crash_point, args=(point, epoch), daemon=True)
        held.start()
        marker = crash_dir / f"held-{point}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (marker.exists() and marker.read_text()):
            time.sleep(0.01)
        assert marker.read_text().split()[1] == str(epoch)
        assert held.is_alive(), f"{point}@{epoch} holds until released"
        (crash_dir / f"release-{point}").touch()
        held.join(timeout=5)
        assert not held.is_alive()


def test_a_crash_point_that_fired_already_lets_the_restarted_run_go_on(
    crash_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXACTLYONCE_CRASH_AT", "after_head@4")
    (crash_dir / "crashed-after_head").write_text("1 4\n")
    began = time.monotonic()
    crash_point("after_head", 4)
    assert time.monotonic() - began < 1
