"""Types of the native produce loop (``_arrowproduce.c``); see :mod:`.arrowproduce`."""

from typing import Any

def load(path: str, producer_type: type) -> None: ...
def client_name(producer: Any) -> str: ...
def produce(
    producer: Any,
    topic: str,
    partition: int,
    values: tuple[Any, Any, Any, int, int, int],
    keys: tuple[Any, Any, Any, int, int, int] | None,
    header_name: str,
    prefix: bytes,
    ids: tuple[Any, Any, Any, int, int, int],
    start: int,
) -> tuple[int, int]: ...
