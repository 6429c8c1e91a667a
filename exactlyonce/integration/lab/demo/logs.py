"""The demo process's own log: a file next to the runs' logs, so its terminal tells the story
(runs, kills, progress, audits) and nothing else.

Client libraries log into it. The Kafka clients of the demo process (its producer, the topics'
admin client, the audit's consumer, the Kafka sink's preflight and head reader) are built
with ``logger=`` :data:`~exactlyonce.connectors.kafka.clients.client_log`: librdkafka's own
lines, such as ``GETPID ... Coordinator load in progress: retrying`` while a fresh broker
loads its transaction state. librdkafka retries those itself; an error that changes the
outcome comes back as an exception and ends the demo with its message. Without a handler,
Python's last-resort handler put each of their warnings on the terminal. Python warnings of
the demo process go into the file too. The runs (``exactlyonce run``) log into their own
files: Spark's JVM, py4j and the clients of the run, all of its stderr.

On the terminal: the package's own warnings and errors (a broker without transaction
markers, say), and, if the demo ends with an error, where this file is.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from exactlyonce.connectors.kafka.clients import client_log

DEMO_LOG = "demo.log"
PACKAGE = "exactlyonce"
FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TERMINAL_FORMAT = "%(levelname)s %(name)s: %(message)s"


@contextmanager
def logs_to(path: Path) -> Iterator[None]:
    """While inside: the package's log lines (INFO and up, the clients' included) and Python
    warnings into ``path``; on stderr only the package's warnings and errors that are not a
    client library's. These two handlers are the package logger's only ones meanwhile (none
    set up earlier, nor the root logger's, sees its lines); all is as it was afterwards."""
    package, warned = logging.getLogger(PACKAGE), logging.getLogger("py.warnings")
    to_file = logging.FileHandler(path, mode="w", encoding="utf-8")  # this run's, as the runs'
    to_file.setFormatter(logging.Formatter(FILE_FORMAT))
    to_terminal = logging.StreamHandler(sys.stderr)
    to_terminal.setFormatter(logging.Formatter(TERMINAL_FORMAT))
    to_terminal.setLevel(logging.WARNING)
    to_terminal.addFilter(_not_a_client_line)
    saved = (package.handlers[:], package.level, package.propagate, warned.propagate)
    package.handlers = [to_file, to_terminal]
    package.setLevel(logging.INFO)
    package.propagate = False
    warned.addHandler(to_file)
    warned.propagate = False
    logging.captureWarnings(True)
    try:
        yield
    except BaseException as exc:
        if not (isinstance(exc, SystemExit) and exc.code in (0, None)):
            print(f"(the demo's own log: {path})", file=sys.stderr, flush=True)
        raise
    finally:
        logging.captureWarnings(False)
        warned.removeHandler(to_file)
        package.handlers, level, package.propagate, warned.propagate = saved
        package.setLevel(level)
        to_file.close()


def _not_a_client_line(record: logging.LogRecord) -> bool:
    return not (record.name == client_log.name or record.name.startswith(client_log.name + "."))
