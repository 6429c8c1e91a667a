"""``exactlyonce rewind --json`` against PostgreSQL and real Spark: the dry run's document
says what the rewind then removes (checked against the table), the applied one says what was
done, and a refusal is a document too, with exit code 2."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from exactlyonce.integration import cli
from tests.integration.test_rewind import (
    ALL,
    EPOCHS,
    checkpoint_batches,
    expected_attempts,
    expected_writes,
    heads_json,
    postgres_pipeline,
    run_query,
)
from tests.support.audit import insert_counts, sink_ids, write_counts

pytestmark = pytest.mark.integration
TO = 0


def rewind_json(
    config: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = cli.main(["rewind", str(config), "--to-epoch", str(TO), "--json", *extra])
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, document


def test_rewind_json_dry_run_applied_and_refused(
    tmp_path: Path,
    spark: Any,
    pg: psycopg.Connection[Any],
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = postgres_pipeline(tmp_path, pg, unique_name)
    run_query(spark, config)
    rows = pg.execute(f'SELECT epoch FROM "{unique_name}" WHERE epoch > %s', [TO]).fetchall()
    above = {str(e): n for e, n in sorted(Counter(e for (e,) in rows).items())}
    assert above, "the run wrote nothing above the epoch: the test would prove nothing"
    batches = checkpoint_batches(config)

    code, dry = rewind_json(config, capsys)
    assert code == 2 and not dry["applied"] and dry["refused"] is None
    assert (dry["query_name"], dry["kind"]) == (unique_name, "postgres")
    assert (dry["from_epoch"], dry["to_epoch"]) == (len(EPOCHS) - 1, TO)
    table_rows = dry["removals"][0]
    assert unique_name in table_rows["what"]
    assert table_rows["per_epoch"] == above and table_rows["total"] == len(rows)
    assert dry["catalog"] == {"dropped": False, "keys_dropped": None}
    assert dry["checkpoint"]["action"] == "rewound"
    assert dry["checkpoint"]["batches_removed"] == list(range(TO + 1, len(EPOCHS)))
    assert checkpoint_batches(config) == batches and heads_json(config, capsys)["head"]

    code, done = rewind_json(config, capsys, "--yes")
    assert code == 0 and done["applied"] and done["spark_query_id_cleared"]
    assert done["removals"] == dry["removals"]
    assert done["catalog"]["dropped"] and done["catalog"]["keys_dropped"] > 0
    assert done["checkpoint"] == dry["checkpoint"]
    assert heads_json(config, capsys)["head"]["epoch"] == TO

    code, refused = rewind_json(config, capsys, "--yes")
    assert code == 2 and not refused["applied"] and "already" in refused["refused"]
    assert refused["removals"] is None and refused["from_epoch"] == TO

    run_query(spark, config)
    ids = sink_ids(pg, unique_name)
    assert len(ids) == len(set(ids)) and set(ids) == ALL
    assert write_counts(pg, unique_name) == expected_attempts()
    assert insert_counts(pg, unique_name) == expected_writes()
