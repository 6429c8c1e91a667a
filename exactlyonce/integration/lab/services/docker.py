"""The services from Docker instead: ``docker compose`` on the project's ``docker-compose.yml``.

Used when ``EXACTLYONCE_USE_DOCKER=1`` and a Docker engine answers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from exactlyonce.integration.envfile import service_env, write_env_file
from exactlyonce.integration.lab.services.env import PG_DB, PG_PASSWORD, PG_USER
from exactlyonce.integration.lab.services.processes import check, run

# Compose service name and the port it listens on inside its container.
DOCKER_NAMES: dict[str, tuple[str, int]] = {
    "pg": ("postgres", 5432),
    "redis": ("redis", 6379),
    "kafka": ("kafka", 9092),
}


def compose_file() -> Path:
    """``./docker-compose.yml``, else the one at the root of the checkout holding this file."""
    local = Path.cwd() / "docker-compose.yml"
    return local if local.is_file() else Path(__file__).resolve().parents[4] / "docker-compose.yml"


def use_docker() -> bool:
    """True when ``EXACTLYONCE_USE_DOCKER=1`` and ``docker info`` succeeds."""
    if os.environ.get("EXACTLYONCE_USE_DOCKER") != "1" or shutil.which("docker") is None:
        return False
    try:
        return run(["docker", "info"], timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _compose() -> list[str]:
    return ["docker", "compose", "-f", str(compose_file())]


def _published_ports() -> dict[str, int]:
    """Each service's port on the host (the container's port if compose does not say)."""
    ports: dict[str, int] = {}
    for name, (service, inner) in DOCKER_NAMES.items():
        result = run([*_compose(), "port", service, str(inner)], timeout=30)
        if result.returncode == 0 and result.stdout.strip():
            ports[name] = int(result.stdout.strip().splitlines()[0].rpartition(":")[2])
        else:
            ports[name] = inner
    return ports


def docker_up(names: Sequence[str], home: Path) -> dict[str, str]:
    """``docker compose up -d --wait`` the named services, write the env file, return
    :func:`service_env`."""
    services = (DOCKER_NAMES[n][0] for n in names)
    check(run([*_compose(), "up", "-d", "--wait", *services], timeout=600), "docker compose up")
    ports = _published_ports()
    values = {
        "EXACTLYONCE_PG_DSN": (
            f"postgresql://{PG_USER}:{PG_PASSWORD}@localhost:{ports['pg']}/{PG_DB}"
        ),
        "EXACTLYONCE_REDIS_URL": f"redis://localhost:{ports['redis']}/0",
        "KAFKA_BOOTSTRAP_SERVERS": f"localhost:{ports['kafka']}",
    }
    write_env_file(values, home)
    return service_env(home)


def docker_down(names: Sequence[str]) -> None:
    """``docker compose stop`` the named services."""
    services = (DOCKER_NAMES[n][0] for n in names)
    check(run([*_compose(), "stop", *services], timeout=300), "docker compose stop")
