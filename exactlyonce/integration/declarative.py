"""An exactlyonce sink in Spark Declarative Pipelines (``spark-pipelines run``).

SDP's sinks take any format, Python data sources included, so an exactlyonce sink there is
``format("exactlyonce")`` (:mod:`exactlyonce.integration.datasource`) behind
``pyspark.pipelines.create_sink``. :func:`create_sink` does what a pipeline's definitions
file would otherwise do by hand, in order:

1. build the sink's config from the options and refuse what the data source path cannot
   write exactly once, at definition time: a bad setting fails the pipeline before any
   flow starts, naming the option; so does a credential in an option's text: SDP runs on
   Spark Connect, whose server logs the pipeline's definitions (options and all) in its
   event log and UI, whatever the option's name. Credentials travel as ``${ENV_VAR}``,
   read where the sink runs;
2. register the data source in the pipeline's session (SDP runs every flow through it);
3. let the session's Spark Connect client pass over the Python workers' accumulator
   reports (below);
4. ``dp.create_sink(name, format="exactlyonce", options=...)``.

The accumulator reports: every Python data source task returns its profiler accumulators,
which Spark Connect sends to the client as observed metrics named
``__python_accumulator__``. pyspark's pipeline runner (4.1-4.2) reads the run's event
stream with ``execute_command_as_iterator``, which takes anything but an event for an error
(``[UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__=...)``): the
run stops after the flow's first batch, whatever the data source. The client has already
applied the reports (the profiler's) when it yields them, so dropping them is safe.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from exactlyonce.errors import ConfigError
from exactlyonce.integration.datasource.options import options_with_credentials, sink_config
from exactlyonce.integration.datasource.support import check_supported
from exactlyonce.integration.spark import register_data_source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("exactlyonce")

FORMAT = "exactlyonce"
ACCUMULATOR_METRICS = "__python_accumulator__"
_PATCHED = "_exactlyonce_skips_accumulator_metrics"


def create_sink(
    name: str,
    options: Mapping[str, Any],
    *,
    spark: SparkSession | None = None,
) -> dict[str, str]:
    """Define the SDP sink ``name`` that writes exactly once, for ``@dp.append_flow(target=
    name)``. ``options``: what ``format("exactlyonce")`` takes (``{"sink": "postgres",
    "dsn": "${EXACTLYONCE_PG_DSN}", "table": "events", ...}``; a value that is not text is
    given as JSON). ``spark``: the pipeline's session, by default the active one (the
    ``spark`` SDP hands a definitions file).

    Give the sink one flow, and set ``query_name`` to that flow's name: the sink's head
    belongs to one streaming query, and under Spark Connect its reset guard finds the
    query's id by that name when several flows run at once.

    Returns the options the sink was created with. Raises
    :class:`~exactlyonce.errors.ConfigError` naming the option on a bad setting, an unset
    environment variable, or a credential written into an option.
    """
    texts = {key: _text(value) for key, value in options.items()}
    check_supported(sink_config(texts))
    for option in options_with_credentials(texts):
        raise ConfigError(
            option,
            "holds a credential: Spark Connect logs a pipeline's sink options as text (event "
            "log, UI) whatever their names; give it as ${ENV_VAR}, set where the pipeline runs",
        )
    session = spark if spark is not None else _active_session()
    register_data_source(session)
    skip_accumulator_metrics(session)
    from pyspark import pipelines as dp

    dp.create_sink(name, format=FORMAT, options=texts)
    return texts


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _active_session() -> SparkSession:
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        raise RuntimeError(
            "create_sink: no active Spark session; call it from a pipeline's definitions "
            "file (spark-pipelines run), or pass spark="
        )
    return session


def skip_accumulator_metrics(spark: SparkSession) -> None:
    """Make ``spark``'s Spark Connect client pass over the ``__python_accumulator__``
    observed metrics its Python data source tasks report (see the module docstring). A
    classic session, or one already done, is left as it is."""
    client = getattr(spark, "client", None)
    if client is None or getattr(client, _PATCHED, False):
        return
    from pyspark.sql.connect.client.core import PlanObservedMetrics

    fetch = client._execute_and_fetch_as_iterator

    def without_accumulator_metrics(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for response in fetch(*args, **kwargs):
            if isinstance(response, PlanObservedMetrics) and response.name == ACCUMULATOR_METRICS:
                continue
            yield response

    client._execute_and_fetch_as_iterator = without_accumulator_metrics
    setattr(client, _PATCHED, True)
    log.debug("Spark Connect client: skipping %s observed metrics", ACCUMULATOR_METRICS)
