"""The catalog's Lua scripts ship as package files, and each has its in-memory twin."""

from __future__ import annotations

from importlib.resources import files

from exactlyonce.dedup import catalog, scripts
from exactlyonce.testing.memory_scripts import SCRIPTS


def test_every_lua_file_is_loaded_and_has_a_python_twin() -> None:
    names = sorted(
        p.name[: -len(".lua")] for p in files(scripts).iterdir() if p.name.endswith(".lua")
    )
    assert names == ["claim", "lookup", "mark", "merge", "merge_bits", "register", "unmark"]
    loaded = [
        scripts.LUA_CLAIM,
        scripts.LUA_LOOKUP,
        scripts.LUA_MARK,
        scripts.LUA_MERGE,
        scripts.LUA_MERGE_BITS,
        scripts.LUA_REGISTER,
        scripts.LUA_UNMARK,
    ]
    assert [scripts.load(n) for n in names] == loaded
    assert set(SCRIPTS) == set(loaded)


def test_the_old_import_path_gives_the_same_scripts() -> None:
    assert catalog.LUA_MARK is scripts.LUA_MARK
    assert catalog.LUA_LOOKUP is scripts.LUA_LOOKUP
    assert catalog.LUA_UNMARK is scripts.LUA_UNMARK
    assert "CATALOG_LOST" in scripts.LUA_MARK and "CATALOG_LOST" in scripts.LUA_LOOKUP
