"""A buffered pipeline's drainer as ``exactlyonce chaos`` runs it: ``exactlyonce drain`` as a
process of its own (a session of its own), going alongside the runs from the first one on,
SIGKILLed by ``drainer_kill`` faults and started again; stopped before the last drain
(``exactlyonce drain --until-idle``) empties the buffer.

Its progress is the drain's own output: one ``drained ...`` line per write transaction.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from exactlyonce.integration.lab.runs import kill_group

STOP_TIMEOUT_S = 30.0


@dataclass
class DrainerProcess:
    """``exactlyonce drain CONFIG`` (restarted as ``drainer-N.log``)."""

    config: str
    log_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    starts: int = 0
    proc: subprocess.Popen[str] | None = None

    @property
    def log(self) -> Path:
        return self.log_dir / f"drainer-{self.starts}.log"

    def start(self) -> None:
        """Start the drainer (once it is not running)."""
        if self.alive():
            return
        self.starts += 1
        cmd = [sys.executable, "-m", "exactlyonce.integration.cli", "drain", self.config]
        with open(self.log, "w", encoding="utf-8") as out:
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, **self.env},
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def transactions(self) -> int:
        """Write transactions the running drainer reported so far."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return 0
        return sum(1 for line in text.splitlines() if line.startswith("drained "))

    def wait_for_transactions(self, count: int, timeout: float) -> bool:
        """True once the running drainer reported ``count`` transactions; False if it ended
        or ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while self.transactions() < count:
            if not self.alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def kill(self) -> int:
        """SIGKILL the drainer's session; its pid."""
        assert self.proc is not None
        pid = self.proc.pid
        kill_group(self.proc)
        self.proc = None
        return pid

    def stop(self) -> None:
        """SIGTERM (the drainer ends its transaction and stops), SIGKILL if it does not."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                kill_group(self.proc)
        self.proc = None
