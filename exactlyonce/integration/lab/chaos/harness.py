"""Injecting a schedule of faults (:mod:`.schedule`) into runs of ``exactlyonce run``.

:class:`Chaos` keeps at most one run going (:mod:`exactlyonce.integration.lab.runs`). Each
fault is printed when it starts and when it is done, and counted as happened only when it hit
a live run:

- a random driver kill waits for the head to pass ``epochs`` new epochs, ``delay_s`` more,
  then SIGKILLs the run's process group, unless the run ended first (then it is *missed*);
- a commit kill waits the same way, then watches the destination the run writes
  (:mod:`.control.clients`) and SIGKILLs the run's group the moment a write of it commits
  (becomes visible there); a run that ends first is a miss;
- a point kill starts a run with the point armed (``EXACTLYONCE_CRASH_AT``, a crash
  directory of its own; small COPY chunks for ``mid_copy``, so data is sent before and after
  the point), waits for the point's marker file and SIGKILLs the group there; a run that
  ends without reaching it is a miss;
- a server fault waits like a random kill, then restarts the server (:mod:`.servers`); on
  the 3-node Kafka cluster it fails over the node holding the fault's role, a partition
  leader of the topic the runs write or the active controller (:mod:`.brokers`). A run that
  died while it was down is restarted;
- a proxy fault (``lost_reply``, ``refuse``, ``stall``) waits the same way, then has the
  sink's fault proxy (:mod:`.proxy`) carry it out; it happened only if the proxy saw it fire
  (a reply dropped, a connection refused, a reply held);
- a worker kill waits the same way, then SIGKILLs the cluster worker's session (worker,
  executor, Python workers: :mod:`exactlyonce.integration.lab.cluster`) while it runs an
  executor, and starts the worker again;
- a drainer kill waits for the drainer (:mod:`.drainer`, going alongside the runs) to
  report ``epochs`` new transactions and ``delay_s`` more, SIGKILLs it and starts it again.
  The negative control has no drainer: there its writer (the run) is SIGKILLed instead,
  after the same wait as a random kill.

After each kill that ends a run (driver, point and commit kills), the kill is judged: it
landed in the COMMIT WINDOW when the destination holds records of an epoch that Spark's
commit log (``<checkpoint>/commits/``) does not: a sink commit happened and Spark's did not
(``Outcome.in_window``).

Then :meth:`Chaos.finish` lets a run go on until its query ends or is idle (a run that dies
is started again, up to ``FINAL_ATTEMPTS`` times); a buffered pipeline is then drained
(``exactlyonce drain --until-idle``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from exactlyonce.integration.lab.chaos.brokers import fail_over
from exactlyonce.integration.lab.chaos.control.clients import last_epoch, watch
from exactlyonce.integration.lab.chaos.control.target import Target, spark_committed
from exactlyonce.integration.lab.chaos.drainer import DrainerProcess
from exactlyonce.integration.lab.chaos.proxy import SinkProxy
from exactlyonce.integration.lab.chaos.schedule import (
    COMMIT_KILL,
    DRAINER_KILL,
    DRIVER_KILL,
    POINT_KILL,
    PROXY_KINDS,
    RUN_KILL_KINDS,
    SERVER_HARD,
    WORKER_KILL,
    Fault,
)
from exactlyonce.integration.lab.chaos.servers import restart
from exactlyonce.integration.lab.cluster import Cluster
from exactlyonce.integration.lab.runs import (
    IDLE_SECONDS,
    RUN_TIMEOUT_SECONDS,
    HasHead,
    head_epoch_or_none,
    kill_group,
    log_tail,
    reap,
    start_run,
    wait_for_new_epoch,
)
from exactlyonce.integration.lab.services.kafka_cluster import TRANSACTION_STATE_TOPIC
from exactlyonce.integration.lab.services.processes import START_POLL, poll_until

FINAL_ATTEMPTS = 3  # runs the last phase may take (a run can die of a fault's aftermath)
SMALL_COPY_CHUNK = "256"  # bytes per COPY chunk when mid_copy is armed
SMALL_PIPELINE = "8"  # records per staged Redis chunk when mid_write is armed
RECOVERY_TIMEOUT_S = 120.0  # for a run to commit again after a server restart


@dataclass
class Outcome:
    """What became of one scheduled fault."""

    fault: Fault
    happened: bool
    note: str
    run: int  # the run it struck (or was meant to)
    at_s: float  # seconds since the chaos began
    # a kill that ended a run: it landed between a sink commit and Spark's commit log (None:
    # not a kill that ends a run, or the destination could not be read)
    in_window: bool | None = None


@dataclass(frozen=True)
class _Epoch:
    epoch: int


@dataclass(frozen=True)
class SparkCommits:
    """The negative control's progress: the last batch of its Spark commit log (it has no
    head), read like a sink's head."""

    checkpoint: str

    def head(self) -> _Epoch | None:
        epoch = spark_committed(self.checkpoint)
        return None if epoch < 0 else _Epoch(epoch)


