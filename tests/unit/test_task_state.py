"""The shard task is a small state machine: NEW -> OPEN -> COMMITTED | FAILED -> CLOSED."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pytest

from exactlyonce.connectors.base import ERROR_COLUMN, PAYLOAD_COLUMN, SHARD_COLUMN, DeadLetter
from exactlyonce.connectors.base.task import ShardTask, TaskStatus
from exactlyonce.errors import TaskStateError


class Recording(ShardTask):
    def __init__(self, fail_write: bool = False) -> None:
        super().__init__(epoch=3, id_column="rid", columns=["v", "rid"], dedup=None)
        self.calls: list[str] = []
        self.fail_write = fail_write

    def _open(self) -> set[int]:
        self.calls.append("open")
        return set()

    def _write_rows(self, rows: pa.RecordBatch) -> None:
        self.calls.append(f"write {rows.num_rows}")
        if self.fail_write:
            raise OSError("connection lost")

    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        self.calls.append(f"dead {len(letters)}")

    def _commit(self, new_shards: Sequence[int]) -> None:
        self.calls.append(f"commit {list(new_shards)}")

    def _close(self) -> None:
        self.calls.append("close")


def batch(n: int, shard: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "v": list(range(n)),
            "rid": [f"{i:032x}" for i in range(n)],
            SHARD_COLUMN: pa.array([shard] * n, pa.int32()),
            ERROR_COLUMN: pa.array([None] * n, pa.string()),
            PAYLOAD_COLUMN: pa.array([None] * n, pa.string()),
        }
    )


def test_happy_path_goes_new_open_committed_closed() -> None:
    task = Recording()
    assert task.state is TaskStatus.NEW
    task.write(batch(0))
    assert task.state is TaskStatus.NEW and task.calls == []  # an empty batch touches nothing
    task.write(batch(2, shard=1))
    assert task.state is TaskStatus.OPEN
    task.commit()
    assert task.state is TaskStatus.COMMITTED
    task.close()
    task.close()  # safe twice
    assert task.state is TaskStatus.CLOSED
    assert task.calls == ["open", "write 2", "commit [1]", "close"]


def test_an_error_fails_the_task_and_refuses_the_commit() -> None:
    task = Recording(fail_write=True)
    with pytest.raises(OSError):
        task.write(batch(1))
    assert task.state is TaskStatus.FAILED
    with pytest.raises(TaskStateError, match="failed"):
        task.commit()
    with pytest.raises(TaskStateError):
        task.write(batch(1))
    task.close()
    assert "commit" not in " ".join(task.calls)


def test_no_write_or_commit_after_commit() -> None:
    task = Recording()
    task.write(batch(1))
    task.commit()
    with pytest.raises(TaskStateError, match="committed"):
        task.write(batch(1))
    with pytest.raises(TaskStateError):
        task.commit()


def test_run_closes_even_when_it_fails() -> None:
    task = Recording(fail_write=True)
    with pytest.raises(OSError):
        task.run(iter([batch(2)]))
    assert task.state is TaskStatus.CLOSED
    assert task.calls[-1] == "close"


def test_a_task_without_rows_commits_nothing() -> None:
    task = Recording()
    result = task.run(iter([batch(0)]))
    assert task.calls == ["close"] and result.shards == []
