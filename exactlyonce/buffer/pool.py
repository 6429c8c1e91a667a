"""Several drainer processes for one buffer: the partitions split between them.

One Python process reads, checks and hands over the records of a buffer at the speed of one
core (the GIL); a :class:`DrainerPool` runs ``processes`` drainers, member ``i`` of ``n``
draining the partitions ``p % n == i``. Each member keeps its own offsets rows (one per
partition, as a single drainer does), so the members never wait on one another and each stays
exactly-once on its own: the pool adds no coordination, only processes.

The sink objects are built inside each process by ``factory``, a picklable callable (a
module-level function, or :func:`functools.partial` of one) returning ``(sink, buffer)``:
a sink holds connections and secrets and is never pickled.

    def make() -> tuple[PostgresSink, KafkaBuffer]:
        return PostgresSink(dsn, "events", ["event_id"], "clicks"), KafkaBuffer(topic="clicks-buf")

    with DrainerPool(make, processes=2) as pool:
        report = pool.drain_available(timeout_s=300)

The command line does the same with ``exactlyonce drain pipeline.yaml --processes N``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from exactlyonce.errors import ConfigError, SinkUnavailableError

Factory = Callable[[], tuple[Any, Any]]


def _failure(exc: Exception, drainer: Any) -> tuple[str, Any]:
    """What a member sends back for ``exc``: a ConfigError keeps its field; other errors go
    as text, scrubbed of the drainer's secrets."""
    if isinstance(exc, ConfigError):
        return "config", (exc.field, exc.reason)
    text = f"{type(exc).__name__}: {exc}"
    return "error", drainer._scrub(text) if drainer is not None else text


def _member_main(
    conn: Connection, factory: Factory, member: tuple[int, int], options: dict[str, Any]
) -> None:
    """A member process: build the drainer once, then run the commands it is sent. A failed
    drain is reported and the member stays for the next call; a failed start ends it."""
    from exactlyonce.buffer.drain.drainer import DRAIN_PROCESS_SWITCH_INTERVAL_S, Drainer

    drainer = None
    try:
        sink, buffer = factory()
        options = {"switch_interval_s": DRAIN_PROCESS_SWITCH_INTERVAL_S, **options}
        drainer = Drainer(sink, buffer, member=member, **options)  # this process only drains
        conn.send(("ready", None))
        while True:
            command, arg = conn.recv()
            if command == "stop":
                break
            try:
                conn.send(("ok", drainer.drain_available(timeout_s=arg)))
            except Exception as exc:  # noqa: BLE001 - reported to the parent, who raises
                conn.send(_failure(exc, drainer))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, who raises
        conn.send(_failure(exc, drainer))
    finally:
        if drainer is not None:
            drainer.close()
        conn.close()


class DrainerPool:
    """``processes`` drainer processes over one buffer, started once and kept warm.

    ``options`` go to each :class:`~exactlyonce.buffer.drain.drainer.Drainer` (``batch_size``,
    ``writers``, ...). The processes are forked from a fork server (``forkserver``), never
    from this process, which may run a JVM and client threads.
    """

    def __init__(
        self, factory: Factory, processes: int = 2, start_method: str = "forkserver", **options: Any
    ) -> None:
        if not isinstance(processes, int) or not 1 <= processes <= 256:
            raise ConfigError("processes", f"an integer from 1 to 256, got {processes!r}")
        self.processes = processes
        context: Any = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            context.set_forkserver_preload(["exactlyonce.buffer.drain.drainer"])
        self._members: list[tuple[Any, Connection]] = []
        for index in range(processes):
            mine, theirs = context.Pipe()
            proc = context.Process(
                target=_member_main,
                args=(theirs, factory, (index, processes), options),
                name=f"exactlyonce-drainer-{index}",
                daemon=True,
            )
            proc.start()
            theirs.close()
            self._members.append((proc, mine))
        try:
            self._gather("starting")
        except BaseException:
            self.close()
            raise

    def _gather(self, what: str) -> list[Any]:
        results: list[Any] = []
        failures: list[str] = []
        config: ConfigError | None = None
        for index, (_, conn) in enumerate(self._members):
            try:
                status, value = conn.recv()
            except EOFError:
                failures.append(f"member {index} exited while {what}")
                continue
            if status == "config":
                config = config or ConfigError(*value)
            elif status == "error":
                failures.append(f"member {index}: {value}")
            else:
                results.append(value)
        if config is not None:
            raise config
        if failures:
            raise SinkUnavailableError(f"drainer pool {what}: " + "; ".join(failures))
        return results

    def drain_available(self, timeout_s: float = 300.0) -> Any:
        """Every member drains what the buffer committed for its partitions; the summed
        :class:`~exactlyonce.buffer.drain.drainer.DrainReport` (``seconds``: the slowest member)."""
        from exactlyonce.buffer.drain.drainer import DrainReport

        for _, conn in self._members:
            conn.send(("drain", timeout_s))
        total = DrainReport()
        slowest = 0.0
        for report in self._gather("draining"):
            total.add(report)
            slowest = max(slowest, report.seconds)
        total.seconds = slowest
        return total

    def close(self) -> None:
        for proc, conn in self._members:
            with contextlib.suppress(OSError, ValueError):  # the member is gone already
                conn.send(("stop", None))
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            conn.close()
        self._members = []

    def __enter__(self) -> DrainerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