@dataclass
class Chaos:
    """Runs of one pipeline file under faults; ``outcomes`` in schedule order."""

    config: str
    sink: HasHead  # its head is read to see runs progress (the control: its commit log)
    log_dir: Path
    checkpoint: str = ""  # the runs' Spark checkpoint, for the commit window
    written: Target | None = None  # where a run's commits show (commit kills, the window)
    command: list[str] | None = None  # the runs' command (None: exactlyonce run)
    control: bool = False  # the runs are the negative control's
    buffered: bool = False
    deadline: float | None = None  # monotonic time after which no fault starts
    runs: int = 0
    runs_died: int = 0  # runs that ended by themselves, not by a scheduled kill
    outcomes: list[Outcome] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    began: float = field(default_factory=time.monotonic)
    env: dict[str, str] = field(default_factory=dict)  # for every run and drain (the proxy)
    proxy: SinkProxy | None = None
    cluster: Cluster | None = None
    drainer: DrainerProcess | None = None  # a buffered pipeline's, going alongside the runs

    def inject(self, fault: Fault, total: int) -> Outcome:
        """Carry out ``fault`` (the ``n``-th of ``total``) and print what happened."""
        print(f"CHAOS fault {fault.n}/{total}: {fault.describe()}", flush=True)
        if self.deadline is not None and time.monotonic() > self.deadline:
            outcome = self._outcome(fault, False, "not started: --duration passed")
        elif fault.kind == POINT_KILL:
            outcome = self._point_kill(fault)
        elif fault.kind == DRIVER_KILL or (fault.kind == DRAINER_KILL and self.control):
            outcome = self._random_kill(fault)
        elif fault.kind == COMMIT_KILL:
            outcome = self._commit_kill(fault)
        elif fault.kind in PROXY_KINDS:
            outcome = self._proxy_fault(fault)
        elif fault.kind == WORKER_KILL:
            outcome = self._worker_kill(fault)
        elif fault.kind == DRAINER_KILL:
            outcome = self._drainer_kill(fault)
        else:
            outcome = self._server_fault(fault)
        ends_run = fault.kind in RUN_KILL_KINDS or (self.control and fault.kind == DRAINER_KILL)
        if outcome.happened and ends_run:
            outcome.in_window = self._in_window()
        if outcome.in_window:
            outcome.note += " (in the commit window: a sink commit Spark's log does not hold)"
        verdict = "done" if outcome.happened else "MISSED"
        print(f"CHAOS fault {fault.n}/{total} {verdict}: {outcome.note}", flush=True)
        self.outcomes.append(outcome)
        return outcome

    def _random_kill(self, fault: Fault) -> Outcome:
        proc = self._running()
        ended = self._wait_into_run(proc, fault)
        if ended:
            return self._outcome(fault, False, ended)
        what = "its writer (the control has no drainer): " if fault.kind == DRAINER_KILL else ""
        return self._kill(fault, proc, f"SIGKILLed {what}run {self.runs} at head {self._head()}")

    def _commit_kill(self, fault: Fault) -> Outcome:
        proc = self._running()
        ended = self._wait_into_run(proc, fault)
        if ended:
            return self._outcome(fault, False, ended)
        if self.written is None:
            return self._outcome(fault, False, "no watch on the destination (no plain client)")
        try:
            watching = watch(self.written)
        except Exception as exc:  # a server restarting: the fault is missed, and said why
            return self._outcome(fault, False, f"could not watch {self.written.describe()}: {exc}")
        try:
            seen = watching.seen(RUN_TIMEOUT_SECONDS, lambda: proc.poll() is None)
            if seen:
                kill_group(proc)  # first: the window is milliseconds wide
        finally:
            watching.close()
        if not seen:
            return self._outcome(fault, False, self._ended(proc, "a commit became visible"))
        self.proc = None
        return self._outcome(
            fault,
            True,
            f"SIGKILLed run {self.runs} as its commit to {self.written.describe()} became "
            f"visible (head {self._head()})",
        )

    def _in_window(self) -> bool | None:
        """The destination holds an epoch Spark's commit log does not (None: unreadable)."""
        if self.written is None or not self.checkpoint:
            return None
        try:
            epoch = last_epoch(self.written)
        except Exception:  # a restarting server: not judged
            return None
        return epoch is not None and epoch > spark_committed(self.checkpoint)

    def _point_kill(self, fault: Fault) -> Outcome:
        assert fault.point is not None
        if self.proc is not None:  # the schedule never puts a point kill after a live run
            self._reap_or_kill()
        crash_dir = self.log_dir / f"crash-{fault.n}"
        crash_dir.mkdir(parents=True, exist_ok=True)
        env = {
            "EXACTLYONCE_CRASH_AT": fault.point,
            "EXACTLYONCE_CRASH_DIR": str(crash_dir),
            "EXACTLYONCE_CRASH_MODE": "pause",
        }
        if fault.point == "mid_copy":
            env["EXACTLYONCE_CRASH_COPY_CHUNK_BYTES"] = SMALL_COPY_CHUNK
        if fault.point == "mid_write":  # Redis tasks stage (the path of a big task) in chunks
            env["EXACTLYONCE_CRASH_PIPELINE_SIZE"] = SMALL_PIPELINE
        proc = self._start(env)
        marker = crash_dir / f"crashed-{fault.point}"
        policy = START_POLL.replace(deadline_s=RUN_TIMEOUT_SECONDS)
        poll_until(lambda: marker.exists() or proc.poll() is not None, policy)
        if not marker.exists():
            return self._outcome(fault, False, self._ended(proc, f"reaching {fault.point}"))
        time.sleep(0.2)  # the marker's "pid epoch" line is written just after it is created
        epoch = (marker.read_text().split() or ["?"])[-1]
        return self._kill(fault, proc, f"SIGKILLed run {self.runs} at {fault.point}@{epoch}")

    def _server_fault(self, fault: Fault) -> Outcome:
        assert fault.server is not None
        proc = self._running()
        ended = self._wait_into_run(proc, fault)
        if ended:
            return self._outcome(fault, False, ended)
        hard = fault.kind == SERVER_HARD
        how = "SIGKILLed" if hard else "stopped"
        if fault.target is not None:
            failover = fail_over(fault.target, self._topic(), hard=hard, down_s=fault.down_s)
            note = (
                f"{how} {fault.server} {failover.describe()} under run {self.runs}, back in "
                f"sync as pid {failover.new_pid} after {failover.down_s:.1f} s"
            )
        else:
            done = restart(fault.server, hard=hard, down_s=fault.down_s)
            note = (
                f"{how} {fault.server} (pid {done.old_pid}) under run {self.runs}, back as "
                f"pid {done.new_pid} after {done.down_s:.1f} s"
            )
        return self._outcome(fault, True, f"{note}; {self._after_outage(proc)}")

    def _topic(self) -> str:
        """The topic whose leader a failover strikes: the one the runs write (else the
        transaction coordinators')."""
        if self.written is not None and self.written.kind == "kafka":
            return self.written.name
        return TRANSACTION_STATE_TOPIC

    def _proxy_fault(self, fault: Fault) -> Outcome:
        assert self.proxy is not None
        proc = self._running()
        ended = self._wait_into_run(proc, fault)
        if ended:
            return self._outcome(fault, False, ended)

        def alive() -> bool:  # a buffered pipeline's drainer writes the sink
            return proc.poll() is None or (self.drainer is not None and self.drainer.alive())

        happened, note = self.proxy.inject(fault, alive)
        if not happened:
            return self._outcome(fault, False, f"{note} (run {self.runs})")
        return self._outcome(
            fault, True, f"{note} under run {self.runs}; {self._after_outage(proc)}"
        )

    def _worker_kill(self, fault: Fault) -> Outcome:
        assert self.cluster is not None and fault.target is not None
        proc = self._running()
        ended = self._wait_into_run(proc, fault)
        if ended:
            return self._outcome(fault, False, ended)
        executors = self._executors(self.cluster, fault.target, proc)
        if not executors or proc.poll() is not None:
            return self._outcome(fault, False, self._ended(proc, f"{fault.target} ran an executor"))
        self.cluster.kill_worker(fault.target)
        self.cluster.restart_worker(fault.target)
        note = (
            f"SIGKILLed {fault.target} with its executor (pid {executors[0]}) under run "
            f"{self.runs}, worker started again"
        )
        return self._outcome(fault, True, f"{note}; {self._after_outage(proc)}")

    @staticmethod
    def _executors(cluster: Cluster, worker: str, proc: subprocess.Popen[str]) -> list[int]:
        """The executor pids under ``worker``, once it has one (none if the run ended or
        ``RECOVERY_TIMEOUT_S`` passed first: a restarted worker gets its executor late)."""
        found: list[int] = []

        def seen() -> bool:
            found[:] = cluster.executors_of(worker)
            return bool(found) or proc.poll() is not None

        poll_until(seen, START_POLL.replace(deadline_s=RECOVERY_TIMEOUT_S))
        return found

    def _drainer_kill(self, fault: Fault) -> Outcome:
        assert self.drainer is not None
        proc = self._running()
        self.drainer.start()
        before = self.drainer.transactions()
        if not self.drainer.wait_for_transactions(before + fault.epochs, RUN_TIMEOUT_SECONDS):
            note = "the drainer ended" if not self.drainer.alive() else "the drainer wrote nothing"
            return self._outcome(fault, False, f"{note} ({fault.epochs} new transactions awaited)")
        time.sleep(fault.delay_s)
        done = self.drainer.transactions()
        pid = self.drainer.kill()
        self.drainer.start()
        return self._outcome(
            fault,
            True,
            f"SIGKILLed the drainer (pid {pid}) after {done} transactions, during run "
            f"{self.runs}{'' if proc.poll() is None else ' (ended)'}; started again",
        )

    def _after_outage(self, proc: subprocess.Popen[str]) -> str:
        """The run rode the outage out (committed again), or died and was started again."""
        before = self._readable_head(proc)
        if before is not None and proc.poll() is None:
            epoch = wait_for_new_epoch(self.sink, proc, before, RECOVERY_TIMEOUT_S)
            if epoch is not None:
                return f"run {self.runs} went on and committed epoch {epoch}"
        if proc.poll() is None:
            return f"run {self.runs} is up, with no new epoch in {RECOVERY_TIMEOUT_S:.0f} s"
        code = reap(proc, 0)
        self.proc = None
        self.runs_died += 1
        self._running()
        return f"run {self.runs - 1} died (exit {code}); restarted as run {self.runs}"

    def _wait_into_run(self, proc: subprocess.Popen[str], fault: Fault) -> str:
        """Wait for ``fault.epochs`` new epochs and ``fault.delay_s``; '' if the run is still
        going then, else why not."""
        head = self._readable_head(proc)
        if head is None:
            return self._ended(proc, "its sink's head was readable")
        after = head + fault.epochs - 1
        if wait_for_new_epoch(self.sink, proc, after, RUN_TIMEOUT_SECONDS) is None:
            return self._ended(proc, f"{fault.epochs} new epoch(s)")
        time.sleep(fault.delay_s)
        return "" if proc.poll() is None else self._ended(proc, "the delay's end")

    def _readable_head(self, proc: subprocess.Popen[str]) -> int | None:
        """The head, read again until its server answers (``RECOVERY_TIMEOUT_S`` at most, or
        until the run ended); None if it never did."""
        heads: list[int] = []

        def read() -> bool:
            head = head_epoch_or_none(self.sink)
            if head is not None:
                heads.append(head)
            return head is not None or proc.poll() is not None

        poll_until(read, START_POLL.replace(deadline_s=RECOVERY_TIMEOUT_S))
        return heads[0] if heads else None

    def _ended(self, proc: subprocess.Popen[str], before: str) -> str:
        """Why a run did not get to ``before``: it ended (reaped here) or timed out."""
        if proc.poll() is None:
            return f"run {self.runs} timed out before {before}"
        code = reap(proc, 0)
        self.proc = None
        return f"run {self.runs} ended (exit {code}) before {before}"

    def _kill(self, fault: Fault, proc: subprocess.Popen[str], note: str) -> Outcome:
        kill_group(proc)
        self.proc = None
        return self._outcome(fault, True, note)

    def _outcome(self, fault: Fault, happened: bool, note: str) -> Outcome:
        return Outcome(fault, happened, note, self.runs, round(time.monotonic() - self.began, 1))

    def _head(self) -> str:
        head = head_epoch_or_none(self.sink)
        return "unreadable" if head is None else str(head)

    def _running(self) -> subprocess.Popen[str]:
        """The live run, started if there is none (a run that ended is reaped first)."""
        if self.proc is not None and self.proc.poll() is not None:
            self._reap_or_kill()
        return self.proc if self.proc is not None else self._start()

    def _reap_or_kill(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            print(f"CHAOS run {self.runs} SIGKILLed: a point kill needs a run of its own")
            kill_group(self.proc)
        else:
            reap(self.proc, 0)
            self.runs_died += 1
        self.proc = None

    def _start(self, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        self.runs += 1
        log = self.log_dir / f"run-{self.runs}.log"
        label = f"{'control ' if self.control else ''}run {self.runs}"
        self.proc = start_run(
            self.config, log, label, env={**self.env, **(env or {})}, command=self.command
        )
        if self.drainer is not None:
            self.drainer.start()
        return self.proc

    def finish(self) -> str:
        """The last phase: runs until one ends by itself with exit 0 (a live run goes on);
        then the drain of a buffered pipeline. '' when all went well, else what failed."""
        for _ in range(FINAL_ATTEMPTS):
            proc = self._running()
            try:
                code = reap(proc, RUN_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                self.proc = None
                return f"the last run {self.runs} did not finish in {RUN_TIMEOUT_SECONDS} s"
            self.proc = None
            if code == 0:
                return self._drain() if self.buffered else ""
            self.runs_died += 1
            print(f"CHAOS run {self.runs} exited {code}; starting it again", flush=True)
        log = self.log_dir / f"run-{self.runs}.log"
        return f"the last run {self.runs} failed {FINAL_ATTEMPTS} times:\n{log_tail(log)}"

    def _drain(self) -> str:
        """``exactlyonce drain --until-idle``: the buffer into the sink (the drainer that
        went alongside the runs stopped first)."""
        if self.drainer is not None:
            self.drainer.stop()
        log = self.log_dir / "drain.log"
        cmd = [sys.executable, "-m", "exactlyonce.integration.cli", "drain", self.config]
        cmd += ["--until-idle", str(IDLE_SECONDS)]
        print("CHAOS draining the buffer into the sink", flush=True)
        with open(log, "w", encoding="utf-8") as out:
            env = {**os.environ, **self.env}
            code = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False
            ).returncode
        return "" if code == 0 else f"the drain exited {code}:\n{log_tail(log)}"
