"""The Python side of the native produce loop (:mod:`exactlyonce.connectors.kafka.arrowproduce`):
the column buffers it hands the extension, and what it does with each refusal. The extension's
messages themselves are checked against a real broker (tests/integration/
test_kafka_native_produce.py)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from exactlyonce.connectors.kafka import arrowproduce
from exactlyonce.connectors.kafka.arrowproduce import (
    QUEUE_FULL,
    TOO_LARGE,
    column_buffers,
    produce_columns,
)
from exactlyonce.dedup.native import NATIVE_ENV


def test_column_buffers_carry_offset_width_and_nulls() -> None:
    sliced = pa.array([b"a", None, b"ccc", b"dd"], pa.binary()).slice(1)
    validity, offsets, data, wide, offset, length = column_buffers(sliced)
    assert (wide, offset, length) == (0, 1, 3)
    assert validity is not None and data.to_pybytes().startswith(b"a")
    large = column_buffers(pa.array(["x" * 3], pa.large_string()))
    assert large[0] is None and large[3] == 1  # no nulls: no validity; 64-bit offsets
    chunked = column_buffers(pa.chunked_array([["ab"], ["c"]], pa.string()))
    assert chunked[5] == 2
    with pytest.raises(TypeError, match="binary or string"):
        column_buffers(pa.array([1, 2]))


class _Module:
    """The extension's produce(), scripted: each call returns the next answer."""

    def __init__(self, answers: list[tuple[int, int]]) -> None:
        self.answers = answers
        self.starts: list[int] = []

    def produce(self, *args: Any) -> tuple[int, int]:
        self.starts.append(args[-1])
        return self.answers.pop(0)


class _Producer:
    def __init__(self) -> None:
        self.polls = 0

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


def _run(module: _Module, refused: dict[int, bool]) -> tuple[list[int], list[int], int]:
    producer = _Producer()
    asked: list[int] = []

    def on_refused(i: int) -> bool:
        asked.append(i)
        return refused[i]

    values = ids = pa.array([b"v"] * 10)
    too_large = produce_columns(module, producer, "t", values, None, ("eo", b"p|"), ids, on_refused)
    return too_large, asked, producer.polls


def test_a_full_queue_is_polled_and_resumed_at_the_refused_row() -> None:
    module = _Module([(4, QUEUE_FULL), (4, QUEUE_FULL), (10, 0)])
    assert _run(module, {}) == ([], [], 2)
    assert module.starts == [0, 4, 4]


def test_another_refusal_takes_the_python_path_for_that_row_only() -> None:
    module = _Module([(2, TOO_LARGE), (6, -1), (10, 0)])
    too_large, asked, polls = _run(module, {2: False, 6: True})
    assert (too_large, asked, polls) == ([2], [2, 6], 0)
    assert module.starts == [0, 3, 7]


def test_the_switch_turns_the_native_loop_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NATIVE_ENV, "0")
    arrowproduce.native_loop.cache_clear()
    try:
        assert arrowproduce.native_loop() is None
    finally:
        arrowproduce.native_loop.cache_clear()


def test_the_extension_refuses_what_is_not_a_producer() -> None:
    module = arrowproduce.native_loop()
    if module is None:
        pytest.fail("the native produce loop is not built here (pip install -e . builds it)")
    with pytest.raises(TypeError, match="Producer"):
        module.client_name(object())
