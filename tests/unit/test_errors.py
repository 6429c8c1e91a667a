"""Every error has one root and survives pickling (Spark moves them from workers to the driver)."""

from __future__ import annotations

import inspect
import pickle

import exactlyonce.errors as errors
from exactlyonce.errors import ConfigError, ExactlyOnceError, ExpiredRecordsError


def all_errors() -> list[type[BaseException]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == errors.__name__
    ]


def test_every_error_is_under_one_root() -> None:
    found = all_errors()
    assert {"CatalogLostError", "OffsetsMovedError", "TaskStateError"} <= {
        c.__name__ for c in found
    }
    assert all(issubclass(cls, ExactlyOnceError) for cls in found)


WITH_DATA: dict[type[BaseException], tuple[object, ...]] = {
    ConfigError: ("sink.table", "bad"),
    ExpiredRecordsError: ("buffer", 3, 10, 19, "records 10..19 of buffer[3] expired"),
}


def test_every_error_pickles_with_its_data() -> None:
    for cls in all_errors():
        error = cls(*WITH_DATA.get(cls, ("what happened",)))
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is cls and str(copy) == str(error)
    copy = pickle.loads(pickle.dumps(ConfigError("sink.table", "bad")))
    assert (copy.field, copy.reason) == ("sink.table", "bad")
    expired = pickle.loads(pickle.dumps(ExpiredRecordsError(*WITH_DATA[ExpiredRecordsError])))  # type: ignore[arg-type]
    assert (expired.topic, expired.partition, expired.first, expired.last) == ("buffer", 3, 10, 19)
    assert expired.field == "buffer.topic" and isinstance(expired, ConfigError)
