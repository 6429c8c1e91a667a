"""Elasticsearch indices, read and written with raw HTTP (``urllib``, no Elasticsearch client).

- :func:`read`: ``_refresh``, then every document through a scroll with ``version: true``,
  counted per key (the key fields of ``_source``); a ``_version`` above 1 is a document
  written more than once in place, counted as ``rewritten``;
- :func:`last_epoch`: the highest epoch field (a search sorted on it);
- :class:`Watch`: ``_refresh`` and ``_count`` polled every 20 ms: a count that grew is a
  bulk whose items were acknowledged;
- :func:`write_partition`: the control's ``_bulk`` of ``index`` actions WITHOUT ``_id``
  (Elasticsearch gives each a new one, so a second write is a second document).
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from exactlyonce.connectors.base.expected import spark_text
from exactlyonce.integration.lab.chaos.control.reading import Reading
from exactlyonce.integration.lab.chaos.control.target import Key, Target

READER = "raw HTTP scroll with _version (urllib)"
COMMIT_REQUEST = b"_bulk"  # the control's _bulk request
PAGE = 5_000
POLL_S = 0.02
TIMEOUT_S = 60.0


def _call(t: Target, method: str, path: str, body: Any = None, ndjson: bool = False) -> Any:
    """One request; the JSON reply (None for a 404)."""
    data = None
    headers = {"Accept": "application/json"}
    if body is not None:
        data = body.encode() if ndjson else json.dumps(body).encode()
        headers["Content-Type"] = "application/x-ndjson" if ndjson else "application/json"
    options = dict(t.options)
    if "api_key" in options:
        headers["Authorization"] = f"ApiKey {options['api_key']}"
    elif "username" in options:
        pair = f"{options['username']}:{options.get('password', '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    context = ssl.create_default_context(cafile=options.get("ca_certs"))
    request = urllib.request.Request(
        t.address.rstrip("/") + path, data=data, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as reply:
            return json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def _index(t: Target) -> str:
    return "/" + quote(t.name, safe="")


def read(t: Target) -> Reading:
    found: Counter[Key] = Counter()
    nulls = rewritten = 0
    if _call(t, "POST", f"{_index(t)}/_refresh") is None:
        return Reading(READER, t.describe(), found)
    query = {"size": PAGE, "version": True, "sort": ["_doc"], "query": {"match_all": {}}}
    page = _call(t, "POST", f"{_index(t)}/_search?scroll=2m", query)
    while page and page["hits"]["hits"]:
        for hit in page["hits"]["hits"]:
            source = hit.get("_source") or {}
            values = [source.get(k) for k in t.keys]
            if any(v is None for v in values):
                nulls += 1
            else:
                found[tuple(spark_text(v) for v in values)] += 1
            rewritten += int(hit.get("_version", 1)) > 1
        page = _call(
            t, "POST", "/_search/scroll", {"scroll": "2m", "scroll_id": page["_scroll_id"]}
        )
    if page and page.get("_scroll_id"):
        _call(t, "DELETE", "/_search/scroll", {"scroll_id": page["_scroll_id"]})
    return Reading(READER, t.describe(), found, nulls, rewritten)


def last_epoch(t: Target) -> int | None:
    if _call(t, "POST", f"{_index(t)}/_refresh") is None:
        return None
    query = {"size": 1, "sort": [{t.epoch: "desc"}], "_source": [t.epoch]}
    hits = (_call(t, "POST", f"{_index(t)}/_search", query) or {}).get("hits", {}).get("hits")
    if not hits:
        return None
    value = (hits[0].get("_source") or {}).get(t.epoch)
    return None if value is None else int(value)


class Watch:
    """Acknowledged bulk items, seen as a grown ``_count`` (refreshed each time)."""

    def __init__(self, t: Target) -> None:
        self.t = t
        self.count = self._count()

    def _count(self) -> int:
        if _call(self.t, "POST", f"{_index(self.t)}/_refresh") is None:
            return 0
        return int((_call(self.t, "GET", f"{_index(self.t)}/_count") or {}).get("count", 0))

    def seen(self, timeout: float, alive: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive():
            if self._count() > self.count:
                return True
            time.sleep(POLL_S)
        return False

    def close(self) -> None:
        pass


def prepare(t: Target) -> None:
    """Nothing: the first bulk creates the index (dynamic mapping)."""


def write_partition(
    t: Target, epoch: int, rows: Sequence[tuple[Any, ...]], mid: Callable[[], None]
) -> None:
    """``_bulk`` ``index`` actions without ``_id``, one request per half."""
    action = json.dumps({"index": {"_index": t.name}})
    half = len(rows) // 2
    for n, part in enumerate((rows[:half], rows[half:])):
        if n:
            mid()
        if not part:
            continue
        lines = []
        for row in part:
            lines += [action, json.dumps({**dict(zip(t.keys, row, strict=True)), t.epoch: epoch})]
        reply = _call(t, "POST", "/_bulk", "\n".join(lines) + "\n", ndjson=True)
        if reply is None or reply.get("errors"):
            raise RuntimeError(f"the control's bulk was refused: {str(reply)[:200]}")
