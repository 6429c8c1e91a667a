"""The package's optional native code, and the one switch that turns it off.

Two small C extensions, built by ``pip install`` where a C compiler is (``setup.py``; each
optional: without it the package installs and runs the Python/numpy code it replaces, with the
same results):

- ``exactlyonce.dedup._bloomkernel``: the numpy Bloom filter's ``contains`` and ``add`` loops
  (:mod:`.bloom`), the same filter bytes;
- ``exactlyonce.connectors.kafka._arrowproduce``: the Kafka sink's produce loop
  (:mod:`exactlyonce.connectors.kafka.arrowproduce`), the same messages.

``EXACTLYONCE_NATIVE=0`` in a process's environment (the executors' too, e.g.
``spark.executorEnv.EXACTLYONCE_NATIVE=0``) makes it use neither: for a measurement, or to rule
them out.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

NATIVE_ENV = "EXACTLYONCE_NATIVE"


def native_enabled() -> bool:
    """False when ``EXACTLYONCE_NATIVE`` is ``0``."""
    return os.environ.get(NATIVE_ENV, "1") != "0"


def extension(name: str) -> Any | None:
    """The extension module ``name`` (``exactlyonce.<...>._<ext>``), or None when it is not
    built or the switch is off (logged at debug level: the fallback is correct, only slower).
    Imported by name: for the import graph an extension is no module (tools/check_cycles.py)."""
    if not native_enabled():
        log.debug("%s not used: %s=0", name, NATIVE_ENV)
        return None
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        log.debug("%s not built: %s", name, exc)
        return None


@functools.cache
def bloom_kernel() -> Any | None:
    """``exactlyonce.dedup._bloomkernel``, or None (see :func:`extension`)."""
    return extension(f"{__package__}._bloomkernel")
