"""Two starts of one Kafka sink probing the broker at once (a restarted job and `exactlyonce
heads`, say) share the probe's transactional id: the later one fences the earlier. The
fenced probe must write itself again, not fail its process (found by `make demo`: the demo's
head read died with ``_FENCED`` while its job was starting)."""

from __future__ import annotations

import multiprocessing

import pytest

from exactlyonce.connectors import KafkaSink

pytestmark = pytest.mark.integration

PROBES_EACH = 8


def probe_again(bootstrap: str, name: str) -> int:
    """In its own process: write the broker probe ``PROBES_EACH`` times (past the
    per-process cache of its answer); how many succeeded."""
    from exactlyonce.connectors.kafka import preflight

    sink = KafkaSink(bootstrap, name, ["event_id"], name)
    for _ in range(PROBES_EACH):
        preflight._write_probe(sink)
    return PROBES_EACH


def test_concurrent_probes_of_one_sink_all_succeed(bootstrap: str, unique_name: str) -> None:
    KafkaSink(bootstrap, unique_name, ["event_id"], unique_name, create_topic=True).preflight()
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        done = pool.starmap(probe_again, [(bootstrap, unique_name)] * 2, chunksize=1)
    assert done == [PROBES_EACH, PROBES_EACH]
