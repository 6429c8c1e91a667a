"""Spark's connector jars for a pyspark whose connectors Maven does not serve (pyspark 4.3.0
here, measured): the error names the version, what is missing and what to do, first, and
keeps Maven's reason without its colour codes. Pure logic: the Maven resolution is replaced."""

from __future__ import annotations

import re
from pathlib import Path

import pyspark
import pytest

from exactlyonce.integration import jars

# What `mvn dependency:copy-dependencies` printed for -Dspark.version=4.3.0 (abridged).
MAVEN_4_3 = (
    "Maven could not resolve the spark-connectors jars (spark-connectors.xml):\n"
    "\x1b[0m[ERROR] Failed to execute goal on project spark-connectors: Could not resolve "
    "dependencies for project dev.exactlyonce.local:spark-connectors:pom:1: The following "
    "artifacts could not be resolved: org.apache.spark:spark-sql-kafka-0-10_2.13:jar:4.3.0, "
    "org.apache.spark:spark-avro_2.13:jar:4.3.0: Could not find artifact "
    "org.apache.spark:spark-sql-kafka-0-10_2.13:jar:4.3.0 in central -> [Help 1]\n"
    "[ERROR] \n[ERROR] To see the full stack trace of the errors, re-run Maven with -e.\n"
)


def test_unserved_connectors_name_the_pyspark_version_and_the_way_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[jars.JarSet] = []

    def not_served(jar_set: jars.JarSet) -> list[object]:
        asked.append(jar_set)
        raise RuntimeError(MAVEN_4_3)

    monkeypatch.setattr(pyspark, "__version__", "4.3.0")
    monkeypatch.setattr(jars, "resolve", not_served)
    with pytest.raises(RuntimeError) as raised:
        jars.spark_connector_jars()
    assert [j.properties["spark.version"] for j in asked] == ["4.3.0"]
    message = str(raised.value)
    first = message.splitlines()[0]
    assert first.startswith("Spark's Kafka and Avro connectors for pyspark 4.3.0 (")
    assert "org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0" in first
    assert "org.apache.spark:spark-avro_2.13:4.3.0" in first
    assert "does not serve them for Spark 4.3.0" in first
    assert f"its tests run on {jars.NEWEST_TESTED_PYSPARK}" in first
    assert f"pip install 'pyspark=={jars.NEWEST_TESTED_PYSPARK}'" in first
    assert "session(connectors=False)" in first
    assert message.splitlines()[1].startswith("Maven: [ERROR] Failed to execute goal")
    assert "Could not find artifact" in message and "\x1b" not in message
    assert len(message.splitlines()) == 2, "one line of Maven's, not its help text"


def test_a_cached_not_found_is_unserved_and_another_failure_is_not() -> None:
    cached = "[ERROR] ... org.apache.spark:spark-avro_2.13:jar:4.3.0 was not found in central"
    assert "does not serve them for Spark 4.3.0" in jars.connectors_missing("4.3.0", cached)
    message = jars.connectors_missing("4.2.0", "[ERROR] Network is unreachable\n")
    assert "for pyspark 4.2.0" in message and "resolved with Maven." in message
    assert "does not serve" not in message
    assert message.endswith("Maven: [ERROR] Network is unreachable")


def test_the_tested_version_named_is_the_dev_extras_newest() -> None:
    """The error and the docs name :data:`NEWEST_TESTED_PYSPARK`: the newest pyspark the dev
    extra's pin admits (raise both together)."""
    from packaging.specifiers import SpecifierSet

    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    (capped,) = re.findall(r'"pyspark([^"\[]*<[^"]*)"', pyproject)  # the dev extra's, alone
    pin = SpecifierSet(capped)
    newest = jars.NEWEST_TESTED_PYSPARK
    major, minor, patch = (int(n) for n in newest.split("."))
    assert pin.contains(newest) and not pin.contains(f"{major}.{minor}.{patch + 1}")
    assert not pin.contains(f"{major}.{minor + 1}.0")
