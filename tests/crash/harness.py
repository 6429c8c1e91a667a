"""Run a crash job as a real subprocess, SIGKILL it, restart it, and audit the sink.

``Job`` runs tests/crash/job.py (PostgreSQL); a sink's crash tests subclass it to run their
own script (``script``, ``sink_env``, ``sink_args``). Its kill schedules (at named points,
after a Spark commit, at seeded random moments, see ``crash_seed``) serve every sink.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from exactlyonce.dedup.ids import record_id
from tests.support.secrets_scan import Scanned, assert_no_secrets, url_passwords

JOB = Path(__file__).with_name("job.py")
ROOT = Path(__file__).resolve().parents[2]
# Where a crash job writes Spark's event log (job_common.crash_session reads it).
EVENT_LOG_ENV = "EXACTLYONCE_TEST_EVENT_LOG"
# Input files an epoch of the last run (run_to_end) reads. A test's input is long, so that
# every kill lands mid-stream on a fast machine too; the recovery after the kills needs no
# epoch per file (an epoch costs ~1.4 CPU-s of Spark's planning and tasks, whatever its size).
FINAL_FILES_PER_TRIGGER = 4


@dataclass
class Input:
    expected_ids: set[str]
    null_keys: int
    records: int
    files: int


def make_input(
    directory: Path, files: int, rows: int, seed: int, dup_fraction: float = 0.25
) -> Input:
    """JSON-lines files with deliberate duplicates (within and across files) and null keys."""
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    seen: list[str] = []
    expected: set[str] = set()
    nulls = records = 0
    for n in range(files):
        lines = []
        for _ in range(rows):
            if seen and rng.random() < dup_fraction:
                key: str | None = rng.choice(seen)
            else:
                key = f"e{len(seen)}"
                seen.append(key)
            lines.append({"event_id": key, "amount": rng.randint(1, 1000), "action": "click"})
        if n % 6 == 5:
            lines.append({"event_id": None, "amount": -1, "action": "broken"})
            nulls += 1
        records += len(lines)
        expected.update(record_id([line["event_id"]]) for line in lines if line["event_id"])
        tmp = directory.parent / f".{n:04d}.json.tmp"
        tmp.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
        tmp.rename(directory / f"part-{n:04d}.json")
    return Input(expected, nulls, records, files)


def epoch_of_each_file(checkpoint: Path) -> dict[int, int]:
    """Which epoch read each input file, from Spark's checkpoint: the file source's log gives
    each file its log index, the offset log each epoch its last log index. Usually file n is
    epoch n; a kill between the two logs' writes makes the next run read two files at once."""
    index_of: dict[int, int] = {}
    for log in (checkpoint / "sources" / "0").iterdir():
        if log.name.startswith("."):
            continue
        for line in log.read_text().splitlines()[1:]:
            entry = json.loads(line)
            index_of[int(Path(entry["path"]).stem.split("-")[1])] = int(entry["batchId"])
    last_index = {
        int(f.name): int(json.loads(f.read_text().splitlines()[-1])["logOffset"])
        for f in (checkpoint / "offsets").iterdir()
        if f.name.isdigit()
    }
    return {
        n: min(e for e, last in last_index.items() if last >= index)
        for n, index in index_of.items()
    }


def input_ids(directory: Path) -> dict[int, set[str]]:
    """Per input file number (``part-NNNN.json`` of :func:`make_input`), its record IDs."""
    out = {}
    for path in sorted(directory.glob("part-*.json")):
        events = (json.loads(line)["event_id"] for line in path.read_text().splitlines())
        out[int(path.stem.split("-")[1])] = {record_id([e]) for e in events if e}
    return out


def files_holding(checkpoint: Path, ids_per_file: dict[int, set[str]]) -> Counter[tuple[str, int]]:
    """(record ID, epoch) -> how many of the input files that epoch read hold the ID (each
    file is one Spark partition of its epoch, so: how many of its tasks hold it)."""
    epoch_of = epoch_of_each_file(checkpoint)
    out: Counter[tuple[str, int]] = Counter()
    for n, ids in ids_per_file.items():
        out.update((i, epoch_of[n]) for i in ids)
    return out


