"""Can Spark's Python workers run our task writers? One tiny task at each sink start says.

A session built with a plain ``SparkSession.builder.getOrCreate()`` from a venv that is not
activated runs its workers on the system ``python3``: every task of the first batch then
dies with ``ModuleNotFoundError: No module named 'exactlyonce'`` deep in a Py4J trace, and
is retried. Before the first batch of each start, :func:`check_workers` runs ONE task that
reports the worker's ``sys.executable``, Python and pyspark versions and whether ``import
exactlyonce`` works, and refuses (ConfigError, one sentence with the fix) a worker that
cannot import the package or runs another Python or pyspark (major.minor) than the driver.
Workers that passed are remembered per (Spark application, worker Python): a later start
in the same session asks no more (a new session, or another worker Python, is probed).
A local session whose workers are this very interpreter, with exactlyonce importable from
a path each of its processes sees (site-packages, an installed finder, ``$PYTHONPATH``, the
working folder), is not probed at all: its workers are this process's twins
(:func:`workers_are_this_interpreter`; ~1 s of every start's first batch).

The probe function is compiled here from source in a namespace no module is registered
under, so cloudpickle ships it BY VALUE: the worker runs it without importing exactlyonce,
and it catches its own import error. The task itself therefore succeeds and is never
retried; only a worker that cannot start at all (another Python minor version, which Spark
refuses itself) fails it, and that error is read and turned into the same one sentence.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("exactlyonce")

FIELD = "spark.pyspark.python"
SCHEMA = "executable string, python string, pyspark string, version string, error string"

_PROBE_SOURCE = """
def worker_probe(batches):
    import array, importlib, importlib.metadata, sys
    import pyarrow as pa
    for _ in batches:
        pass
    version, error = None, None
    try:
        importlib.import_module("exactlyonce")
        version = importlib.metadata.version("exactlyonce")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    try:
        import pyspark
        pyspark_version = pyspark.__version__
    except Exception:
        pyspark_version = "?"
    python = "%d.%d.%d" % sys.version_info[:3]
    values = [sys.executable, python, pyspark_version, version, error]
    names = ["executable", "python", "pyspark", "version", "error"]
    # From raw buffers: pa.array() of Python objects imports pandas (~1.3 s in a cold worker).
    arrays = []
    for v in values:
        data = b"" if v is None else v.encode()
        valid = None if v is not None else pa.py_buffer(b"\\x00")
        offsets = pa.py_buffer(array.array("i", [0, len(data)]))
        arrays.append(pa.Array.from_buffers(pa.string(), 1, [valid, offsets, pa.py_buffer(data)]))
    yield pa.RecordBatch.from_arrays(arrays, names=names)
