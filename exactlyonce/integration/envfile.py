"""The services env file, ``<home>/services.env``: where the services a pipeline file names
with ``${EXACTLYONCE_PG_DSN}`` & co. are.

``exactlyonce`` (the CLI) fills unset variables from it, the examples and the benchmarks
read it (:func:`service_env`), and the lab's ``services up``
(``python -m exactlyonce.integration.lab.services up``, ``make services``) writes it
(:func:`write_env_file`). The home is ``EXACTLYONCE_HOME``, default ``<cwd>/.exactlyonce``
(:func:`home_dir`). Variables set in the environment win over the file, so services elsewhere
(docker compose, a real cluster) need no file at all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

ENV_KEYS: tuple[str, ...] = (
    "EXACTLYONCE_PG_DSN",
    "EXACTLYONCE_REDIS_URL",
    "KAFKA_BOOTSTRAP_SERVERS",
)
ENV_FILE = "services.env"


def home_dir(home: Path | None = None) -> Path:
    """The absolute services directory: ``home``, else ``$EXACTLYONCE_HOME``, else
    ``<cwd>/.exactlyonce``. Not created here."""
    if home is None:
        home = Path(os.environ.get("EXACTLYONCE_HOME") or Path.cwd() / ".exactlyonce")
    return Path(home).expanduser().absolute()


def parse_env_file(text: str) -> dict[str, str]:
    """``KEY=value`` lines to a dict. Blank lines and ``#`` comments are skipped, an optional
    ``export`` prefix and one pair of surrounding quotes are removed; the value is kept
    verbatim otherwise (it may contain ``=``)."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def format_env_file(values: dict[str, str]) -> str:
    """The env file text: one ``KEY=value`` line per key, in the order given."""
    return "".join(f"{key}={value}\n" for key, value in values.items())


def write_env_file(values: dict[str, str], home: Path | None = None) -> Path:
    """Write ``<home>/services.env`` atomically (readers never see half a file)."""
    path = home_dir(home) / ENV_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{ENV_FILE}.{os.getpid()}")
    tmp.write_text(format_env_file(values))
    os.replace(tmp, path)
    return path


def service_env(home: Path | None = None) -> dict[str, str]:
    """Where the services are: the keys of :data:`ENV_KEYS`.

    Each value comes from ``os.environ`` when set there (non-empty), else from
    ``<home>/services.env``. Guaranteed to return every key of :data:`ENV_KEYS`; raises
    ``RuntimeError`` telling the user to run ``make services`` when one can be found in
    neither place.
    """
    path = home_dir(home) / ENV_FILE
    values: dict[str, str] = {}
    if path.is_file():
        values.update(parse_env_file(path.read_text()))
    for key in ENV_KEYS:
        if os.environ.get(key):
            values[key] = os.environ[key]
    missing = [key for key in ENV_KEYS if not values.get(key)]
    if missing:
        raise RuntimeError(
            f"services not configured: {', '.join(missing)} not set and {path} "
            f"{'lacks them' if path.is_file() else 'does not exist'}. Run `make services` "
            "(python -m exactlyonce.integration.lab.services up), or export "
            f"{', '.join(ENV_KEYS)} to point at running services (e.g. docker compose)."
        )
    return {key: values[key] for key in ENV_KEYS}


# ${NAME}, ${NAME:-default}; $${ is a literal ${.
_VAR = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand(text: str, environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """``text`` with each ``${NAME}`` replaced by ``environ[NAME]`` (``${NAME:-default}``:
    the default when unset or empty; ``$${`` is a literal ``${``), and the names that were
    unset and had no default, in order (each replaced by nothing)."""
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found is not None and (found or default is None):
            return found
        if default is not None:
            return default
        missing.append(name)
        return ""

    return _VAR.sub(replace, text), missing
