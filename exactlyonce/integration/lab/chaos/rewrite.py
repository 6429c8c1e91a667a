"""The pipeline file ``exactlyonce chaos`` gives its runs and drainer: the user's file with
the sink's address pointed at the fault proxy (:mod:`.proxy`) and ``spark.master`` at the
local standalone cluster (:mod:`exactlyonce.integration.lab.cluster`), when chaos has them.

The file is the user's YAML as written (its ``${VAR}`` references kept, so no credential is
written out); the sink's address becomes ``${EXACTLYONCE_CHAOS_SINK_ADDRESS}``, whose value
(the address through the proxy, credentials and all) goes only into the environment of the
processes chaos starts. Relative paths stay relative to the working directory, as in the
user's file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from exactlyonce.connectors import registry
from exactlyonce.errors import ConfigError

ADDRESS_ENV = "EXACTLYONCE_CHAOS_SINK_ADDRESS"


def _address_field(sink_type: str) -> str | None:
    """The config field holding the sink's server address (its registry entry says)."""
    try:
        return registry.kind_named(sink_type, "sink.type").chaos.address_field
    except ConfigError:
        return None


def rewrite_pipeline(
    config: str,
    out: Path,
    *,
    sink_address: str | None = None,
    master: str | None = None,
) -> tuple[str, dict[str, str]]:
    """Write ``config`` with the sink's address (when ``sink_address``) and the Spark master
    (when ``master``) replaced to ``out``; its path and the environment the runs need. With
    neither, ``config`` itself and no environment."""
    if sink_address is None and master is None:
        return config, {}
    data: dict[str, Any] = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
    env: dict[str, str] = {}
    if sink_address is not None:
        sink = data["sink"]
        field = _address_field(sink.get("type", ""))
        if field is None:
            raise ConfigError("sink.type", f"{sink.get('type')!r} has no address to proxy")
        reference = "${" + ADDRESS_ENV + "}"
        sink[field] = [reference] if field == "hosts" else reference
        env[ADDRESS_ENV] = sink_address
    if master is not None:
        spark = data.get("spark") or {}
        spark["master"] = master
        data["spark"] = spark
    out.write_text(
        f"# {config} as exactlyonce chaos runs it (sink through its fault proxy, or on its "
        "standalone cluster)\n" + yaml.safe_dump(data, sort_keys=False),
        encoding="utf-8",
    )
    return str(out), env
