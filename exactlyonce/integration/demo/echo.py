"""A run's progress lines, echoed under the run's label: shared with ``exactlyonce chaos``,
so they live in :mod:`exactlyonce.integration.chaos.echo`."""

from __future__ import annotations

from exactlyonce.integration.chaos.echo import (
    DEDUP_FIELDS,
    DEDUP_TOTALS,
    echo,
    print_dedup_totals,
)

__all__ = ["DEDUP_FIELDS", "DEDUP_TOTALS", "echo", "print_dedup_totals"]
