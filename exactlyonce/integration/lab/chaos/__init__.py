"""``exactlyonce chaos``: run any pipeline file under a seeded schedule of faults, restart
what was killed, and audit the sink at the end.

- :mod:`.schedule`: the seeded, pure schedule (driver kills at random moments and at named
  crash points, hard and clean restarts of local servers, lost replies, refused and stalled
  connections, worker kills, drainer kills);
- :mod:`exactlyonce.integration.lab.runs`: runs of ``exactlyonce run`` as process groups
  (shared with ``make demo``), their output echoed by :mod:`exactlyonce.integration.lab.echo`;
- :mod:`.servers`: which of the pipeline's servers are local services that may be restarted
  (the others are named as skipped), and restarting one;
- :mod:`.proxy`: the fault proxy in front of the sink's server, and its faults;
- :mod:`.rewrite`: the pipeline file the runs get (the sink through the proxy, the master of
  the standalone cluster of :mod:`exactlyonce.integration.lab.cluster`);
- :mod:`.drainer`: a buffered pipeline's drainer, going alongside the runs;
- :mod:`.harness`: each fault carried out on a live run and checked to have happened, then
  the last run (and the drain of a buffered pipeline);
- :mod:`.inputs`: the expected IDs (a file, a fresh seeded input, or the source's files);
- :mod:`.report`: the verdict line and the JSON report.

- :mod:`.command`: the command's work, which the CLI's parser
  (:mod:`exactlyonce.integration.cli.chaos`) reaches by name, on use.

The audit is :mod:`exactlyonce.integration.audit`'s.
"""

from __future__ import annotations

from exactlyonce.integration.lab.chaos.drainer import DrainerProcess
from exactlyonce.integration.lab.chaos.harness import Chaos, Outcome
from exactlyonce.integration.lab.chaos.inputs import (
    ExpectedInput,
    fresh_query,
    from_file,
    from_source,
    id_from,
    needs_fresh_input,
    write_events,
)
from exactlyonce.integration.lab.chaos.proxy import SinkProxy, sink_proxy
from exactlyonce.integration.lab.chaos.report import (
    ChaosReport,
    describe_faults,
    fault_counts,
    report_json,
    verdict,
)
from exactlyonce.integration.lab.chaos.rewrite import rewrite_pipeline
from exactlyonce.integration.lab.chaos.schedule import (
    PROXY_KINDS,
    Extras,
    Fault,
    check_points,
    check_proxy_kinds,
    fault_mix,
    plan,
    sink_points,
)
from exactlyonce.integration.lab.chaos.servers import Server, Skipped, restart, restartable
from exactlyonce.integration.lab.runs import kill_all

__all__ = [
    "id_from",
    "PROXY_KINDS",
    "Chaos",
    "ChaosReport",
    "DrainerProcess",
    "ExpectedInput",
    "Extras",
    "Fault",
    "Outcome",
    "Server",
    "SinkProxy",
    "Skipped",
    "check_points",
    "check_proxy_kinds",
    "describe_faults",
    "fault_counts",
    "fault_mix",
    "fresh_query",
    "from_file",
    "from_source",
    "kill_all",
    "needs_fresh_input",
    "plan",
    "report_json",
    "restart",
    "restartable",
    "rewrite_pipeline",
    "sink_points",
    "sink_proxy",
    "verdict",
    "write_events",
]
