"""The class-data archive is written once and Spark's driver JVM maps it (real JVM)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from exactlyonce.integration import jvm_archive

pytestmark = pytest.mark.integration

PROBE = """
from exactlyonce.integration.spark import session
spark = session("archive-probe", master="local[1]", connectors=False)
jvm = spark.sparkContext._gateway.proc.pid
print("MAPPED" if "{archive}" in open(f"/proc/{{jvm}}/maps").read() else "NOT MAPPED")
spark.stop()
"""


def test_the_driver_jvm_maps_the_archive() -> None:
    path = jvm_archive.build()  # make jars wrote it already; else written now (~40 s)
    assert path.is_file() and path.stat().st_size > 10 * 2**20
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(archive=path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "MAPPED" in out.stdout.split() and "NOT MAPPED" not in out.stdout, out.stdout
