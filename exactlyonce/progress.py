"""Progress of a long task: a bar with rate and ETA on a terminal, plain lines elsewhere.

Every layer may use it (it imports nothing of ours): the catalog rebuild (dedup), the drainer
CLI, the audit and the demo. On a terminal (the stream is a TTY) it draws a tqdm bar; when the
output goes to a file or a pipe it prints one plain line every ``every_s`` seconds and one at
the end, so logs stay readable::

    catalog rebuild: 1,200,000/3,000,000 IDs (40%), 410,000 IDs/s, ETA 4 s

``total`` may be unknown (None) or change while the task runs (a drain's lag grows).

The rate (and the ETA from it) is measured from the first update that brought work, not from
the start: what comes before the first rows (Spark's JVM starting, a connection opening) is
not throughput, and the first update's work arrived all at once at its end. Until a second
update there is no rate, and no ETA, to show.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, TextIO

PLAIN_EVERY_S = 5.0
# tqdm's own rate and ETA count from the bar's start: ours (:meth:`Progress.rate`) go in
# the postfix instead.
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
COUNT_FORMAT = "{desc}: {n_fmt}{unit} [{elapsed}{postfix}]"  # no total (yet): no bar


class Progress:
    """``update(n)`` as work gets done, ``close()`` (or ``with``) at the end."""

    def __init__(
        self,
        what: str,
        *,
        total: int | None = None,
        unit: str = "rows",
        stream: TextIO | None = None,
        every_s: float = PLAIN_EVERY_S,
        bar: bool | None = None,
    ) -> None:
        self.what, self.unit, self.total = what, unit, total
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.done = 0
        self.began = self._shown_at = time.monotonic()
        self._first: tuple[float, int] | None = None  # (when, done) at the first work done
        self._bar: Any = None
        if bar if bar is not None else _is_terminal(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, desc=what, unit=f" {unit}", unit_scale=True, file=self.stream,
                dynamic_ncols=True, mininterval=0.5, bar_format=self._bar_format(),
            )  # fmt: skip

    def update(self, n: int, total: int | None = None) -> None:
        """``n`` more done; ``total``, when given, is the new total."""
        self.done += n
        now = time.monotonic()
        if self._first is None and self.done > 0:
            self._first = (now, self.done)
        if total is not None:
            self.total = total
        if self._bar is not None:
            if total is not None:
                self._bar.total = total
                self._bar.bar_format = self._bar_format()
            self._bar.set_postfix_str(self._rate_text(), refresh=False)
            self._bar.update(n)  # redraws at most every mininterval
            return
        if now - self._shown_at >= self.every_s:
            self._shown_at = now
            self._line(self.line())

    def write(self, text: str, stream: TextIO | None = None) -> None:
        """Print ``text`` on its own line (above the bar on a terminal)."""
        out = stream if stream is not None else sys.stdout
        if self._bar is not None:
            self._bar.write(text, file=out)
        else:
            print(text, file=out, flush=True)

    def rate(self) -> float | None:
        """Work done a second since the first update that brought work (that update's work
        not counted: it arrived all at once); None before a second update."""
        if self._first is None:
            return None
        at, done = self._first
        seconds = time.monotonic() - at
        if self.done <= done or seconds <= 0:
            return None
        return (self.done - done) / seconds

    def line(self, *, eta: bool = True) -> str:
        """Where the task is, in words: done/total, percent, rate and (unless ``eta`` is
        False: a task that has ended) ETA when known."""
        text = f"{self.what}: {self.done:,}"
        if self.total:
            text += f"/{self.total:,} {self.unit} ({self.done / self.total:.0%})"
        else:
            text += f" {self.unit}"
        rate = self._rate_text(eta=eta)
        return f"{text}, {rate}" if rate else text

    def _rate_text(self, *, eta: bool = True) -> str:
        """``410,000 IDs/s, ETA 4 s`` (no ETA unless ``eta``); empty while the rate is
        unknown."""
        rate = self.rate()
        if rate is None:
            return ""
        text = f"{rate:,.0f} {self.unit}/s"
        if eta and self.total and rate > 0 and self.done < self.total:
            text += f", ETA {(self.total - self.done) / rate:,.0f} s"
        return text

    def _bar_format(self) -> str:
        return BAR_FORMAT if self.total else COUNT_FORMAT

    def close(self) -> None:
        """The last line: what was done and in how long (no ETA: the task has ended, even
        if short of its total)."""
        if self._bar is not None:
            self._bar.set_postfix_str(self._rate_text(eta=False), refresh=False)
            self._bar.close()
            self._bar = None
            return
        seconds = time.monotonic() - self.began
        text = self.line(eta=False)
        if self.rate() is None and self.done and seconds > 0:  # all in one update: the average
            text += f", {self.done / seconds:,.0f} {self.unit}/s"
        self._line(f"{text}; done in {seconds:,.1f} s")

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False
