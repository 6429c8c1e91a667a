"""The Elasticsearch stand-in with a data directory (exactlyonce/integration/lab/es_stand_in/
journal.py): what it acknowledged is there after a restart, with the same versions, sequence
numbers, mappings and write counts; a record torn by a kill is cut off; a SIGKILLed process
keeps every write it acknowledged. Checked with the official client over a real socket."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import ConflictError, Elasticsearch, NotFoundError

from exactlyonce.integration.lab.es_stand_in import EsTestServer
from exactlyonce.integration.lab.es_stand_in.journal import FILE

ROOT = Path(__file__).resolve().parents[2]


def state(server: EsTestServer, index: str) -> dict[str, Any]:
    """Everything a restart must keep of ``index``, as the server's test API reads it."""
    found = server.index(index)
    return {
        "uuid": found.uuid,
        "mappings": found.mappings(),
        "seq_no": found.seq_no,
        "docs": {i: (d.source, d.version, d.seq_no) for i, d in found.docs.items()},
        "tombstones": dict(found.tombstones),
        "write_log": server.write_log(index),
        "versions": server.versions_written(index),
    }


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "es-data"


@pytest.fixture
def written(data: Path) -> Iterator[dict[str, Any]]:
    """A server on ``data`` that took creates, a conflict, an overwrite, a delete, a mapping
    change and a dropped index; its state, as it was before it stopped."""
    with EsTestServer(data=data) as server, Elasticsearch(server.url) as es:
        es.indices.create(index="kept", mappings={"properties": {"n": {"type": "long"}}})
        es.bulk(
            operations=[
                {"create": {"_index": "kept", "_id": "a"}},
                {"n": 1},
                {"create": {"_index": "kept", "_id": "b"}},
                {"n": 2},
                {"index": {"_index": "kept", "_id": "a"}},
                {"n": 3, "added": "text"},
            ]
        )
        with pytest.raises(ConflictError):
            es.create(index="kept", id="b", document={"n": 9})
        es.delete(index="kept", id="b")
        es.index(index="gone", id="x", document={"n": 0})
        es.indices.delete(index="gone")
        yield state(server, "kept")


def test_a_restarted_server_answers_what_it_acknowledged(
    data: Path, written: dict[str, Any]
) -> None:
    with EsTestServer(data=data) as server, Elasticsearch(server.url) as es:
        assert state(server, "kept") == written
        assert es.get(index="kept", id="a")["_version"] == 2
        assert es.count(index="kept")["count"] == 1, "recovery ends with a refresh"
        with pytest.raises(NotFoundError):
            es.get(index="gone", id="x")
        assert es.index(index="kept", id="b", document={"n": 4})["_version"] == 3, (
            "the tombstone's version is kept"
        )


def test_a_record_torn_by_a_kill_is_cut_off(data: Path, written: dict[str, Any]) -> None:
    journal = data / FILE
    with journal.open("ab") as f:
        f.write(b"\x00\x00\x01\x00torn")  # a frame's head, and less than its length
    with EsTestServer(data=data) as server, Elasticsearch(server.url) as es:
        assert not journal.read_bytes().endswith(b"torn"), "the torn record is cut off"
        assert state(server, "kept") == written
        es.index(index="kept", id="c", document={"n": 5})
    with EsTestServer(data=data) as server:
        assert server.version("kept", "c") == 1, "what came after the cut is read"


def test_without_a_data_directory_nothing_is_written(tmp_path: Path) -> None:
    with EsTestServer() as server, Elasticsearch(server.url) as es:
        es.index(index="e", id="1", document={"n": 1})
        assert server.journal is None
    assert list(tmp_path.iterdir()) == []


def test_a_killed_process_keeps_every_write_it_acknowledged(data: Path) -> None:
    """Single-document writes in a loop; SIGKILL while they go on; a new process on the same
    directory holds every one that was acknowledged, each at the version it was given."""
    proc = _start(data)
    acknowledged: dict[str, int] = {}
    try:
        url = _url(proc)
        stop = threading.Event()

        def write() -> None:
            with Elasticsearch(url, request_timeout=5, max_retries=0) as es:
                n = 0
                while not stop.is_set():
                    try:
                        reply = es.index(index="k", id=str(n % 50), document={"n": n})
                    except Exception:
                        return  # killed
                    acknowledged[str(n % 50)] = int(reply["_version"])
                    n += 1

        writer = threading.Thread(target=write)
        writer.start()
        while len(acknowledged) < 50:
            time.sleep(0.01)
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        stop.set()
        writer.join(timeout=10)
    finally:
        _stop(proc)
    proc = _start(data)
    try:
        with Elasticsearch(_url(proc)) as es:
            for doc_id, version in acknowledged.items():
                found = es.get(index="k", id=doc_id)["_version"]
                # the write in flight at the kill may have been applied without its reply
                assert found in (version, version + 1), (doc_id, version, found)
    finally:
        _stop(proc)


def _start(data: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "exactlyonce.integration.lab.es_stand_in", "--data", str(data)]
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _url(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("es_server listening on "), line
    return line.split()[-1]


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def test_a_long_journal_is_rewritten_as_its_state_at_start(data: Path) -> None:
    with EsTestServer(data=data) as server, Elasticsearch(server.url) as es:
        for n in range(30):
            es.index(index="e", id="one", document={"n": n})
        before = state(server, "e")
    grown = (data / FILE).stat().st_size
    with EsTestServer(data=data) as server:
        assert state(server, "e") == before
    assert (data / FILE).stat().st_size < grown / 5, "two records now: the index and its _id"
    with EsTestServer(data=data) as server, Elasticsearch(server.url) as es:
        assert state(server, "e") == before
        assert es.index(index="e", id="one", document={"n": 30})["_version"] == 31
