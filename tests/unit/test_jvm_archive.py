"""Which Java options a session gets from the class-data archive (pure logic)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exactlyonce.integration import jvm_archive

OPTIONS = "spark.driver.extraJavaOptions"


@pytest.fixture
def archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "spark-driver.jsa"
    monkeypatch.setattr(jvm_archive, "archive_path", lambda: path)
    monkeypatch.delenv("EXACTLYONCE_JVM_ARCHIVE", raising=False)
    return path


def test_no_archive_adds_nothing(archive: Path) -> None:
    assert jvm_archive.with_archive({"a": "b"}) == {"a": "b"}


def test_an_archive_is_added_after_the_options_given(archive: Path) -> None:
    archive.write_bytes(b"x")
    settings = jvm_archive.with_archive({OPTIONS: "-XX:TieredStopAtLevel=1"})
    assert settings[OPTIONS] == f"-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile={archive}"
    assert jvm_archive.with_archive({})[OPTIONS] == f"-XX:SharedArchiveFile={archive}"


def test_options_that_pick_an_archive_are_left_alone(archive: Path) -> None:
    archive.write_bytes(b"x")
    for own in ("-XX:SharedArchiveFile=/elsewhere.jsa", "-XX:ArchiveClassesAtExit=/new.jsa"):
        assert jvm_archive.with_archive({OPTIONS: own}) == {OPTIONS: own}


def test_turned_off_by_the_environment(archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive.write_bytes(b"x")
    monkeypatch.setenv("EXACTLYONCE_JVM_ARCHIVE", "off")
    assert jvm_archive.with_archive({}) == {}


def test_the_archive_is_named_by_java_and_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    first = jvm_archive.archive_path()
    monkeypatch.setattr("pyspark.__version__", "0.0.1")
    assert jvm_archive.archive_path() != first
    assert first.parent == jvm_archive.cache_folder()


def test_a_new_training_job_gets_a_new_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    """An archive holds the classes its training job loaded: a job that exercises more of
    Spark (train.py) must not be shadowed by an archive an older one left in the cache."""
    first = jvm_archive.archive_path()
    monkeypatch.setattr(jvm_archive, "TRAINING", jvm_archive.TRAINING + 1)
    assert jvm_archive.archive_path() != first


def test_archives_of_pyspark_installs_that_are_gone_are_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = jvm_archive.cache_folder()
    folder.mkdir(parents=True)
    kept, gone = tmp_path / "venv-a" / "jars", tmp_path / "venv-b" / "jars"
    kept.mkdir(parents=True)
    for name, jars in (("spark-driver-a", kept), ("spark-driver-b", gone)):
        (folder / f"{name}.jsa").write_bytes(b"x")
        (folder / f"{name}.jars").write_text(str(jars))
    jvm_archive._prune()
    assert sorted(p.name for p in folder.iterdir()) == ["spark-driver-a.jars", "spark-driver-a.jsa"]


def test_a_pyspark_reinstalled_in_the_same_place_gets_a_new_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtualenv made again at the same path has new jar files: the JVM refuses an archive
    written against the old ones ("The top archive failed to load") and starts without it."""
    jars = tmp_path / "venv" / "jars"
    jars.mkdir(parents=True)
    monkeypatch.setattr(jvm_archive, "_pyspark_jars", lambda: jars)
    first = jvm_archive.archive_path()
    jars.rmdir()
    jars.mkdir()
    os.utime(jars, ns=(1, 1))  # another install time, whatever the clock's resolution
    assert jvm_archive.archive_path() != first


def test_archives_of_an_install_made_again_are_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = jvm_archive.cache_folder()
    folder.mkdir(parents=True)
    jars = tmp_path / "venv" / "jars"
    jars.mkdir(parents=True)
    (folder / "spark-driver-old.jsa").write_bytes(b"x")
    (folder / "spark-driver-old.jars").write_text(str(jars))
    os.utime(folder / "spark-driver-old.jsa", ns=(1, 1))  # written before the install
    jvm_archive._prune()
    assert list(folder.iterdir()) == []