def holding_epochs(checkpoint: Path, ids_per_file: dict[int, set[str]]) -> dict[str, list[int]]:
    """Per record ID, the epochs whose input files hold it (once per file, sorted)."""
    epoch_of = epoch_of_each_file(checkpoint)
    out: dict[str, list[int]] = {}
    for n, ids in ids_per_file.items():
        for i in ids:
            out.setdefault(i, []).append(epoch_of[n])
    return {i: sorted(epochs) for i, epochs in out.items()}


def one_file_epochs(checkpoint: Path) -> set[int]:
    """The epochs that read exactly one input file (one Spark partition, one task)."""
    files = Counter(epoch_of_each_file(checkpoint).values())
    return {epoch for epoch, n in files.items() if n == 1}


@dataclass
class Job:
    """One streaming job: start it, kill -9 its whole process tree, start it again."""

    workdir: Path
    table: str
    dsn: str
    master: str = "local[2]"
    mode: str = "insert"
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # set for every run, over os.environ
    runs: int = 0
    kills: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    final_run: bool = field(default=False, init=False)  # the run started by run_to_end
    script: ClassVar[Path] = JOB  # the job script a subclass runs instead
    # Files every finished job must have left, non-empty, for the credential scan.
    scanned_logs: ClassVar[tuple[str, ...]] = ("run-*.log", "events_*")

    @property
    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"

    @property
    def crash_dir(self) -> Path:
        path = self.workdir / "crash"
        path.mkdir(exist_ok=True)
        return path

    def start(
        self, crash_at: str | None = None, hold_at: str | None = None, *, final: bool = False
    ) -> None:
        """Start a run; ``crash_at``/``hold_at`` (``POINT@EPOCH``): see crashpoints.py;
        ``final``: the last run, which reads the rest of the input in bigger epochs."""
        self.final_run = final
        env = {**os.environ, **self.env, **self.sink_env(), "PYTHONPATH": str(ROOT)}
        env[EVENT_LOG_ENV] = str(self.workdir / "eventlog")
        env.pop("EXACTLYONCE_CRASH_AT", None)
        env.pop("EXACTLYONCE_HOLD_AT", None)
        if crash_at:
            env["EXACTLYONCE_CRASH_AT"] = crash_at
        if hold_at:  # one POINT@EPOCH, or several separated by commas
            env["EXACTLYONCE_HOLD_AT"] = hold_at
            for spec in hold_at.split(","):
                point = spec.partition("@")[0]
                for stale in (f"held-{point}", f"release-{point}"):
                    (self.crash_dir / stale).unlink(missing_ok=True)
        if crash_at or hold_at:
            env["EXACTLYONCE_CRASH_DIR"] = str(self.crash_dir)
        self.runs += 1
        log = open(self.workdir / f"run-{self.runs}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def command(self) -> list[str]:
        """The run's command line: the job script with the arguments every crash job takes,
        then the sink's (a subclass may run another program, ``exactlyonce run`` say); the
        last run reads :data:`FINAL_FILES_PER_TRIGGER` files an epoch."""
        final = ["--max-files-per-trigger", str(FINAL_FILES_PER_TRIGGER)] if self.final_run else []
        return [
            sys.executable,
            str(self.script),
            "--input",
            str(self.workdir / "input"),
            "--checkpoint",
            str(self.checkpoint),
            "--query-name",
            self.table,
            "--master",
            self.master,
            *self.sink_args(),
            *self.extra_args,
            *final,
        ]

    def sink_env(self) -> dict[str, str]:
        """Environment the job script finds its sink in (job.py: the PostgreSQL DSN)."""
        return {"EXACTLYONCE_PG_DSN": self.dsn}

    def sink_args(self) -> list[str]:
        """The job script's own arguments, after those every crash job takes."""
        return ["--table", self.table, "--mode", self.mode]

    def kill(self, why: str) -> None:
        """SIGKILL the job's whole session: driver, JVM and Python workers."""
        assert self.proc is not None
        sid = self.proc.pid
        os.killpg(sid, signal.SIGKILL)
        for pid in session_members(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.kills.append(why)
        print(f"killed run {self.runs} ({why})", flush=True)

    def wait_for_marker(self, point: str, timeout: float = 180) -> None:
        marker = self.crash_dir / f"crashed-{point}"
        self._wait(lambda: marker.exists(), timeout, f"crash point {point}")
        time.sleep(0.2)  # let the paused process settle inside its wait loop

    def wait_until_held(self, point: str, timeout: float = 180) -> None:
        """Wait until the run started with ``hold_at=f"{point}@..."`` waits there."""
        marker = self.crash_dir / f"held-{point}"
        self._wait(lambda: marker.exists(), timeout, f"hold point {point}")

    def release(self, point: str) -> None:
        """Let the run held at ``point`` go on."""
        (self.crash_dir / f"release-{point}").touch()

    def wait_for_commit(self, epoch: int, timeout: float = 180) -> None:
        self._wait(lambda: epoch in self.spark_commits(), timeout, f"Spark commit of {epoch}")

    def wait_for_progress(self, timeout: float = 180) -> None:
        """Wait until this run has added an epoch to Spark's commit log."""
        before = self.spark_commits()
        self._wait(lambda: len(self.spark_commits() - before) >= 1, timeout, "progress")

    def kill_at_marker(self, point: str, epoch: int, timeout: float = 180) -> None:
        """SIGKILL the run started with ``crash_at=f"{point}@{epoch}"`` once it pauses there;
        Spark must not have committed that epoch."""
        self.wait_for_marker(point, timeout)
        self.kill(f"{point}@{epoch}")
        assert epoch not in self.spark_commits(), f"{point}: epoch {epoch} is in Spark's log"

    def kill_at_points(self, schedule: list[tuple[str, int]], timeout: float = 180) -> None:
        """One run per (point, epoch) of ``schedule``, each SIGKILLed at its point."""
        for point, epoch in schedule:
            self.start(crash_at=f"{point}@{epoch}")
            self.kill_at_marker(point, epoch, timeout)

    def kill_after_commit(self, epoch: int, timeout: float = 180) -> None:
        """A run SIGKILLed right after Spark committed ``epoch``."""
        self.start()
        self.wait_for_commit(epoch, timeout)
        self.kill(f"after Spark's commit of epoch {epoch}")

    def kill_at_random_moment(self, rng: random.Random, why: str, max_delay: float) -> bool:
        """Sleep up to ``max_delay`` seconds, then SIGKILL the run unless it already ended."""
        time.sleep(rng.uniform(0.0, max_delay))
        if self.proc is None or self.proc.poll() is not None:
            return False
        self.kill(why)
        return True

    def kill_randomly(
        self,
        rng: random.Random,
        seed: int,
        runs: int,
        max_delay: float = 1.5,
        timeout: float = 240,
        first: int = 1,
    ) -> None:
        """``runs`` runs, each SIGKILLed at a random moment after it made progress (inside a
        later batch). Every kill must happen: a run that finishes first fails the test (give
        the job more input)."""
        for n in range(runs):
            self.start()
            self.wait_for_progress(timeout)
            why = f"random kill {first + n} (seed {seed})"
            assert self.kill_at_random_moment(rng, why, max_delay), (
                f"run {self.runs} finished before {why}: the input ran out"
            )

    def progress_or_exit(self, timeout: float = 180) -> str:
        """After a fault that may or may not kill the run: wait until it commits one more
        epoch or exits; say which."""
        assert self.proc is not None
        before = self.spark_commits()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited {self.proc.returncode}"
            if self.spark_commits() - before:
                return "rode it out"
            time.sleep(0.1)
        raise AssertionError(f"the run neither progressed nor ended:\n{self.log_tail()}")

    def end(self, timeout: float = 300) -> None:
        """Let a live run finish (it must exit 0), or start a last one when the last run
        died of a fault."""
        if self.proc is not None and self.proc.poll() is None:
            self.finish(timeout)
        else:
            self.run_to_end(timeout)

    def stop_if_running(self) -> None:
        """For a test's ``finally``: no run outlives its test."""
        if self.proc is not None and self.proc.poll() is None:
            self.kill("test ended")

    def run_to_end(self, timeout: float = 300) -> None:
        """A last run, which must finish every input file and exit 0 (``final``: in epochs
        of :data:`FINAL_FILES_PER_TRIGGER` files)."""
        self.start(final=True)
        self.finish(timeout)

    def spark_commits(self) -> set[int]:
        commits = self.checkpoint / "commits"
        if not commits.exists():
            return set()
        return {int(p.name) for p in commits.iterdir() if p.name.isdigit()}

    def finish(self, timeout: float = 300) -> None:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            self.kill("timeout")
            tail = self.log_tail()
            raise AssertionError(f"job did not finish in {timeout}s:\n{tail}") from exc
        assert code == 0, f"job exited {code}:\n{self.log_tail()}"
        self.wait_for_session_end()
        self.assert_no_credentials()

    def wait_for_session_end(self, timeout: float = 60) -> None:
        """Wait until every process of the last run (its JVM, its Python workers) has
        exited: the JVM finishes Spark's event log (renames it from ``.inprogress``) after
        the job's Python process is gone."""
        assert self.proc is not None
        sid = self.proc.pid
        wait_until(lambda: not session_members(sid), f"the end of run {self.runs}'s JVM", timeout)

    def assert_no_credentials(self) -> Scanned:
        """No file the runs left (their logs: the driver's, Spark's and the tasks' output,
        crashes included; Spark's event log; the checkpoint) shows a password they were
        given, in any form (DESIGN invariant 8); the run logs and the event log must have
        been scanned."""
        return assert_no_secrets([self.workdir], self.secrets(), expect=self.scanned_logs)

    def secrets(self) -> list[str]:
        """Every password the runs are given: the services' and the sink's."""
        env = {**os.environ, **self.env, **self.sink_env()}
        return list(dict.fromkeys([*service_passwords(), *url_passwords(*env.values())]))

    def last_commit(self) -> int:
        """Spark's last committed epoch; its commit log must have no gap."""
        commits = self.spark_commits()
        assert commits == set(range(max(commits) + 1)), f"gap in Spark's commit log: {commits}"
        return max(commits)

    def log_tail(self, lines: int = 40) -> str:
        text = (self.workdir / f"run-{self.runs}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def _wait(self, ready: object, timeout: float, what: str) -> None:
        assert callable(ready)
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"job exited before {what}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.log_tail()}")
            time.sleep(0.1)


# Seeds drawn by each test (pytest's node id -> lines): tests/conftest.py puts them in the
# report of a test that fails, so its schedule can be replayed.
SEEDS: dict[str, list[str]] = {}


def crash_seed(schedule: str = "random kill schedule") -> int:
    """``EXACTLYONCE_CRASH_SEED`` when set (a replay), else a fresh seed; printed, and named
    in pytest's report when the test fails."""
    seed = int(os.environ.get("EXACTLYONCE_CRASH_SEED", random.randrange(1 << 30)))
    line = f"{schedule} seed={seed} (replay: EXACTLYONCE_CRASH_SEED={seed})"
    print(line)
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rpartition(" (")[0]
    SEEDS.setdefault(test, []).append(line)
    return seed


def wait_until(ready: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """Poll ``ready`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def service_passwords() -> list[str]:
    """The passwords in the services' URLs (PostgreSQL's role; a Redis URL's, if any),
    unquoted."""
    names = ("EXACTLYONCE_PG_DSN", "EXACTLYONCE_REDIS_URL", "EXACTLYONCE_SINK_REDIS_URL")
    return url_passwords(*(os.environ.get(name) for name in names))


def session_members(sid: int) -> list[int]:
    """Processes still alive in session ``sid`` (a Python worker may have its own group)."""
    out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True).stdout
    return [int(p) for p, s in (line.split() for line in out.splitlines()) if int(s) == sid]