"""


def _compile_probe() -> Any:
    # "__name__" names no module in sys.modules: cloudpickle then pickles the function by
    # value, so a worker without exactlyonce can still run it.
    namespace: dict[str, Any] = {"__name__": "exactlyonce_worker_probe"}
    exec(compile(_PROBE_SOURCE, "<exactlyonce worker probe>", "exec"), namespace)
    return namespace["worker_probe"]


@dataclass(frozen=True)
class WorkerReport:
    """What one Python worker said about itself, and what asking cost."""

    executable: str
    python: str
    pyspark: str
    version: str | None  # exactlyonce's, None when it cannot be imported
    error: str | None
    ms: float


def probe_workers(spark: SparkSession) -> WorkerReport:
    """Run the probe as one task (``mapInArrow`` over a 1-row DataFrame: classic Spark and
    Spark Connect alike)."""
    began = time.monotonic()
    rows = spark.range(1, numPartitions=1).mapInArrow(_compile_probe(), SCHEMA).collect()
    got = rows[0].asDict()
    return WorkerReport(**got, ms=(time.monotonic() - began) * 1000)


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _fix() -> str:
    return (
        f"start Spark with the driver's Python ({sys.executable}) as PYSPARK_PYTHON or "
        "spark.pyspark.python, or build the session with exactlyonce.integration.spark.session()"
    )


def worker_problem(worker: WorkerReport, configured: str | None = None) -> str | None:
    """One sentence saying why these workers cannot run the sink's tasks, or None;
    ``configured`` is the worker Python Spark was given, when known."""
    import pyspark

    told = f" (started as {configured})" if configured else ""
    where = f"Spark's Python workers{told} run {worker.executable} (Python {worker.python})"
    if worker.error is not None:
        return (
            f"{where}, which cannot import exactlyonce ({worker.error}), so every task would "
            f"fail: {_fix()}"
        )
    driver_python = ".".join(map(str, sys.version_info[:3]))
    if _minor(worker.python) != _minor(driver_python):
        return f"{where} but the driver runs Python {driver_python}: {_fix()}"
    if _minor(worker.pyspark) != _minor(pyspark.__version__):
        return (
            f"{where} with pyspark {worker.pyspark} but the driver runs pyspark "
            f"{pyspark.__version__}: {_fix()}"
        )
    return None


def failed_probe_problem(exc: BaseException) -> str | None:
    """The one sentence for a probe task that could not even start, read from Spark's error
    (its text is all a Py4J error carries); None for anything else."""
    text = str(exc)
    if "PYTHON_VERSION_MISMATCH" in text or "different version" in text:
        return f"Spark's Python workers run another Python version than the driver: {_fix()}"
    if "ModuleNotFoundError" in text or "No module named" in text:
        return f"Spark's Python workers cannot import what the sink's tasks need: {_fix()}"
    return None


def configured_python(spark: SparkSession) -> str | None:
    """The command Spark starts its Python workers with (the SparkContext's ``pythonExec``,
    from ``$PYSPARK_PYTHON``; else the ``spark.pyspark.python`` conf), if known."""
    try:
        return str(spark.sparkContext.pythonExec)
    except Exception:  # Spark Connect has no SparkContext
        pass
    try:
        value = spark.conf.get("spark.pyspark.python", None)
    except Exception:  # a conf this Spark cannot read: the environment is the other source
        value = None
    return value or os.environ.get("PYSPARK_PYTHON") or None


# Workers that passed, per (Spark application, worker Python): every sink started later in
# the same session reuses the answer instead of running the probe job again (0.1-0.8 s).
_PASSED: dict[tuple[str, str | None], WorkerReport] = {}


def _session_key(spark: SparkSession) -> tuple[str, str | None] | None:
    """(application id, worker Python) of a classic session; None under Spark Connect."""
    try:
        app = spark.sparkContext.applicationId
    except Exception:  # Spark Connect has no SparkContext: probe every start
        return None
    return (str(app), configured_python(spark)) if app else None


def workers_are_this_interpreter(
    master: str | None,
    worker_python: str | None,
    executable: str,
    package_root: str,
    path: list[str],
    shared: list[str],
) -> bool:
    """True when a probe could learn nothing: a ``local`` master whose Python workers run
    ``executable`` (this interpreter), and the package's root either on a ``shared`` path
    (site-packages, ``$PYTHONPATH``, the working folder: every process of this interpreter
    here has it) or on no ``path`` entry at all (an installed finder put it there, as for
    an editable install). A root only this script's folder or a run-time ``sys.path`` entry
    provides, another Python, or any cluster master: probe."""
    if not (master or "").startswith("local") or worker_python != executable:
        return False
    return package_root in shared or package_root not in path


def _this_interpreter(spark: SparkSession) -> bool:
    import site

    import exactlyonce

    try:
        master = str(spark.sparkContext.master)
    except Exception:  # Spark Connect, or a session without a master: probe
        return False
    real = os.path.realpath
    root = real(os.path.dirname(os.path.dirname(os.path.abspath(exactlyonce.__file__))))
    env_path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    shared = [*site.getsitepackages(), site.getusersitepackages(), *env_path, os.getcwd()]
    return workers_are_this_interpreter(
        master,
        configured_python(spark),
        sys.executable,
        root,
        [real(p or os.getcwd()) for p in sys.path],
        [real(p) for p in shared if p],
    )


def _twin_report() -> WorkerReport:
    import importlib.metadata

    import pyspark

    python = ".".join(map(str, sys.version_info[:3]))
    try:
        version = importlib.metadata.version("exactlyonce")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        version = "unknown"
    return WorkerReport(sys.executable, python, pyspark.__version__, version, None, 0.0)


def check_workers(spark: SparkSession) -> WorkerReport:
    """Probe the workers; ConfigError (field ``spark.pyspark.python``) with one sentence
    when they cannot run the sink's tasks. A session whose workers passed is not probed
    again (its application and worker Python are the same; a new session is probed)."""
    key = _session_key(spark)
    if key is not None and key in _PASSED:
        return _PASSED[key]
    if _this_interpreter(spark):
        log.info("Spark's Python workers are this interpreter on this machine: not probed")
        worker = _twin_report()
    else:
        worker = _probe_or_refuse(spark)
    if key is not None:
        _PASSED[key] = worker
    return worker


def _probe_or_refuse(spark: SparkSession) -> WorkerReport:
    try:
        worker = probe_workers(spark)
    except Exception as exc:
        problem = failed_probe_problem(exc)
        if problem is None:
            raise
        raise ConfigError(FIELD, problem) from None
    problem = worker_problem(worker, configured_python(spark))
    if problem is not None:
        raise ConfigError(FIELD, problem)
    log.info(
        "Spark's Python workers checked in %.0f ms: %s (Python %s, pyspark %s, exactlyonce %s)",
        worker.ms,
        worker.executable,
        worker.python,
        worker.pyspark,
        worker.version,
    )
    return worker
