"""Spark's Python worker daemon, with pyspark and our task modules imported before it forks.

Spark starts its Python workers (the processes running ``foreachBatch`` sinks' tasks,
``mapInArrow`` and ``format("exactlyonce")``'s write tasks) by forking them from a daemon;
each fork imports what it runs. Here the daemon imports pyspark's worker and our task modules
once, from the installed package rather than Spark's zips (:func:`installed_zips_last`), and
runs pyspark's own daemon (:func:`pyspark.daemon.manager`); each fork starts with them
loaded. :func:`exactlyonce.integration.spark.session` makes this the daemon
(``spark.python.daemon.module``); nothing else changes: pyspark's daemon does the forking,
the authentication and the worker loop. Spark starts a Python data source's planner and
commit processes from pyspark's own daemon whatever this setting says
(``PythonWorkerFactory.defaultDaemonModule``), so they are not served from here.

Forking after an import is what the daemon avoids doing by itself (its comment: pandas and
pyarrow start threads when imported). The modules below start two: numpy's OpenBLAS pool,
which Spark sizes to one thread per task (``OMP_NUM_THREADS``), so it starts none, and pyarrow's
jemalloc background thread, which jemalloc stops and restarts around a fork (its
``pthread_atfork`` handlers). pandas is not imported. A module that fails to import is left
to the worker that needs it, which then fails as it would have without this daemon.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

# pyspark's worker, and what a task of ours imports (:mod:`exactlyonce.connectors.base.task`
# for foreachBatch tasks, :mod:`exactlyonce.integration.datasource` for format("exactlyonce")'s
# write tasks). Sink-specific clients are left to the worker: a daemon importing all of them
# would cost more than the two or three forks of a run save.
PRELOAD = (
    "pyspark.worker",
    "exactlyonce.connectors.base.task",
    "exactlyonce.integration.datasource",
)


def installed_zips_last(path: list[str]) -> list[str]:
    """``path`` with the zips of the pyspark package installed on it moved to the end.

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and its py4j zip first on every Python
    worker's path. With a pip-installed pyspark, ``$SPARK_HOME`` is that package, so the zips
    hold the same modules as the package, but Python compiles a zip's modules again in every
    process (a zip has no ``__pycache__``): importing ``pyspark.worker`` took 1.2-1.7 CPU-s
    from the zip and 0.33-0.41 from the package (measured, 2 cores). A zip of any other Spark
    (a cluster's own installation) stays where Spark put it."""
    packages = [Path(entry) / "pyspark" for entry in path if entry and Path(entry).is_dir()]
    installed = next((p for p in packages if (p / "__init__.py").is_file()), None)
    if installed is None:
        return list(path)
    lib = installed / "python" / "lib"

    def ours(entry: str) -> bool:
        where = Path(entry)
        return where.parent == lib and where.suffix == ".zip"

    return [e for e in path if not ours(e)] + [e for e in path if ours(e)]


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules``; the names of those that failed (left to the worker)."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  (the worker that needs it reports it)
            failed.append(name)
    return failed


def main() -> None:
    sys.path[:] = installed_zips_last(sys.path)
    for name in preload():
        print(f"exactlyonce worker daemon: could not preload {name}", file=sys.stderr)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
