"""exactlyonce: exactly-once sinks for PySpark Structured Streaming."""

from __future__ import annotations

__version__ = "0.1.0"


def quiet() -> None:
    """Turn off the one line per batch the sinks log (shown on stderr by default when no
    logging is configured; see :mod:`exactlyonce.connectors.base.logs`). Warnings still show."""
    from exactlyonce.connectors.base.logs import quiet as quiet_batches

    quiet_batches()
