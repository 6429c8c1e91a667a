"""The Python worker daemon of our sessions: pyspark's own zips last, modules imported once."""

from __future__ import annotations

import sys
from pathlib import Path

from exactlyonce.integration import worker_daemon
from exactlyonce.integration.spark import local_settings


def _installed_pyspark(site: Path) -> Path:
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    return lib


def test_the_installed_pysparks_zips_go_last_in_the_order_spark_gave(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    lib = _installed_pyspark(site)
    zips = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    path = [*zips, "/job/files", str(site), "/usr/lib/python3.11"]
    assert worker_daemon.installed_zips_last(path) == [
        "/job/files",
        str(site),
        "/usr/lib/python3.11",
        *zips,
    ]


def test_another_sparks_zips_stay_first(tmp_path: Path) -> None:
    """A cluster's own Spark installation: its zips are not the installed package's."""
    site = tmp_path / "site-packages"
    _installed_pyspark(site)
    theirs = "/opt/spark/python/lib/pyspark.zip"
    path = [theirs, str(site)]
    assert worker_daemon.installed_zips_last(path) == path


def test_no_installed_pyspark_leaves_the_path_alone(tmp_path: Path) -> None:
    path = ["/opt/spark/python/lib/pyspark.zip", str(tmp_path)]
    assert worker_daemon.installed_zips_last(path) == path


def test_this_environments_pyspark_zips_are_found(tmp_path: Path) -> None:
    """The real layout of a pip-installed pyspark (the one these tests run)."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(z) for z in lib.glob("*.zip"))
    assert zips, f"no zips in {lib}: pyspark's layout changed"
    site = [e for e in sys.path if e and Path(e, "pyspark", "__init__.py").is_file()]
    moved = worker_daemon.installed_zips_last([*zips, *site])
    assert moved == [*site, *zips]


def test_a_module_that_fails_to_import_is_left_to_the_worker() -> None:
    failed = worker_daemon.preload(("json", "exactlyonce_no_such_module"))
    assert failed == ["exactlyonce_no_such_module"]


DAEMON = "spark.python.daemon.module"


def test_local_sessions_use_this_daemon_unless_told_otherwise() -> None:
    assert local_settings({})[DAEMON] == worker_daemon.__name__
    assert (
        local_settings({"spark.pyspark.python": sys.executable})[DAEMON] == worker_daemon.__name__
    )
    assert local_settings({DAEMON: "their.daemon"})[DAEMON] == "their.daemon"


def test_workers_on_another_python_keep_pysparks_daemon() -> None:
    """That Python may lack exactlyonce: the sink's worker check must get to say so."""
    settings = local_settings({"spark.pyspark.python": "/opt/other/bin/python"})
    assert DAEMON not in settings
    assert settings["spark.pyspark.python"] == "/opt/other/bin/python"
