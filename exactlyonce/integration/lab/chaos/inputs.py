"""What ``exactlyonce chaos`` audits against: the expected IDs of the pipeline's input.

Three ways, in this order:

- ``--expected-ids FILE``: the audit's own file (:mod:`exactlyonce.connectors.base.expected`);
- ``--events N`` (a ``files`` source of JSON lines, or a ``kafka`` source of JSON values,
  keyed by one string column): a fresh, seeded input with the at-least-once duplicates of
  the demo's input (retries, replayed blocks, null keys:
  :mod:`exactlyonce.integration.lab.events`), written into the source directory, spread over
  files so each micro-batch reads a few, or produced into the Kafka source's topic, created
  for it (:mod:`.topic_input`); its expected-IDs file is written next to the logs, and the
  query is started afresh (:func:`fresh_query`);
- neither: the source itself, when it is a ``files`` source of JSON lines: each line's key
  values, a line with a null key counted as an expected dead letter; when its directory is
  missing, empty, or holds only files an earlier ``--events`` wrote, a fresh input is
  written as with ``--events`` (:func:`needs_fresh_input`), so ``exactlyonce chaos
  examples/pipeline.yaml`` works on a new checkout.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exactlyonce.dedup.ids import KAFKA_SOURCE_COLUMNS, record_id
from exactlyonce.errors import ConfigError
from exactlyonce.integration.audit import Expected, read_expected, spark_text
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.config.sources import FilesSourceConfig, KafkaSourceConfig
from exactlyonce.integration.maintenance import drop_catalog

FILE_PREFIX = "chaos-part-"  # the files --events writes (and may remove on its next run)


Key = tuple[str, ...]


@dataclass(frozen=True)
class ExpectedInput:
    """The IDs the sink must hold, the dead letters it must have (None: not checked), where
    they came from, and how many records of each key the input sent (None: unknown; the
    negative control may write a key that often, as any at-least-once writer does)."""

    ids: Expected
    dead_letters: int | None
    origin: str
    sent: Counter[Key] | None = None


def from_file(path: str) -> ExpectedInput:
    return ExpectedInput(read_expected(path), None, f"expected IDs from {path}")


def sent_keys(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Counter[Key]:
    """Records per key (as text) among ``rows``; rows with a null key are left out."""
    sent: Counter[Key] = Counter()
    for row in rows:
        values = [row.get(c) for c in columns]
        if all(v is not None for v in values):
            sent[tuple(spark_text(v) for v in values)] += 1
    return sent


def from_source(cfg: PipelineConfig) -> ExpectedInput:
    """The expected IDs read from a ``files`` source of JSON lines."""
    directory = _json_files_dir(cfg, "--expected-ids")
    columns = list(cfg.sink.id_columns or ())
    ids: Expected = {}
    nulls = 0
    rows = []
    for path in sorted(
        p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")
    ):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            rows.append(row)
            values = [row.get(c) for c in columns]
            if any(v is None for v in values):
                nulls += 1
            else:
                ids[record_id(values)] = values
    return ExpectedInput(
        ids,
        nulls,
        f"expected IDs read from the source files in {directory}",
        sent_keys(rows, columns),
    )


def needs_fresh_input(cfg: PipelineConfig) -> bool:
    """True for a files source of JSON lines whose directory is missing, empty or holds
    only files an earlier ``--events`` wrote (a new user's first run, or a run again)."""
    source = cfg.source
    if not isinstance(source, FilesSourceConfig) or source.format != "json":
        return False
    directory = Path(source.path)
    if not directory.is_dir():
        return True
    return all(p.name.startswith((FILE_PREFIX, ".")) for p in directory.iterdir())


def write_events(
    cfg: PipelineConfig, events: int, seed: int, files: int, out: Path
) -> ExpectedInput:
    """A fresh seeded input of ``events`` distinct events and its expected-IDs file ``out``:
    into ``files`` files of a files source (replacing the ones an earlier ``--events``
    wrote), or produced into a Kafka source's topic (created: :mod:`.topic_input`). The
    expected IDs are the distinct key values, or with ``id_from: source`` every record's
    coordinates as the producer's delivery reports give them."""
    from exactlyonce.integration.lab.events import Expected as Planned
    from exactlyonce.integration.lab.events import generate

    by_coordinates = id_from(cfg) == "source"
    key = "event_id" if by_coordinates else _string_key(cfg)
    plan = generate(random.Random(seed), events)
    rows = _source_rows(plan.records, key, cfg.source.columns())
    placed: list[tuple[str, int, int]] = []
    if isinstance(cfg.source, KafkaSourceConfig):
        from exactlyonce.integration.lab.chaos.topic_input import produce_input

        where, placed = produce_input(cfg.source, rows, key)
    else:
        where = _write_files(cfg, rows, files)
    print(f"CHAOS input: {Planned.of(plan).describe()}; {where}; expected IDs in {out}")
    origin = f"--events {events} (seed {seed})"
    if by_coordinates:
        return _coordinates_expected(placed, out, origin)
    keys = sorted({r["event_id"] for r in plan.records if r["event_id"] is not None})
    out.write_text("".join(f"{k}\n" for k in keys))
    nulls = sum(1 for r in plan.records if r["event_id"] is None)
    return ExpectedInput(read_expected(out), nulls, origin, sent_keys(rows, [key]))


def id_from(cfg: PipelineConfig) -> str:
    """Where the sink's record IDs come from: ``source`` (a Kafka source's (topic, partition,
    offset), which ``id_from: source`` sets as the id columns), else the sink's ``id_from``
    (``columns`` or ``content``)."""
    columns = tuple(cfg.sink.id_columns or ())
    if isinstance(cfg.source, KafkaSourceConfig) and columns == KAFKA_SOURCE_COLUMNS:
        return "source"
    return str(getattr(cfg.sink, "id_from", "columns"))


def _coordinates_expected(
    placed: Sequence[tuple[str, int, int]], out: Path, origin: str
) -> ExpectedInput:
    """Every produced record one ID, its coordinates (no dead letter: none is null), written
    to ``out`` as JSON arrays; each sent once."""
    out.write_text("".join(json.dumps(list(c)) + "\n" for c in sorted(placed)))
    sent = Counter(tuple(spark_text(v) for v in c) for c in placed)
    return ExpectedInput(read_expected(out), 0, f"{origin}, IDs from delivery reports", sent)


def _source_rows(
    records: Sequence[dict[str, Any]], key: str, columns: Sequence[str]
) -> list[dict[str, Any]]:
    """The planned records as the source's rows: ``event_id`` named ``key``, and only the
    schema's other columns."""
    wanted = set(columns)
    return [
        {(key if k == "event_id" else k): v for k, v in r.items() if k == "event_id" or k in wanted}
        for r in records
    ]


def _write_files(cfg: PipelineConfig, rows: Sequence[dict[str, Any]], files: int) -> str:
    """``rows`` as JSON lines in ``files`` files of the files source's directory, replacing
    the ones an earlier ``--events`` wrote; where they went."""
    directory = _json_files_dir(cfg, "--events", create=True)
    theirs = [p.name for p in directory.iterdir() if not p.name.startswith((FILE_PREFIX, "."))]
    if theirs:
        raise ConfigError(
            "--events",
            f"{directory} holds files chaos did not write ({theirs[0]}, ...): give the "
            "source an empty directory",
        )
    for old in directory.glob(f"{FILE_PREFIX}*"):
        old.unlink()
    per_file = -(-len(rows) // max(1, files))
    for n, start in enumerate(range(0, len(rows), per_file)):
        tmp = directory / f".{FILE_PREFIX}{n:05d}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows[start : start + per_file]))
        tmp.rename(directory / f"{FILE_PREFIX}{n:05d}.json")
    return f"{n + 1} files in {directory}"


def fresh_query(cfg: PipelineConfig, config: str) -> None:
    """Nothing of an earlier run of the query: its committed epochs rewound away
    (``exactlyonce rewind --to-epoch -1 --yes``, which also drops the catalog and the
    checkpoint), else the checkpoint and catalog removed. ConfigError when the sink cannot
    rewind (Kafka, upserts, ...): a new ``query_name`` is then the fresh start."""
    sink = cfg.build_sink(check=False)
    if sink.head() is not None:
        cmd = [sys.executable, "-m", "exactlyonce.integration.cli", "rewind", config]
        done = subprocess.run(
            [*cmd, "--to-epoch", "-1", "--yes"], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["refused"]
            raise ConfigError(
                "--events",
                f"the query has committed epochs and rewinding them failed ({why[0]}); "
                "use a new query_name",
            )
        lines = done.stdout.strip().splitlines()
        rewound = [line for line in lines if line.startswith("rewound")]
        print(f"CHAOS fresh start: {(rewound or lines or [''])[0]}", flush=True)
    shutil.rmtree(cfg.checkpoint, ignore_errors=True)
    drop_catalog(sink)


def _json_files(cfg: PipelineConfig, option: str) -> FilesSourceConfig:
    """The pipeline's source when it is a files source of JSON lines, else ConfigError."""
    source = cfg.source
    if not isinstance(source, FilesSourceConfig) or source.format != "json":
        raise ConfigError(
            option,
            f"needs a files source of JSON lines (this one is {source.type}); "
            "give --expected-ids FILE, or --events N for a Kafka source",
        )
    return source


def _json_files_dir(cfg: PipelineConfig, option: str, create: bool = False) -> Path:
    source = _json_files(cfg, option)
    if cfg.sink.id_columns is None:
        raise ConfigError(option, "needs id_columns (records without a key have no expected IDs)")
    directory = Path(source.path)
    if create:
        directory.mkdir(parents=True, exist_ok=True)
    if not directory.is_dir():
        raise ConfigError("source.path", f"{directory} is not a directory")
    return directory


def _source_ddl(cfg: PipelineConfig) -> str:
    """The schema of the values ``--events`` writes: a Kafka source's (which must have one)
    or a files source's of JSON lines."""
    source = cfg.source
    if not isinstance(source, KafkaSourceConfig):
        return _json_files(cfg, "--events").ddl
    if source.ddl is None:
        raise ConfigError("--events", "writes JSON values: give the Kafka source a schema")
    return source.ddl


def _string_key(cfg: PipelineConfig) -> str:
    """The one id column, which must be a STRING column of the schema of a files source of
    JSON lines or of a Kafka source (its values as JSON)."""
    columns = list(cfg.sink.id_columns or ())
    if len(columns) != 1:
        raise ConfigError("--events", f"writes events keyed by one column; id_columns is {columns}")
    key = columns[0]
    typed = re.search(rf"(?i)(?:^|,)\s*`?{re.escape(key)}`?\s*:?\s*(\w+)", _source_ddl(cfg))
    if typed is None or typed.group(1).upper() != "STRING":
        raise ConfigError("--events", f"writes string keys; the schema's {key!r} is not STRING")
    return key
