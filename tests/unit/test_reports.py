"""Batch reports: the Bloom over-capacity warning (pure logic; no services)."""

from __future__ import annotations

from exactlyonce.connectors.base import BatchReport, bloom_over_capacity
from exactlyonce.dedup.catalog import DedupConfig

CONFIG = DedupConfig("redis://127.0.0.1:1/0", expected_ids=1_000_000, fp_rate=0.001)


def report(negatives: int, false_positives: int) -> BatchReport:
    return BatchReport(
        "q",
        "sink",
        7,
        skipped=False,
        bloom_negatives=negatives,
        bloom_false_positives=false_positives,
        catalog_lookups=false_positives,
    )


def test_a_saturated_filter_is_named_with_the_setting_to_raise() -> None:
    warning = bloom_over_capacity(report(236_231, 263_769), CONFIG)
    assert warning is not None
    assert "epoch 7: 52.8% of the new IDs were Bloom false positives" in warning
    assert "expected_ids (now 1,000,000)" in warning
    assert "redis://" not in warning


def test_a_filter_within_its_rate_or_without_dedup_gives_no_warning() -> None:
    assert bloom_over_capacity(report(499_500, 500), CONFIG) is None  # 0.1%, as configured
    assert bloom_over_capacity(report(400, 600), CONFIG) is None  # too few lookups to judge
    assert bloom_over_capacity(report(236_231, 263_769), None) is None  # dedup=False
