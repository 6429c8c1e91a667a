"""Bulk requests that retry only what failed.

:class:`BulkSender` sends actions through the client's ``helpers.streaming_bulk`` (cut by count
and bytes; :meth:`~exactlyonce.connectors.search.engine.Client.streaming_bulk`)
until each is answered: 429/5xx items alone are re-sent, waiting as the policy's
:meth:`~exactlyonce.retry.RetryPolicy.waits` say; a lost reply re-sends every item it left
unknown (the same ``_id``\\ s, never new ones); a 413 item is re-sent on its own; items refused
for their content (400, and 413 alone) are returned for the dead-letter index.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from exactlyonce.connectors.search.connection import SearchConnection
from exactlyonce.connectors.search.engine import Client, Unreachable
from exactlyonce.connectors.search.policy import retryable_status
from exactlyonce.errors import SinkUnavailableError
from exactlyonce.retry import RetryPolicy
from exactlyonce.secrets import scrub


class RawHeader(bytes):
    """A bulk action header serialised once (``{"create":{...}}`` as JSON bytes), sent as it
    is: the client's per-action ``json.dumps`` was a fifth of a drain's CPU. ``copy()`` gives
    the dict back, which ``helpers.streaming_bulk`` asks of a header when it reports a request
    that failed whole."""

    def copy(self) -> dict[str, Any]:
        return dict(json.loads(self))


# (bulk header, _source): each a dict, or JSON bytes sent as they are; _source None: a delete
Action = tuple[dict[str, Any] | RawHeader, dict[str, Any] | bytes | None]
ITEM_ANSWERS = "items.*.status,items.*.error"  # a BulkSender's filter_path: what it reads
Refused = list[tuple[int, str]]  # (position in the actions, error)


class Tally(Protocol):
    """Where acknowledged items are counted (the task's result)."""

    written: int
    duplicates: int
    stale: int
    deleted: int


def reason(info: dict[str, Any]) -> str:
    """An item's error as ``type: reason``."""
    error = info.get("error")
    if isinstance(error, dict):
        return f"{error.get('type', '')}: {error.get('reason', '')}"
    return str(error)


def header_of(action: Action) -> dict[str, Any]:
    """An action's bulk header as a dict (a :class:`RawHeader` parsed back)."""
    header = action[0]
    return header.copy() if isinstance(header, RawHeader) else header


@dataclass
class _Batch:
    """One :meth:`BulkSender.send`: its actions and what is known of them so far."""

    actions: Sequence[Action]
    what: str
    tally: Tally | None
    on_answer: Callable[[], None] | None
    unknown: set[int] = field(default_factory=set)  # sent, but the reply was lost
    refused: Refused = field(default_factory=list)


@dataclass
class _Round:
    """What one pass over the pending items left to do."""

    solo: bool  # one item per request (after a 413)
    retry: list[int] = field(default_factory=list)
    oversize: list[int] = field(default_factory=list)
    last: str = ""


@dataclass
class BulkSender:
    """Sends one task's bulk actions; see the module docstring. Lives in the executor task."""

    client: Client
    conn: SearchConnection
    policy: RetryPolicy
    max_actions: int
    max_bytes: int
    epoch: int
    # What of each answer to ask for (the engine's filter_path): None, everything. The
    # statuses and errors are all this sender reads (ITEM_ANSWERS).
    answers: str | None = None

    def send(
        self,
        actions: Sequence[Action],
        what: str,
        tally: Tally | None = None,
        on_answer: Callable[[], None] | None = None,
    ) -> Refused:
        """Send ``actions`` until each is acknowledged; return those refused for content.

        A 409 on ``create`` is an earlier copy: a duplicate, or our own write whose reply was
        lost (then counted as written). A 409 on an externally versioned ``index`` or
        ``delete`` (upserts) means a newer epoch is stored: a no-op, counted ``stale``. A
        delete's 404 still left its tombstone: counted ``deleted`` like a 200. With ``tally``,
        items are counted there and ``on_answer`` runs as each item is answered. Raises
        SinkUnavailableError once the policy's waits are spent (the caller then marks nothing
        committed).
        """
        batch = _Batch(actions, what, tally, on_answer)
        waits = self.policy.waits()
        pending = list(range(len(actions)))
        solo = False
        while pending:
            done = self._round(batch, pending, solo)
            if done.oversize and not done.retry:
                pending, solo = done.oversize, True
                continue
            pending = sorted(done.retry + done.oversize)
            solo = bool(done.oversize)
            if not pending:
                break
            wait = next(waits, None)
            if wait is None:
                raise SinkUnavailableError(
                    f"{self.conn.name} at {self.conn.where} still failed {len(pending)} of "
                    f"{len(actions)} {what} of epoch {self.epoch} after {self.policy.retries} "
                    f"retries ({done.last}); the task fails, nothing of it is marked committed"
                )
            time.sleep(wait)
        return batch.refused

    def _round(self, batch: _Batch, pending: list[int], solo: bool) -> _Round:
        """One streaming_bulk pass over ``pending``; sorts each answer."""
        done = _Round(solo)
        answered = 0
        try:
            results = self.client.streaming_bulk(
                (batch.actions[p] for p in pending),
                chunk_size=1 if solo else self.max_actions,
                max_chunk_bytes=self.max_bytes,
                filter_path=self.answers,
            )
            for ok, item in results:
                pos = pending[answered]
                answered += 1
                if batch.tally is not None and batch.on_answer is not None:
                    batch.on_answer()
                self._sort(batch, done, ok, item, pos)
        except Unreachable as exc:  # sent; the outcome unknown
            rest = pending[answered:]
            batch.unknown.update(rest)
            done.retry.extend(rest)
            done.last = scrub(str(exc), *self.conn.secrets())
        return done

    def _sort(self, batch: _Batch, done: _Round, ok: bool, item: dict[str, Any], pos: int) -> None:
        """Count, retry, split or refuse one answered item."""
        op, info = item.popitem()
        status = info.get("status")
        tally = batch.tally
        if op == "delete" and status in (200, 404):
            if tally is not None:
                tally.deleted += 1
        elif status == 409 and "version" in header_of(batch.actions[pos])[op]:
            if tally is not None:
                tally.stale += 1
        elif ok or (status == 409 and op == "create"):
            if tally is not None and (ok or pos in batch.unknown):
                tally.written += 1
            elif tally is not None:
                tally.duplicates += 1
        elif retryable_status(status):
            done.retry.append(pos)
            done.last = f"HTTP {status} {reason(info)}"
        elif status == 413 and not done.solo:
            done.oversize.append(pos)
        elif status == 413:  # sent alone and still too large: the record is the problem
            batch.refused.append((pos, f"413: {reason(info)}"))
        elif "exception" in info:  # the whole request failed, not this item
            raise SinkUnavailableError(
                f"{self.conn.name} at {self.conn.where} refused a bulk request of "
                f"{batch.what}: HTTP {status} {scrub(reason(info), *self.conn.secrets())}"
            )
        elif status in (400, 413):
            batch.refused.append((pos, f"{status}: {reason(info)}"))
        else:
            raise SinkUnavailableError(
                f"{self.conn.name} refused {batch.what} with HTTP {status}: {reason(info)}"
            )
