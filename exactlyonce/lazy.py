"""A package's public names, imported on first use (PEP 562).

A Spark task that unpickles one class imports every package on that class's module path. A
package that imports all of its modules up front makes each cold Python worker pay for the
driver's side too (pydantic, the keeper, the other sinks' clients). Such a package names its
exports' modules instead, for type checkers under ``if TYPE_CHECKING:``, and ends with::

    __getattr__, __dir__ = lazy_exports(globals(), {"Name": "exactlyonce.pkg.module", ...})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], sources: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of the package whose globals are
    ``namespace``: each name of ``sources`` (name -> the module defining it) is imported when
    first asked for and then kept in ``namespace``, so later lookups do not come back here;
    ``dir()`` lists the package's ``__all__``."""
    package = namespace["__name__"]

    def module_getattr(name: str) -> Any:
        source = sources.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    def module_dir() -> list[str]:
        return sorted(namespace.get("__all__", ()))

    return module_getattr, module_dir
