"""Start, stop and check the local services as a set: the public API of this package.

Starts and stops are serialized between processes sharing one home dir (a file lock), so
tests and ``make services`` can run side by side. Each service module (``postgres``,
``redis``, ``redis_aof``, ``kafka``, ``tansu``, ``kafka_cluster``, ``opensearch``,
``es_stand_in``) has
``start``, ``stop``, ``pid`` and ``answers``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from exactlyonce.integration.envfile import home_dir, service_env, write_env_file
from exactlyonce.integration.lab.services import (
    es_stand_in,
    kafka,
    kafka_cluster,
    opensearch,
    postgres,
    redis,
    redis_aof,
    tansu,
)
from exactlyonce.integration.lab.services.docker import (
    DOCKER_NAMES,
    docker_down,
    docker_up,
    use_docker,
)
from exactlyonce.integration.lab.services.env import KNOWN_SERVICES, SERVICES, local_env
from exactlyonce.integration.lab.services.processes import pid_alive
from exactlyonce.integration.locking import exclusive


class _Service(Protocol):
    """What each service module offers (``postgres``, ``redis``, ``kafka``, ``tansu``,
    ``kafka_cluster``)."""

    PROCESS_NAME: str  # expected in /proc/<pid>/cmdline, so a recycled pid is not ours

    def start(self, home: Path) -> None: ...
    def stop(self, home: Path) -> None: ...
    def pid(self, home: Path) -> int | None: ...
    def answers(self) -> bool: ...


_MODULES: dict[str, _Service] = {
    "pg": postgres,
    "redis": redis,
    "kafka": kafka,
    "tansu": tansu,
    "kafka3": kafka_cluster,
    "redis-aof": redis_aof,
    "opensearch": opensearch,
    "es-stand-in": es_stand_in,
}


def _validate(names: Sequence[str]) -> list[str]:
    unknown = [n for n in names if n not in KNOWN_SERVICES]
    if unknown:
        raise ValueError(f"unknown service(s) {unknown}; known: {', '.join(KNOWN_SERVICES)}")
    return list(dict.fromkeys(names))


def start_service(name: str, home: Path | None = None) -> None:
    """Start one service if it is not running, and return once it answers. PostgreSQL and
    Kafka keep their data across stop/start; Redis and Tansu start empty. Also (re)writes
    the env file."""
    (name,) = _validate([name])
    root = home_dir(home)
    with exclusive(root / "services.lock"):
        _MODULES[name].start(root)
        write_env_file(local_env(), root)


def stop_service(name: str, home: Path | None = None) -> None:
    """Stop one service and return once its process is gone; data on disk is kept. A
    service that is not running is left as is (its stale pid file removed)."""
    (name,) = _validate([name])
    root = home_dir(home)
    with exclusive(root / "services.lock"):
        _MODULES[name].stop(root)


def up(names: Sequence[str] = SERVICES, home: Path | None = None) -> dict[str, str]:
    """Start the named services (those running and answering are left alone), wait until
    each answers, write ``<home>/services.env`` and return :func:`service_env`. Raises
    ``RuntimeError`` naming the service and its log if one does not come up."""
    wanted = _validate(names)
    root = home_dir(home)
    if use_docker():
        local_only = [n for n in wanted if n not in DOCKER_NAMES]
        if local_only:
            raise ValueError(
                f"{', '.join(local_only)}: not in docker-compose.yml, only a local process; "
                "set EXACTLYONCE_USE_DOCKER=0 to start it"
            )
        return docker_up(wanted, root)
    if os.environ.get("EXACTLYONCE_USE_DOCKER") == "1":
        print("note: no Docker engine answers; starting local processes", file=sys.stderr)
    with exclusive(root / "services.lock"):
        for name in wanted:
            _MODULES[name].start(root)
        write_env_file(local_env(), root)
    return service_env(root)


def down(names: Sequence[str] = KNOWN_SERVICES, home: Path | None = None) -> None:
    """Stop the named services (by default every one, Tansu too); returns once their
    processes are gone."""
    wanted = _validate(names)
    root = home_dir(home)
    if use_docker():
        docker_down([n for n in wanted if n in DOCKER_NAMES])  # the others never run there
        return
    with exclusive(root / "services.lock"):
        for name in reversed(wanted):
            _MODULES[name].stop(root)


def service_pid(name: str, home: Path | None = None) -> int | None:
    """The pid of the running local process of ``name``, or None if it is not running."""
    module = _MODULES[name]
    pid = module.pid(home_dir(home))
    return pid if pid is not None and pid_alive(pid, module.PROCESS_NAME) else None


def status(names: Sequence[str] = SERVICES, home: Path | None = None) -> dict[str, bool]:
    """For each named service: True if its local process is alive and answers on its
    port (with Docker in use: if it answers)."""
    wanted = _validate(names)
    docker = use_docker()
    return {
        name: (docker or service_pid(name, home) is not None) and _MODULES[name].answers()
        for name in wanted
    }
