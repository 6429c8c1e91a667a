"""The audit's shared verdict and naming (pure logic; the readers are tested against real
services in tests/integration/test_audit_sinks.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from exactlyonce.connectors.redis import KeyTemplate
from exactlyonce.connectors.redis.audit import key_pattern
from exactlyonce.dedup.ids import record_id
from exactlyonce.integration.audit import SinkAudit, audit_json, read_expected


def audit(counts: dict[str, int], **more: object) -> SinkAudit:
    expected = {record_id([e]): [e] for e in ("a", "b")}
    return SinkAudit(
        query_name="q", sink="s", kind="elasticsearch", read_with="", unit="documents",
        expected=expected, counts=Counter(counts), head_epoch=0, dead_letters=0,
        **more,  # type: ignore[arg-type]
    )  # fmt: skip


def test_every_expected_id_once_is_exactly_once() -> None:
    assert audit({record_id(["a"]): 1, record_id(["b"]): 1}).ok


def test_a_rewritten_document_is_a_duplicate_only_for_op_type_create() -> None:
    counts = {record_id(["a"]): 1, record_id(["b"]): 1}
    rewritten = {record_id(["a"]): 3}
    assert audit(counts, rewritten=rewritten).ok  # op_type index: reported, not a failure
    found = audit(counts, rewritten=rewritten, rewritten_is_duplicate=True)
    assert not found.ok and found.duplicates == 2
    assert audit_json(found)["duplicate_ids"] == {"a": 3}


def test_missing_unexpected_and_unattributable_fail_and_are_named() -> None:
    found = audit({record_id(["a"]): 1, "f" * 32: 1})
    doc = audit_json(found)
    assert not found.ok and doc["missing_ids"] == ["b"] and doc["unexpected_ids"] == ["f" * 32]
    assert not audit({record_id(["a"]): 1, record_id(["b"]): 1}, unattributable=1).ok
    assert not audit({record_id(["a"]): 1, record_id(["b"]): 1}, expected_dead_letters=1).ok


def test_expected_ids_are_bare_values_or_json_arrays(tmp_path: Path) -> None:
    path = tmp_path / "ids.txt"
    path.write_text('e1\n\n["e2", 7]\n42\n')
    assert read_expected(path) == {
        record_id(["e1"]): ["e1"],
        record_id(["e2", 7]): ["e2", 7],
        record_id([42]): [42],
    }


def test_a_key_templates_scan_pattern_escapes_glob_characters() -> None:
    assert key_pattern(KeyTemplate.parse("user:{id}")) == "user:*"
    assert key_pattern(KeyTemplate.parse("a*[b]:{x}:{y}")) == "a\\*\\[b\\]:*:*"
