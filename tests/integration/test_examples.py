"""The README's runnable examples run, each in a fresh directory, and write what they say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

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
        ("upsert_aggregation.py", "[('ann', 2, 8, 1), ('bob', 1, 7, 0)]"),
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
    # The upsert example drops its duplicate in Spark (dropDuplicates), before the sink.
    assert "duplicates=1" in out or script in ("quickstart.py", "upsert_aggregation.py"), out[
        -3000:
    ]


def test_the_upsert_pipeline_file_runs(
    tmp_path: Path, services: dict[str, str], pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """examples/upsert_pipeline.yaml through `exactlyonce run`: a changelog with a delete."""
    text = (EXAMPLES / "upsert_pipeline.yaml").read_text()
    text = text.replace("profiles-to-pg", unique_name).replace(
        "table: profiles", f"table: {unique_name}"
    )
    (tmp_path / "pipeline.yaml").write_text(text)
    inbox = tmp_path / ".exactlyonce" / "upsert-pipeline" / "input"
    inbox.mkdir(parents=True)
    changes = [
        [
            '{"user_id": "ann", "email": "ann@x", "plan": "free"}',
            '{"user_id": "bob", "email": "bob@x", "plan": "free"}',
        ],
        [
            '{"user_id": "ann", "email": "ann@x", "plan": "pro"}',
            '{"user_id": "bob", "deleted": true}',
        ],
        ['{"user_id": "cat", "email": "cat@x", "plan": "free", "deleted": false}'],
    ]
    for n, lines in enumerate(changes):
        path = inbox / f"part-{n}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))  # Spark reads files by mtime
    done = subprocess.run(
        [sys.executable, "-m", "exactlyonce", "run", "pipeline.yaml"],
        cwd=tmp_path,
        env={**os.environ, **services},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pg.execute(
        sql.SQL("SELECT user_id, plan, epoch FROM {} ORDER BY 1").format(
            sql.Identifier(unique_name)
        )
    ).fetchall()
    assert rows == [("ann", "pro", 1), ("cat", "free", 2)]
