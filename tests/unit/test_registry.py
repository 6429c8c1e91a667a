"""The sink registry: one entry per sink, asked by every place that needs "the Redis one".

- no module outside a sink's own package names a concrete sink class (the rule the registry
  exists for: a fifth sink is one folder plus one registry line);
- every built-in entry's parts resolve, lazily;
- a sink registered from its own module is taken by pipeline files and the audit with no
  edit elsewhere (the in-memory sink of ``exactlyonce.testing``).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.kind import SinkKind
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import build_sink, parse_config
from exactlyonce.testing import FileStore, MemorySink
from exactlyonce.testing.drain import MemoryDrainTarget
from exactlyonce.testing.kind import KIND as MEMORY
from exactlyonce.testing.sink import MemorySinkConfig

PACKAGE = Path(__file__).resolve().parents[2] / "exactlyonce"
# The public facade re-exports the sinks by name (lazily); it is not a user of them.
FACADE = PACKAGE / "connectors" / "__init__.py"


def _sink_classes() -> dict[str, Path]:
    """Concrete sink class name -> the package allowed to name it."""
    found = {}
    for kind in registry.kinds():
        module, _, name = kind.sink.partition(":")
        found[name] = PACKAGE.parent.joinpath(*module.split(".")).parent
    found["MemorySink"] = PACKAGE / "testing"
    return found


def _names_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.name for alias in node.names)
    return names


def test_no_module_outside_a_sinks_own_package_names_a_concrete_sink_class() -> None:
    owners = _sink_classes()
    assert set(owners) >= {"PostgresSink", "KafkaSink", "RedisSink", "ElasticsearchSink"}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == FACADE:
            continue
        for name in sorted(_names_in(path) & set(owners)):
            if owners[name] not in path.parents:
                offenders.append(f"{path.relative_to(PACKAGE.parent)} names {name}")
    assert offenders == [], "ask exactlyonce.connectors.registry instead:\n" + "\n".join(offenders)


def test_the_rule_sees_a_class_named_in_code_not_in_prose(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('"""A PostgresSink in a docstring is prose."""\nx = 1\n')
    assert "PostgresSink" not in _names_in(probe)
    probe.write_text("from exactlyonce.connectors import PostgresSink\n")
    assert "PostgresSink" in _names_in(probe)
    probe.write_text("import exactlyonce.connectors as c\nisinstance(1, c.RedisSink)\n")
    assert "RedisSink" in _names_in(probe)


@pytest.mark.parametrize("name", registry.BUILT_IN)
def test_every_built_in_entry_resolves(name: str) -> None:
    kind = registry.kind_named(name)
    sink_class = kind.sink_class()
    assert sink_class.__doc__ and "exactly once" in sink_class.__doc__.lower()
    assert sink_class.kind == name
    assert callable(kind.audit_reader())
    assert callable(kind.datasource_traits().shape)
    assert name in kind.url.schemes
    drain = kind.drain_target()
    assert (drain is None) == (name == "kafka")
    if drain is not None:
        assert all(callable(getattr(drain, m)) for m in ("check", "guarantee", "offsets_stored"))


def test_an_unknown_name_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        registry.kind_named("mysql", field="sink.type")
    assert info.value.field == "sink.type"
    for name in registry.BUILT_IN:
        assert name in info.value.reason


def test_asking_for_one_sink_imports_no_other_sinks_client() -> None:
    """The registry names parts by string: resolving PostgreSQL's parts never imports the
    Kafka, Redis or Elasticsearch clients (checked in a fresh interpreter)."""
    import subprocess

    code = (
        "import sys\n"
        "from exactlyonce.connectors import registry\n"
        "k = registry.kind_named('postgres')\n"
        "k.sink_class(); k.drain_target(); k.audit_reader(); k.datasource_traits()\n"
        "print(sorted(m for m in ('confluent_kafka', 'redis', 'elasticsearch') "
        "if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


# -- a sink of one's own, registered from its own module -------------------------------------
# (tests/integration/test_plugin_sink.py runs it through an entry point: ``exactlyonce run``,
# the buffer's drainer and ``exactlyonce audit`` in their own processes)


def pipeline(store: Path) -> dict[str, object]:
    return {
        "query_name": "mem-q",
        "checkpoint": "ckpt",
        "source": {"type": "rate"},
        "sink": {
            "type": "memory",
            "path": str(store),
            "table": "events",
            "id_columns": ["value"],
            "mode": "insert",
            "dedup": False,
        },
    }


@pytest.fixture
def memory_kind() -> Iterator[SinkKind]:
    registry.register(MEMORY)
    yield MEMORY
    registry.unregister("memory")


def test_a_registered_sink_works_with_pipeline_files_and_the_audit(
    memory_kind: SinkKind, tmp_path: Path
) -> None:
    assert "memory" in registry.names()
    cfg = parse_config(pipeline(tmp_path / "store"))
    assert isinstance(cfg.sink, MemorySinkConfig)
    sink = build_sink(cfg.sink, check=False)
    assert isinstance(sink, MemorySink)
    assert registry.kind_of(sink) is MEMORY

    from exactlyonce.dedup.ids import record_id
    from exactlyonce.testing import run_in_process

    run_in_process(sink, 0, [{"value": 1}, {"value": 2}])
    expected = {record_id(["1"]): ["1"], record_id(["2"]): ["2"]}
    audit = registry.kind_of(sink).audit_reader()(sink, expected)
    assert audit.ok, audit
    assert audit.head_epoch == 0
    # insert mode's unique index would hide a second write: the store counts committed writes
    assert dict(audit.counts) == {rid: 1 for rid in expected}
    store = FileStore(tmp_path / "store")  # another process's view of the same file
    assert store.write_attempts == dict.fromkeys(expected, 1)
    assert registry.kind_of(sink).drain_target() is MemoryDrainTarget


def test_the_audit_sees_a_second_committed_write_a_unique_index_hides(
    memory_kind: SinkKind, tmp_path: Path
) -> None:
    """The proof can fail: a second committed write of an ID (rejected by insert mode's
    unique index, so one row) is a duplicate in the audit."""
    sink = build_sink(parse_config(pipeline(tmp_path / "store")).sink, check=True)
    assert isinstance(sink, MemorySink)
    row = {"value": "1", "record_id": "a" * 32, "epoch": 0}
    sink.store.commit(("q", "s"), 0, "events", [row], [], [0])
    sink.store.commit(("q", "s"), 1, "events", [row], [], [0])
    audit = MEMORY.audit_reader()(sink, {"a" * 32: ["1"]})
    assert len(sink.store.rows("events")) == 1
    assert audit.duplicates == 1 and not audit.ok


def test_without_registration_the_file_names_the_known_sinks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(pipeline(tmp_path / "store"))
    assert "sink" in info.value.field
