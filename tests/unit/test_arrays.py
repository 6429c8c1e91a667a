"""The task path builds and reads Arrow arrays without pyarrow importing pandas (about 1.3 s
in every fresh Spark Python worker, paid by the first epoch of each start)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa

from exactlyonce.connectors.base import arrays


def test_builders_round_trip() -> None:
    assert arrays.int64s([3, -1]).to_pylist() == [3, -1]
    assert arrays.int64s([]).to_pylist() == []
    assert arrays.ints_like([2, 0], pa.int32()).type == pa.int32()
    assert arrays.ints_like([2, 0], pa.int32()).to_pylist() == [2, 0]
    assert arrays.int32_lists([[1], [], [2, 3]]).to_pylist() == [[1], [], [2, 3]]
    assert arrays.strings(["a", None, "\u00e9t\u00e9"]).to_pylist() == ["a", None, "\u00e9t\u00e9"]
    assert arrays.bools(np.array([True, False, True])).to_pylist() == [True, False, True]
    column = pa.chunked_array([pa.array([5, 6, 7], pa.int32())]).combine_chunks().slice(1)
    assert arrays.int_values(column).tolist() == [6, 7]


PROBE = """
import sys
import numpy as np
import pyarrow as pa
from exactlyonce.connectors.base.arrays import bools, int_values
from exactlyonce.connectors.base.report import TaskResult
from exactlyonce.connectors.base.workers import _compile_probe

TaskResult(shards=[0, 1], writer="w").to_arrow()
batch = pa.RecordBatch.from_arrays([bools(np.array([True]))], names=["b"])
int_values(TaskResult(shards=[1]).to_arrow().column("rows"))
list(_compile_probe()(iter([batch])))
print("pandas" in sys.modules)
"""


WRITER = """
import sys
import exactlyonce.connectors.postgres.writer
print(sorted(m for m in ("pydantic", "exactlyonce.connectors.base.sink", "exactlyonce.dedup.keeper")
             if m in sys.modules))
"""


def test_a_task_imports_no_driver_side_module() -> None:
    """Unpickling a PostgreSQL task writer imports its package on the way: the sink, the
    config models (pydantic) and the catalog keeper stay out (~1 s per cold worker)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WRITER)], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_task_results_and_the_worker_probe_do_not_import_pandas() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE)], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False", done.stdout + done.stderr
