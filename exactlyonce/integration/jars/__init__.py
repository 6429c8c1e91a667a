"""Java dependencies from Maven Central, resolved once into a cache folder.

Two jar sets, each a small pom beside this module:

- ``kafka-broker`` (:data:`KAFKA_BROKER`): the genuine Apache Kafka broker the local services
  run (:mod:`exactlyonce.integration.lab.services.kafka`);
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
    must serve the connector for that exact version (it lags PyPI: pyspark is pinned to the
    newest version it serves)."""
    jars = spark_connectors()
    try:
        return resolve(jars)
    except RuntimeError as exc:
        version = jars.properties["spark.version"]
        raise RuntimeError(
            f"{exc}\nSpark's Kafka connector for pyspark {version} did not resolve: Maven Central "
            "may not serve it yet. Install a pyspark it serves (pip install 'pyspark==4.2.0')."
        ) from None


__all__ = [
    "KAFKA_BROKER",
    "SPARK_CONNECTORS",
    "JarSet",
    "cache_root",
    "classpath",
    "folder",
    "require_java",
    "require_maven",
    "resolve",
    "spark_connector_jars",
    "spark_connectors",
]
