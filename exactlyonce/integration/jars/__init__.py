"""Java dependencies from Maven Central, resolved once into a cache folder.

Three jar sets, each a small pom beside this module:

- ``kafka-broker`` (:data:`KAFKA_BROKER`): the genuine Apache Kafka broker the local services
  run (:mod:`exactlyonce.integration.lab.services.kafka`);
- ``opensearch-node`` (:data:`OPENSEARCH_NODE`): a genuine OpenSearch node's server jars, for
  the local service ``opensearch`` (:mod:`exactlyonce.integration.lab.services.opensearch`)
  and the OpenSearch tests;
- ``spark-connectors`` (:data:`SPARK_CONNECTORS`): Spark's own Kafka source and sink
  (``spark-sql-kafka-0-10`` with ``kafka-clients`` and ``commons-pool2``) and ``spark-avro``,
  for the installed pyspark's Spark version, handed to Spark as ``spark.jars``.

Resolution runs ``mvn -q -B -f POM dependency:copy-dependencies`` into a temp folder that is
renamed into place once complete, so a folder that exists is whole. Maven's own ``~/.m2``
cache makes a second resolution fast. The cache is ``$EXACTLYONCE_JARS``, else
``$XDG_CACHE_HOME/exactlyonce/jars``, else ``~/.cache/exactlyonce/jars``. Nothing is
downloaded from anywhere but the Maven repository Maven is configured with.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from exactlyonce.integration.locking import exclusive

_HERE = Path(__file__).resolve().parent
MAVEN_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class JarSet:
    """One pom and the artifacts of its resolution that are kept (all when ``keep`` is
    empty)."""

    name: str
    keep: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def pom(self) -> Path:
        return _HERE / f"{self.name}.xml"

    def with_properties(self, **values: str) -> JarSet:
        return JarSet(self.name, self.keep, {**self.properties, **values})


KAFKA_BROKER = JarSet("kafka-broker")
OPENSEARCH_NODE = JarSet("opensearch-node")
# pyspark ships Spark, Scala, Hadoop and the compression codecs; two copies on one class
# path would be a conflict, so only the connectors and what they add are kept.
SPARK_CONNECTORS = JarSet(
    "spark-connectors",
    keep=(
        "spark-sql-kafka-0-10_2.13",
        "spark-token-provider-kafka-0-10_2.13",
        "kafka-clients",
        "commons-pool2",
        "spark-avro_2.13",
    ),
)


def cache_root() -> Path:
    """Where resolved jar folders live (not created here)."""
    if os.environ.get("EXACTLYONCE_JARS"):
        return Path(os.environ["EXACTLYONCE_JARS"]).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "exactlyonce" / "jars"


def require_program(program: str, install: str) -> str:
    """The path of ``program``; raises naming what to install when it is missing."""
    found = shutil.which(program)
    if found is None:
        raise RuntimeError(f"`{program}` not found on PATH: install {install}")
    return found


def require_maven() -> str:
    return require_program("mvn", "Apache Maven (apt-get install -y maven)")


def require_java() -> str:
    """The ``java`` to run (``$JAVA_HOME/bin/java`` when set)."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return require_program("java", "Java 17+ (apt-get install -y openjdk-17-jre-headless)")


def folder(jars: JarSet) -> Path:
    """The cache folder of ``jars``: named by the pom's content and the properties given."""
    digest = hashlib.sha256(jars.pom.read_bytes())
    digest.update(repr(sorted(jars.properties.items())).encode())
    label = "-".join([jars.name, *(v for _, v in sorted(jars.properties.items()))])
    return cache_root() / f"{label}-{digest.hexdigest()[:10]}"


def resolve(jars: JarSet) -> list[Path]:
    """The jar files of ``jars``, resolved with Maven the first time (a few seconds with a
    warm ``~/.m2``; longer when Maven downloads). Raises ``RuntimeError`` with Maven's output
    if resolution fails, naming what to install if Maven is missing."""
    target = folder(jars)
    if not target.is_dir():
        with exclusive(cache_root() / ".lock"):
            if not target.is_dir():
                _copy_dependencies(jars, target)
    return sorted(target.glob("*.jar"))


