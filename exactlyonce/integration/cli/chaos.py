"""``exactlyonce chaos pipeline.yaml [--kills N] [--seed S] [--duration T] [--expected-ids FILE
| --events N] [--points P,Q] [--commit-kills M] [--server-faults M] [--proxy-faults M]
[--proxy-kinds K,L] [--no-proxy] [--cluster] [--worker-kills M] [--drainer-kills M]
[--control | --no-control] [--json REPORT]``: run a pipeline under a seeded schedule of
faults, audit its sink, then run the same schedule against a plain at-least-once writer
(the negative control), which must show duplicates.

Only the arguments are parsed here: the work is the lab's
(:mod:`exactlyonce.integration.lab.chaos.command`), reached by name on use
(:mod:`exactlyonce.integration.cli.lab`), as the product never imports the lab.
"""

from __future__ import annotations

import argparse

from exactlyonce.integration.cli.lab import lab_command

DEFAULT_KILLS = 10


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chaos = sub.add_parser(
        "chaos",
        help="run a pipeline under seeded kills, server restarts, lost replies, refused and "
        "stalled connections, worker and drainer kills, then audit it",
    )
    chaos.add_argument("config", help="pipeline YAML file")
    chaos.add_argument(
        "--kills",
        type=int,
        default=DEFAULT_KILLS,
        metavar="N",
        help="faults to inject (default 10)",
    )
    chaos.add_argument(
        "--seed", type=int, metavar="S", help="replay a schedule (default: a fresh seed, printed)"
    )
    chaos.add_argument("--duration", type=float, metavar="T", help="start no fault after T seconds")
    expected = chaos.add_mutually_exclusive_group()
    expected.add_argument("--expected-ids", metavar="FILE", help="as for `exactlyonce audit`")
    expected.add_argument(
        "--events",
        type=int,
        metavar="N",
        help="write a fresh input of N distinct events (files source) and start the query afresh",
    )
    chaos.add_argument(
        "--files",
        type=int,
        metavar="F",
        help="with --events: input files (default 3 per fault + 10)",
    )
    chaos.add_argument("--expected-dead-letters", type=int, metavar="N")
    chaos.add_argument(
        "--points",
        metavar="P,Q",
        help="crash points for the named-point kills (default: the sink's; '' for none)",
    )
    chaos.add_argument(
        "--commit-kills",
        type=int,
        metavar="M",
        help="driver kills aimed at the window between a sink commit and Spark's commit "
        "log: the run is SIGKILLed the moment its next write commit becomes visible in the "
        "destination (default: about a third of the driver kills, at least one)",
    )
    chaos.add_argument(
        "--server-faults",
        type=int,
        metavar="M",
        help="server restarts among the faults (default: a fifth, when local servers "
        "can be restarted)",
    )
    chaos.add_argument(
        "--servers",
        metavar="S,T",
        help="restart only these of the pipeline's local services (pg, redis, kafka, "
        "kafka3); the others are named as skipped (default: every one)",
    )
    _add_extra_arguments(chaos)
    chaos.add_argument(
        "--log-dir", metavar="DIR", help="runs' logs (default: next to the checkpoint)"
    )
    chaos.add_argument("--json", metavar="REPORT", help="also write the report as JSON to REPORT")
    chaos.set_defaults(func=cmd_chaos)


def _add_extra_arguments(chaos: argparse.ArgumentParser) -> None:
    chaos.add_argument(
        "--proxy-faults",
        type=int,
        metavar="M",
        help="faults through the TCP proxy chaos puts in front of the sink's server "
        "(PostgreSQL, Redis, Elasticsearch): lost_reply (the reply to a COMMIT, EVALSHA or "
        "_bulk the server applied is lost), refuse (connections refused and cut a few "
        "seconds), stall (replies held a few seconds) (default: a fifth)",
    )
    chaos.add_argument(
        "--proxy-kinds",
        metavar="K,L",
        help="the proxy faults to use, in turn (default lost_reply,refuse,stall)",
    )
    chaos.add_argument("--no-proxy", action="store_true", help="talk to the sink's server directly")
    control = chaos.add_mutually_exclusive_group()
    control.add_argument(
        "--control",
        action="store_true",
        help="run the schedule against the negative control only (a plain at-least-once "
        "writer of the same records), to see the duplicates a sink without the protocol makes",
    )
    control.add_argument(
        "--no-control",
        action="store_true",
        help="skip the negative control (the verdict is then INCONCLUSIVE at best)",
    )
    chaos.add_argument(
        "--cluster",
        action="store_true",
        help="run on a local Spark standalone cluster (a master, 2 workers of 1 core) "
        "whose workers are SIGKILLed (worker_kill: worker, executor, Python workers) "
        "and started again",
    )
    chaos.add_argument(
        "--worker-kills", type=int, metavar="M", help="worker kills (default: a fifth)"
    )
    chaos.add_argument(
        "--drainer-kills",
        type=int,
        metavar="M",
        help="SIGKILLs of a buffered pipeline's drainer, which runs alongside the runs "
        "(default: a fifth)",
    )


def cmd_chaos(args: argparse.Namespace) -> int:
    """Exit 0 for EXACTLY ONCE (a clean audit, every fault happened, a control with
    duplicates), 1 for FAILED, 3 for INCONCLUSIVE, 2 on a bad configuration."""
    return int(lab_command("chaos")(args))
