"""``exactlyonce heads SINK-URL`` against real services: after a real run, the URL form shows
exactly what the pipeline file shows (head, shard commits, catalog), and never the password."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from exactlyonce.integration import cli
from tests.integration.test_rewind import EPOCHS, heads_json, run_query, write_pipeline
from tests.support.es_fixtures import EsHandle

pytestmark = pytest.mark.integration


def url_heads(
    url: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[dict[str, Any], str]:
    """The URL's heads as JSON, and as text (both printed by the CLI)."""
    capsys.readouterr()
    assert cli.main(["heads", url, *extra, "--json"]) == 0, capsys.readouterr().err
    state: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert cli.main(["heads", url, *extra]) == 0
    return state, capsys.readouterr().out


def test_postgres_url_shows_what_the_pipeline_file_shows_without_the_password(
    tmp_path: Path,
    spark: Any,
    pg: psycopg.Connection[Any],
    services: dict[str, str],
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sink = (
        "  type: postgres\n  dsn: ${EXACTLYONCE_PG_DSN}\n"
        f"  table: {unique_name}\n  id_columns: [event_id]\n  shards: 2\n"
    )
    config = write_pipeline(tmp_path, unique_name, sink)
    run_query(spark, config)
    from_file = heads_json(config, capsys)
    assert from_file["head"]["epoch"] == len(EPOCHS) - 1 and from_file["catalog"]["exists"]

    dsn = services["EXACTLYONCE_PG_DSN"]
    password = psycopg.conninfo.conninfo_to_dict(dsn)["password"]
    assert password, "the test needs a DSN with a password to prove it is never shown"
    url = f"{dsn}?table={quote(unique_name)}"
    catalog = services["EXACTLYONCE_REDIS_URL"]
    state, text = url_heads(url, capsys, "--query-name", unique_name, "--catalog", catalog)
    assert state == from_file
    assert f"epoch {len(EPOCHS) - 1}" in text and "sink URL: postgresql://" in text
    assert str(password) not in text and ":***@" in text

    other, _ = url_heads(f"{url}&query_name=nobody", capsys, "--catalog", catalog)
    assert other["head"] is None and other["catalog"] == {"exists": False}


def test_redis_and_elasticsearch_urls_show_what_the_pipeline_files_show(
    tmp_path: Path,
    spark: Any,
    services: dict[str, str],
    es: EsHandle,  # noqa: F811
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    redis_url, key = services["EXACTLYONCE_REDIS_URL"], f"{unique_name}:events"
    index = unique_name.replace("_", "-")
    sinks = {
        "redis": (
            "  type: redis\n  url: ${EXACTLYONCE_REDIS_URL}\n"
            f"  key_template: '{key}'\n  write: stream\n  id_columns: [event_id]\n",
            f"{redis_url}?key_template={quote(key)}&write=stream",
        ),
        "elasticsearch": (
            f"  type: elasticsearch\n  hosts: {es.url}\n  index: {index}\n"
            f"  control_index: {index}-control\n  id_columns: [event_id]\n",
            f"elasticsearch://{es.url.split('://', 1)[1]}?index={index}"
            f"&control_index={index}-control",
        ),
    }
    for kind, (sink, url) in sinks.items():
        config = write_pipeline(tmp_path / kind, unique_name, sink)
        run_query(spark, config)
        from_file = heads_json(config, capsys)
        assert from_file["head"]["epoch"] == len(EPOCHS) - 1, kind
        state, _ = url_heads(url, capsys, "--query-name", unique_name, "--catalog", redis_url)
        assert state == from_file, kind


def test_kafka_url_of_a_query_that_never_ran_creates_no_topic(
    bootstrap: str, unique_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"kafka://{bootstrap}?topic={unique_name}&control_topic={unique_name}-control"
    state, text = url_heads(url, capsys, "--query-name", unique_name)
    assert state["head"] is None and state["kind"] == "kafka" and "no head yet" in text
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    assert not {unique_name, f"{unique_name}-control"} & set(topics), "heads created a topic"

    capsys.readouterr()
    assert cli.main(["heads", f"kafka://{bootstrap}?topic=bad topic", "--query-name", "q"]) == 2
    assert "?topic" in capsys.readouterr().err
