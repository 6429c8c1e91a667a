"""The README's runnable examples run, each in a fresh directory, and write what they say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("script", "expect"),
    [
        ("quickstart.py", "written=2"),
        ("redis_sink.py", "b'action': b'view'"),
        ("elasticsearch_sink.py", "2 documents"),
        ("kafka_sink.py", "b'a2' b'"),
        (
            "buffered_postgres.py",
            "drained 2 rows; lag 0 records, 0.0s behind\n[('b1', 5), ('b2', 7)]\n",
        ),
    ],
)
def test_example_runs(
    script: str, expect: str, tmp_path: Path, services: dict[str, str], unique_name: str
) -> None:
    env = {**os.environ, **services, "EXAMPLE_NAME": unique_name}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert expect in out, out[-3000:]
    assert "duplicates=1" in out or script == "quickstart.py", out[-3000:]
