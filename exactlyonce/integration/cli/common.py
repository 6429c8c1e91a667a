"""What every ``exactlyonce`` command shares: exit codes and printing an error."""

from __future__ import annotations

import sys

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130


def err(message: str) -> None:
    """Print ``message`` to stderr at once (the caller scrubs secrets out of it)."""
    print(message, file=sys.stderr, flush=True)