def classpath(jars: JarSet) -> str:
    """The resolved jars as one class path string."""
    return os.pathsep.join(str(p) for p in resolve(jars))


def _copy_dependencies(jars: JarSet, target: Path) -> None:
    staging = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    argv = [
        require_maven(),
        "-q",
        "-B",
        "-f",
        str(jars.pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
        *(f"-D{key}={value}" for key, value in sorted(jars.properties.items())),
    ]
    if jars.keep:
        argv.append(f"-DincludeArtifactIds={','.join(jars.keep)}")
    print(f"resolving {jars.name} jars from Maven into {target} ...", flush=True)
    started = time.monotonic()
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False
    )
    if result.returncode != 0 or not any(staging.glob("*.jar")):
        shutil.rmtree(staging, ignore_errors=True)
        output = (result.stdout + result.stderr).strip()[-3000:]
        raise RuntimeError(f"Maven could not resolve the {jars.name} jars ({jars.pom}):\n{output}")
    staging.rename(target)
    count = len(list(target.glob("*.jar")))
    print(f"  {count} jars in {time.monotonic() - started:.1f} s", flush=True)


def spark_connectors() -> JarSet:
    """:data:`SPARK_CONNECTORS` for the installed pyspark's Spark version."""
    import pyspark

    return SPARK_CONNECTORS.with_properties(**{"spark.version": pyspark.__version__})


def spark_connector_jars() -> list[Path]:
    """Spark's Kafka and Avro connector jars matching the installed pyspark. Maven Central
    must serve the connectors for that exact version; it lags PyPI, so a newer pyspark may
    have none yet: then a ``RuntimeError`` says so (:func:`connectors_missing`)."""
    jars = spark_connectors()
    try:
        return resolve(jars)
    except RuntimeError as exc:
        raise RuntimeError(connectors_missing(jars.properties["spark.version"], str(exc))) from None


# The newest pyspark the tests run with (the dev extra's pin in pyproject.toml): the newest
# whose connectors this project's Maven repository served when it was last raised.
NEWEST_TESTED_PYSPARK = "4.2.0"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CONNECTORS = ("spark-sql-kafka-0-10_2.13", "spark-avro_2.13")  # spark-connectors.xml's own


def connectors_missing(version: str, maven_error: str) -> str:
    """The message for Spark's connectors of pyspark ``version`` failing to resolve: what is
    missing and for which version first, what to do, then Maven's reason (its first error)."""
    artifacts = ", ".join(f"org.apache.spark:{name}:{version}" for name in _CONNECTORS)
    plain = _ANSI.sub("", maven_error)
    # Maven's words for an artifact the repository lacks (the second: that answer, cached).
    not_served = "Could not find artifact" in plain or "was not found in" in plain
    reason = next(
        (line.strip() for line in plain.splitlines() if line.lstrip().startswith("[ERROR]")),
        plain.strip().splitlines()[-1] if plain.strip() else "(no output)",
    )
    return (
        f"Spark's Kafka and Avro connectors for pyspark {version} ({artifacts}) could not be "
        + (
            f"resolved: the Maven repository does not serve them for Spark {version}"
            " (they reach Maven Central apart from pyspark on PyPI, sometimes later)"
            if not_served
            else "resolved with Maven"
        )
        + f". exactlyonce needs pyspark 4.1 or later; its tests run on {NEWEST_TESTED_PYSPARK}. "
        f"Install a pyspark whose connectors are served (pip install "
        f"'pyspark=={NEWEST_TESTED_PYSPARK}'), or, where no job reads Kafka with Spark's source "
        "(format('kafka')) nor writes Avro values (KafkaSink value='avro'), start Spark "
        "without them: exactlyonce.integration.spark.session(connectors=False) (exactlyonce "
        "run asks for them only for a Kafka source or Avro values).\n"
        f"Maven: {reason[:1000]}"
    )


__all__ = [
    "KAFKA_BROKER",
    "SPARK_CONNECTORS",
    "JarSet",
    "NEWEST_TESTED_PYSPARK",
    "cache_root",
    "classpath",
    "connectors_missing",
    "folder",
    "require_java",
    "require_maven",
    "resolve",
    "spark_connector_jars",
    "spark_connectors",
]
