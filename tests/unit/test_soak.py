"""The soak's pure parts: its input (replays at least the fraction asked) and its matrix."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench.soak import EXAMPLES, KAFKA_SOURCE, SINKS, _input, build_parser, sink_servers
from bench.soak_input import produced_input, records_per_batch, write_input
from bench.soak_report import cell_entry, cell_verdict, markdown, matrix
from bench.soak_resume import Ledger, cell_parameters, code_fingerprint, estimate_left, key_of
from exactlyonce.integration.lab.chaos.control.target import write_mode


def _rows(directory: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("soak-part-*.json"))
        for line in path.read_text().splitlines()
    ]


def test_input_replays_at_least_the_fraction_and_holds_every_event(tmp_path: Path) -> None:
    made = write_input(tmp_path / "in", 5000, seed=7, files=12, replay_fraction=0.25)
    rows = _rows(tmp_path / "in")
    ids = [r["event_id"] for r in rows if r["event_id"] is not None]
    assert made.files == 12 and made.records == len(rows)
    assert len(set(ids)) == 5000  # every distinct event, no other
    assert len(ids) - 5000 == made.resent >= 0.25 * 5000
    assert made.null_keys == 3 == sum(1 for r in rows if r["event_id"] is None)
    again = write_input(tmp_path / "again", 5000, seed=7, files=12, replay_fraction=0.25)
    assert _rows(tmp_path / "again") == rows and again == made  # replayable from the seed


def test_a_kafka_source_cell_asks_chaos_for_its_input_read_in_the_files_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pg-ks-columns`` writes no files: chaos produces the plan of the seed (``--events``), which
    the soak describes from the same seed, read in as many batches as a files cell's."""
    from exactlyonce.integration.lab.events import Expected, generate

    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["--events", "5000"])
    made, chaos_args, env = _input("pg-ks-columns", "pg-ks-columns_s7_1", 7, 40, args)
    planned = Expected.of(generate(random.Random(7), 5000))
    assert chaos_args == ["--events", "5000"] and not (tmp_path / ".exactlyonce").exists()
    assert (made.events, made.records, made.null_keys) == (5000, planned.records, 3)
    assert made.resent == planned.retries + planned.replayed == planned.duplicates
    assert env == {"SOAK_MAX_OFFSETS": str(records_per_batch(made))}
    assert -(-made.records // records_per_batch(made)) <= 40 == made.files
    assert made == produced_input(5000, 7, 40)


@pytest.mark.parametrize(
    ("sink", "identity", "mode"),
    [("pg-ks-source", ("topic", "partition", "offset"), "append"),
     ("pg-ks-columns", ("event_id",), "append"),
     ("redis-ks-source", ("topic", "partition", "offset"), "stream")],
)  # fmt: skip
def test_the_kafka_source_cells_read_a_topic_of_their_own_in_a_strict_mode(
    sink: str, identity: tuple[str, ...], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline users run (Kafka source -> Spark -> sink), with ``id_from: source`` and
    with ``id_columns``, in a strict mode (PostgreSQL append, a Redis stream: a second write
    is a second row or entry)."""
    from exactlyonce.integration.config import load_config

    monkeypatch.setenv("SOAK_RUN", "r1")
    monkeypatch.setenv("EXACTLYONCE_PG_DSN", "postgresql://h/d")
    monkeypatch.setenv("EXACTLYONCE_REDIS_URL", "redis://h:1/0")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "h:9092")
    monkeypatch.setenv("SOAK_SINK_REDIS_URL", "redis://h:2/0")
    cfg = load_config(Path(__file__).resolve().parents[2] / EXAMPLES / SINKS[sink])
    assert sink in KAFKA_SOURCE and cfg.source.type == "kafka"
    assert getattr(cfg.source, "topic", None) == f"soak-{sink}-r1-in"
    assert write_mode(cfg) == mode
    assert tuple(cfg.sink.id_columns or ()) == identity


def test_cells_that_share_a_sink_server_start_it_once() -> None:
    assert sink_servers(["pg", "redis-ks-source", "redis", "es"]) == ["es", "redis"]
    assert sink_servers(["redis-ks-source"]) == ["redis"] and sink_servers(["pg-ks-source"]) == []


def _report(seed: int, duplicates: int, control: int = 5, missed: int = 0) -> dict[str, object]:
    """A chaos report of 2 driver kills, 1 at a named point, 1 commit kill and a hard and a
    clean server restart, its reading with ``duplicates`` and its control's with ``control``."""
    inconclusive = missed or not control
    result = "FAILED" if duplicates else "INCONCLUSIVE" if inconclusive else "EXACTLY ONCE"
    return {
        "seed": seed,
        "sink": "postgres",
        "write_mode": "append",
        "source": "files",
        "id_from": "columns",
        "ids": 100,
        "counts": {
            "driver_kills": 2,
            "point_kills": 1,
            "commit_kills": 1,
            "server_hard": 1,
            "server_clean": 1,
        },
        "pipeline_kills": 4,
        "server_restarts": 2,
        "worker_kills": 0,
        "commit_window_kills": 2,
        "faults_happened": 6,
        "faults_missed": missed,
        "runs": 5,
        "seconds": 10.0,
        "duplicates": duplicates,
        "missing": 0,
        "unexpected": 0,
        "reader": "psycopg SQL",
        "control_duplicates": control,
        "control_commit_window_kills": 2,
        "control": {"faults_missed": 0, "pipeline_kills": 4},
        "result": result,
        "exactly_once": result == "EXACTLY ONCE",
        "verdict": f"CHAOS: {result} (...)",
        "audit": {"expected_ids": 100, "duplicates": duplicates, "missing": 0},
    }


def test_a_cell_holds_the_figures_of_its_report() -> None:
    cell = cell_entry("pg", "seed", _report(1, 0), {"kills_requested": 4})
    assert {k: cell[k] for k in (
        "sink", "write_mode", "source", "id_from", "seed", "ids", "pipeline_kills",
        "server_restarts",
        "worker_kills", "faults_missed", "duplicates", "missing", "unexpected", "reader",
        "control_duplicates", "commit_window_kills", "control_commit_window_kills",
    )} == {
        "sink": "pg", "write_mode": "append", "source": "files", "id_from": "columns",
        "seed": 1, "ids": 100, "pipeline_kills": 4,
        "server_restarts": 2, "worker_kills": 0, "faults_missed": 0, "duplicates": 0,
        "missing": 0, "unexpected": 0, "reader": "psycopg SQL", "control_duplicates": 5,
        "commit_window_kills": 2, "control_commit_window_kills": 2,
    }  # fmt: skip
    assert cell_verdict(cell) == "EXACTLY ONCE"


def test_matrix_sums_a_sinks_runs_and_names_failed_seeds() -> None:
    cells = [
        cell_entry("pg", "seed", _report(1, 0), {"cluster": False}),
        # on the standalone cluster; both its server restarts broker failovers
        cell_entry("pg", "seed", {**_report(2, 3), "broker_failovers": 2}, {"cluster": True}),
    ]
    (row,) = matrix(cells)
    assert (row["cluster_runs"], row["broker_failovers"]) == (1, 2)
    assert (row["chaos_runs"], row["runs"], row["faults"], row["ids"]) == (2, 10, 12, 200)
    assert (row["duplicates"], row["failed_seeds"], row["verdict"]) == (3, [2], "FAILED")
    assert (row["pipeline_kills"], row["fewest_pipeline_kills"]) == (8, 4)
    assert (row["server_restarts"], row["commit_window_kills"]) == (4, 4)
    assert (row["control_duplicates"], row["fewest_control_duplicates"]) == (10, 5)
    table = markdown([row], {"pg": "note"})
    kinds = "4 / 2 / 2 / 2 / 2 / 0 / 0 / 0 / 0 / 0"  # driver, point, commit, hard, clean, ...
    assert (
        f"| pg (note) | append | 2 (1) | 10 | 8 (4) | 4 | 4 (2) | 12: {kinds} | 200 | 3 | 0 "
        "| 10 (5) "
        "| 20 s | FAILED |"
    ) in table


def test_a_kafka_source_row_names_its_source_and_where_its_ids_come_from() -> None:
    """A Kafka-source cell is counted as the others, its mode saying what it ran."""
    report = {**_report(1, 0), "source": "kafka", "id_from": "source"}
    (row,) = matrix([cell_entry("pg-ks-source", "seed", report, {"kills_requested": 4})])
    assert (row["source"], row["id_from"], row["verdict"]) == ("kafka", "source", "EXACTLY ONCE")
    assert "| pg-ks-source | append, kafka source, id_from source | 1 (0) | 5 | 4 (4) |" in (
        markdown([row], {})
    )


@pytest.mark.parametrize(
    ("report", "mode", "verdict"),
    [
        (_report(1, 0, control=0), "seed", "INCONCLUSIVE"),  # the control shows nothing
        (_report(1, 0, control=0), "duration", "INCONCLUSIVE"),  # no cell is exempt
        (_report(1, 0, missed=1), "duration", "INCONCLUSIVE"),  # a fault missed
        (_report(1, 0), "duration", "EXACTLY ONCE"),
    ],
)
def test_a_cell_whose_control_shows_no_duplicate_or_that_missed_a_fault_fails(
    report: dict[str, object], mode: str, verdict: str
) -> None:
    cell = cell_entry("pg", mode, report, {"kills_requested": 4})
    assert cell_verdict(cell) == verdict
    (row,) = matrix([cell])
    assert row["verdict"] == verdict
    if verdict != "EXACTLY ONCE":
        assert row["inconclusive_seeds"] == [1]
    # even a report that claims exactly once is no pass without a control's duplicates
    assert cell_verdict({**cell, "result": "EXACTLY ONCE", "control_duplicates": 0}) == (
        "INCONCLUSIVE"
    )


def test_a_seeded_run_with_fewer_pipeline_kills_than_asked_fails_its_row() -> None:
    report = {**_report(1, 0), "pipeline_kills": 3}  # server restarts do not count
    short = cell_entry("pg", "seed", report, {"kills_requested": 4})
    (row,) = matrix([short, cell_entry("pg", "seed", _report(2, 0), {"kills_requested": 4})])
    assert (row["short_seeds"], row["verdict"]) == ([1], "TOO FEW KILLS")
    (row,) = matrix([cell_entry("pg", "seed", _report(2, 0), {"kills_requested": 4})])
    assert row["verdict"] == "EXACTLY ONCE"


@pytest.mark.parametrize(
    ("sink", "total", "extra"),
    [
        ("pg", 27, ["--proxy-faults", "3"]),  # 20 driver kills, 4 restarts, 3 proxy faults
        ("kafka", 24, []),  # no proxy in front of a broker
        ("kafka3", 24, ["--servers", "kafka3"]),  # every server restart a broker failover
        ("buffer", 27, ["--proxy-faults", "3", "--drainer-kills", "3"]),  # 17 + 3 drainer
    ],
)
def test_a_cell_asks_chaos_for_its_pipeline_kills_and_puts_the_other_faults_on_top(
    sink: str, total: int, extra: list[str]
) -> None:
    from bench.soak import fault_arguments

    commits = "4" if sink == "buffer" else "5"  # a quarter of the driver kills
    assert fault_arguments(sink, 20) == [
        "--kills", str(total), "--server-faults", "4", "--commit-kills", commits, *extra
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("sink", "total", "extra"),
    [
        # 16 driver kills (4 in the commit window) + 4 worker kills; 4 restarts, 3 proxy faults
        ("pg", 27, ["--commit-kills", "4", "--proxy-faults", "3"]),
        ("kafka", 24, ["--commit-kills", "4"]),
        # 13 driver kills + 3 drainer kills + 4 worker kills
        ("buffer", 27, ["--commit-kills", "3", "--proxy-faults", "3", "--drainer-kills", "3"]),
    ],
)
def test_a_cluster_cell_counts_its_worker_kills_among_its_pipeline_kills(
    sink: str, total: int, extra: list[str]
) -> None:
    from bench.soak import SERVER_RESTARTS, fault_arguments
    from exactlyonce.integration.lab.chaos.schedule import (
        PROXY_KINDS,
        Extras,
        fault_mix,
    )

    args = fault_arguments(sink, 20, cluster=True)
    assert args == [
        "--kills", str(total), "--server-faults", "4", *extra, "--cluster", "--worker-kills", "4"
    ]  # fmt: skip
    given = dict(zip(args[::2], args[1::2], strict=False))
    proxy = int(given.get("--proxy-faults", 0))
    extras = Extras(
        proxy_kinds=PROXY_KINDS if proxy else (), proxy_faults=proxy,
        workers=("worker1", "worker2"), worker_kills=4,
        drainer=sink == "buffer", drainer_kills=int(given.get("--drainer-kills", 0)),
    )  # fmt: skip
    mix = fault_mix(total, 2, 1, server_faults=SERVER_RESTARTS, extras=extras,
                    commit_kills=int(given["--commit-kills"]))  # fmt: skip
    assert total - mix.servers - mix.proxy == 20  # what chaos schedules: the cell's kills
    assert (mix.workers, mix.proxy) == (4, proxy)
    assert fault_arguments("pg", 5, cluster=True)[-2:] == ["--worker-kills", "1"]


def test_seeds_one_and_every_nth_after_it_run_on_the_cluster_never_a_duration_cell() -> None:
    from bench.soak import on_cluster

    assert [s for s in range(1, 6) if on_cluster(s, "seed", 2)] == [1, 3, 5]
    assert [s for s in range(1, 6) if on_cluster(s, "seed", 1)] == [1, 2, 3, 4, 5]
    assert not any(on_cluster(s, "seed", 0) for s in range(1, 6))
    assert not on_cluster(1, "duration", 1)


def test_a_cells_cluster_and_worker_kills_are_part_of_its_parameters() -> None:
    from bench import soak

    every = soak.wanted_parameters(soak.build_parser().parse_args(["--cluster-every", "1"]))
    default = soak.wanted_parameters(soak.build_parser().parse_args([]))
    on, off = every(("pg", 2, "seed")), default(("pg", 2, "seed"))
    assert (on["cluster"], on["worker_kills"]) == (True, 4)
    assert (off["cluster"], off["worker_kills"]) == (False, 0)
    # seed 1 runs on the cluster either way: a cell of one soak counts for the other
    assert every(("pg", 1, "seed")) == default(("pg", 1, "seed"))
    assert every(("pg", 6, "duration")) == default(("pg", 6, "duration"))
    assert not default(("pg", 6, "duration"))["cluster"]
    few = soak.wanted_parameters(soak.build_parser().parse_args(["--kills", "2"]))
    assert few(("buffer", 1, "seed"))["worker_kills"] == 1  # at least one, beside a drainer kill


def _tree(root: Path) -> Path:
    for rel, text in {
        "exactlyonce/__init__.py": "",
        "exactlyonce/connectors/sink.py": "x = 1\n",
        "bench/soak.py": "",
        "examples/soak/postgres.yaml": "a: 1\n",
        "bench/other.py": "",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_fingerprint_covers_the_package_and_the_soaks_files_only(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    first = code_fingerprint(root)
    (root / "bench/other.py").write_text("changed = True\n")  # not the soak's
    (root / "exactlyonce/__pycache__").mkdir()
    (root / "exactlyonce/__pycache__/sink.cpython-311.pyc").write_bytes(b"\0")
    assert code_fingerprint(root) == first
    (root / "exactlyonce/connectors/sink.py").write_text("x = 2\n")
    second = code_fingerprint(root)
    assert second != first
    (root / "examples/soak/postgres.yaml").write_text("a: 2\n")
    assert code_fingerprint(root) not in (first, second)


def _cell(sink: str, seed: int, mode: str = "seed", **extra: object) -> dict[str, object]:
    params = cell_parameters(mode, 100_000, 20, 0.25, 300.0)
    entry = {"sink": sink, "seed": seed, "mode": mode, "params": params, "fingerprint": "abc"}
    return {**entry, "verdict": "CHAOS: EXACTLY ONCE (...)", "wall_seconds": 100.0, **extra}


def test_ledger_keeps_only_this_codes_cells_of_these_parameters_in_the_matrix() -> None:
    def wanted(key: tuple[str, int, str]) -> dict[str, object]:
        return cell_parameters(key[2], 100_000, 20, 0.25, 300.0)

    ledger = Ledger("abc")
    other_params = {**_cell("pg", 3), "params": cell_parameters("seed", 20_000, 4, 0.25, 0)}
    earlier = [
        _cell("pg", 1),
        _cell("pg", 6, "duration"),
        _cell("kafka", 1, fingerprint="old"),
        {k: v for k, v in _cell("es", 1).items() if k != "fingerprint"},
        other_params,
    ]
    ledger.sort_in(earlier, wanted)
    assert [key_of(c) for c in ledger.current] == [("pg", 1, "seed"), ("pg", 6, "duration")]
    reasons = [c["stale"] for c in ledger.stale]
    assert reasons[0] == "code fingerprint old, not abc"
    assert reasons[1].startswith("run before cells recorded")
    assert reasons[2].startswith("other parameters")
    assert ledger.done(("pg", 1, "seed")) is not None and ledger.done(("pg", 2, "seed")) is None
    ledger.supersede(("pg", 1, "seed"), "today")
    assert ledger.done(("pg", 1, "seed")) is None
    assert ledger.stale[-1]["stale"] == "superseded by --redo on today"
    left = estimate_left(["seed", "seed", "duration"], ledger)
    assert left == 300.0  # no seed cell of this code is left: the duration cell stands in
    assert estimate_left(["seed"], Ledger("abc")) is None


def test_plan_goes_seed_by_seed_and_skips_cells_this_code_ran(tmp_path: Path) -> None:
    from bench import soak

    args = soak.build_parser().parse_args(["--only", "pg,kafka", "--seeds", "2"])
    assert soak.plan(args) == [
        ("pg", 1, "seed"), ("kafka", 1, "seed"), ("pg", 2, "seed"), ("kafka", 2, "seed"),
        ("pg", 6, "duration"), ("kafka", 6, "duration"),
    ]  # fmt: skip
    ledger = Ledger("abc")
    wanted = soak.wanted_parameters(args)
    done = [_cell("kafka", 1, params=wanted(("kafka", 1, "seed"))), _cell("pg", 6, "duration")]
    ledger.sort_in([*done, _cell("pg", 1)], wanted)  # pg 1 ran on local[2]: not this cell
    assert ledger.stale[0]["stale"].startswith("other parameters")
    todo = soak._to_run(soak.plan(args), ledger, redo=False)
    assert ("kafka", 1, "seed") not in todo and ("pg", 6, "duration") not in todo
    assert len(todo) == 4 and len(soak._to_run(soak.plan(args), ledger, redo=True)) == 6
    one_seed = soak.build_parser().parse_args(["--seeds", "1", "--duration", "0"])
    for key in soak.plan(args):  # the same cells count
        assert soak.wanted_parameters(one_seed)(key) == soak.wanted_parameters(args)(key)


def test_each_cell_is_written_with_its_code_and_a_change_mid_cell_makes_it_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import soak

    out = tmp_path / "chaos.json"
    args = soak.build_parser().parse_args(
        ["--only", "pg", "--seeds", "2", "--duration", "0", "--out", str(out)]
    )
    fingerprints = iter(["abc", "abc", "changed"])  # after cell 1, after cell 2
    monkeypatch.setattr(soak, "code_fingerprint", lambda root: next(fingerprints))
    monkeypatch.setattr(
        soak,
        "run_cell",
        lambda sink, seed, mode, *rest: cell_entry(
            sink, mode, _report(seed, 0), {"wall_seconds": 120.0}
        ),
    )
    ledger = Ledger(soak.code_fingerprint(Path(".")))
    with pytest.raises(SystemExit, match="the code changed during pg seed 2"):
        soak._run_cells(soak.plan(args), args, {}, tmp_path, ledger, reduced=False)
    doc = json.loads(out.read_text())
    (done,) = doc["cells"]
    assert (done["seed"], done["fingerprint"]) == (1, "abc") and done["date"]
    assert done["params"] == soak.wanted_parameters(args)(("pg", 1, "seed"))
    assert (done["params"]["cluster"], done["params"]["worker_kills"]) == (True, 4)
    (stale,) = doc["stale_cells"]
    assert (stale["seed"], stale["stale"]) == (2, "the code changed while it ran")
    assert [r["chaos_runs"] for r in doc["matrix"]] == [1]
    lines = capsys.readouterr().out
    assert "time left unknown until a run ends" in lines and "about 0 h 02 min left" in lines
