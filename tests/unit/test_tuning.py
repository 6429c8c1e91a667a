"""The drainer's interpreter settings (exactlyonce.buffer.tuning): the cyclic GC paused while it
reads a chunk, the GIL switch interval while it drains; both given back as found."""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from exactlyonce.buffer.tuning import gc_paused as _gc_paused
from exactlyonce.buffer.tuning import switch_interval


def test_pause_restores_an_enabled_collector_after_the_last_of_nested_pauses() -> None:
    assert gc.isenabled()
    with _gc_paused():
        assert not gc.isenabled()
        with _gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "the outer pause still holds"
    assert gc.isenabled()


def test_pause_leaves_a_collector_the_user_disabled_disabled() -> None:
    gc.disable()
    try:
        with _gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_in_threads_end_with_the_last_one() -> None:
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with _gc_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with _gc_paused():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled(), "the other thread's pause is still on"
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_an_exception_inside_still_restores_the_collector() -> None:
    try:
        with _gc_paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()


def test_switch_interval_applies_inside_and_restores_the_value_from_before() -> None:
    before = sys.getswitchinterval()
    with switch_interval(0.0005):
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        with switch_interval(0.0005):
            pass
        assert sys.getswitchinterval() == pytest.approx(0.0005), "the outer use still holds"
    assert sys.getswitchinterval() == before


def test_switch_interval_none_changes_nothing() -> None:
    before = sys.getswitchinterval()
    with switch_interval(None):
        assert sys.getswitchinterval() == before
    assert sys.getswitchinterval() == before


def test_switch_interval_is_restored_after_an_exception() -> None:
    before = sys.getswitchinterval()
    with pytest.raises(ValueError), switch_interval(0.001):
        raise ValueError("boom")
    assert sys.getswitchinterval() == before
