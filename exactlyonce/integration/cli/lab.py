"""The commands whose work is lab code (:mod:`exactlyonce.integration.lab`), by name.

The product never imports the lab, not even inside a function: ``exactlyonce chaos`` and
``exactlyonce services`` parse their arguments here in the CLI, then :func:`lab_command`
imports the function named in :data:`LAB_COMMANDS` (``"module:function"``) with
:mod:`importlib`, on use. A name is not an import, so import-linter's contract (the product
never imports the lab) holds, and an install without the lab still parses every command.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

LAB_COMMANDS: dict[str, str] = {
    # exactlyonce chaos: the parsed arguments (argparse.Namespace) -> exit code
    "chaos": "exactlyonce.integration.lab.chaos.command:cmd_chaos",
    # exactlyonce services: the argument list of `python -m ...lab.services` -> exit code
    "services": "exactlyonce.integration.lab.services.command:main",
}


def lab_command(name: str) -> Callable[..., Any]:
    """The function :data:`LAB_COMMANDS` names for ``name``, its module imported now.

    Raises ``ImportError`` when that module cannot be imported."""
    module, _, function = LAB_COMMANDS[name].partition(":")
    found: Callable[..., Any] = getattr(importlib.import_module(module), function)
    return found
