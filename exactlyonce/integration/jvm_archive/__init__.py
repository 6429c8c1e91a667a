"""A class-data-sharing archive for Spark's driver JVM: a session starts in ~60% of the time.

Starting a SparkSession spends most of its seconds loading and verifying Spark's classes.
Java's class-data sharing (CDS) maps them from an archive written by an earlier run instead.
``python -m exactlyonce.integration.jvm_archive`` (``make jars`` runs it) writes that archive
once: it runs a small batch and streaming job (:mod:`.train`, in a process of its own: the
job needs :mod:`exactlyonce.integration.spark`, which needs this module) in a JVM started with
``-XX:ArchiveClassesAtExit``. From then on :func:`exactlyonce.integration.spark.session`
starts the driver JVM with ``-XX:SharedArchiveFile`` pointing at it (:func:`java_options`).

The archive is named by what it depends on (the ``java`` that runs, pyspark's version, its
jar folder and that folder's time: the JVM refuses an archive whose jar files changed, as in a
virtualenv made again at the same path), so an upgrade or a reinstall simply finds no archive
and starts as before. A JVM that
cannot use an archive (a different class path, say) ignores it (``-Xshare:auto``, Java's
default). It lives in ``$XDG_CACHE_HOME/exactlyonce/cds`` (else ``~/.cache/exactlyonce/cds``),
beside a note of the pyspark it belongs to: writing one removes those of pyspark installs that
are gone.
``EXACTLYONCE_JVM_ARCHIVE=off`` turns its use off.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from exactlyonce.integration.jars import require_java
from exactlyonce.integration.locking import exclusive

BUILD_TIMEOUT_S = 300.0

# The training job's version (train.py), part of the archive's name: raise it when the job
# changes, so that an archive trained by an older job is not kept. 2: a sink's write path
# (repartition, mapInArrow): 1,051 -> 551 classes loaded from jars by a one-epoch crash job.
TRAINING = 2


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "exactlyonce" / "cds"


def archive_path() -> Path:
    """Where the archive for this ``java`` and this pyspark is (or would be) kept."""
    import pyspark

    java = Path(require_java()).resolve()
    jars = _pyspark_jars()
    digest = hashlib.sha256()
    installed = str(jars.stat().st_mtime_ns)
    for part in (
        str(TRAINING),
        str(java),
        str(java.stat().st_mtime_ns),
        pyspark.__version__,
        str(jars),
        installed,
    ):
        digest.update(part.encode() + b"\0")
    return cache_folder() / f"spark-driver-{pyspark.__version__}-{digest.hexdigest()[:12]}.jsa"


def java_options() -> str | None:
    """``-XX:SharedArchiveFile=...`` when the archive exists and its use is not turned off."""
    if os.environ.get("EXACTLYONCE_JVM_ARCHIVE", "").lower() in ("off", "0", "false", "no"):
        return None
    try:
        path = archive_path()
    except (OSError, RuntimeError):
        return None
    return f"-XX:SharedArchiveFile={path}" if path.is_file() else None


def with_archive(settings: dict[str, str]) -> dict[str, str]:
    """``settings`` with the archive added to ``spark.driver.extraJavaOptions`` (after the
    options already there), unless those options pick an archive themselves."""
    current = settings.get("spark.driver.extraJavaOptions", "")
    if "SharedArchiveFile" in current or "ArchiveClassesAtExit" in current:
        return settings
    option = java_options()
    if option is None:
        return settings
    joined = f"{current} {option}".strip()
    return {**settings, "spark.driver.extraJavaOptions": joined}


def build(force: bool = False) -> Path:
    """Write the archive unless it exists (``force``: write it again); returns its path."""
    path = archive_path()
    with exclusive(cache_folder() / ".lock"):
        if path.is_file() and not force:
            return path
        partial = path.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        subprocess.run(
            [sys.executable, "-m", "exactlyonce.integration.jvm_archive.train", str(partial)],
            check=True,
            timeout=BUILD_TIMEOUT_S,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not partial.is_file():
            raise RuntimeError(f"the JVM wrote no class-data archive at {partial}")
        partial.rename(path)
        path.with_suffix(".jars").write_text(str(_pyspark_jars()))
        _prune()
    return path


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _prune() -> None:
    """Remove the archives of pyspark installs that are gone (a deleted virtualenv) or were
    made again since (their jar folder is newer than the archive)."""
    for source in cache_folder().glob("spark-driver-*.jars"):
        jars, archive = Path(source.read_text()), source.with_suffix(".jsa")
        if not jars.is_dir() or not archive.is_file() or _newer(jars, archive):
            archive.unlink(missing_ok=True)
            source.unlink(missing_ok=True)


def _newer(first: Path, than: Path) -> bool:
    return first.stat().st_mtime_ns > than.stat().st_mtime_ns


def main(argv: list[str]) -> int:
    started = time.monotonic()
    try:
        path = archive_path()
        existed = path.is_file()
        build(force="--force" in argv)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        # An optimisation only: sessions start without it.
        print(f"warning: no class-data archive for Spark's JVM ({exc})", file=sys.stderr)
        return 0
    size = path.stat().st_size / 2**20
    what = "found" if existed and "--force" not in argv else "written"
    print(
        f"Spark driver class-data archive {what}: {path} ({size:.0f} MiB, "
        f"{time.monotonic() - started:.1f} s)"
    )
    return 0
