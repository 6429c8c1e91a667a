"""What the tests share: fixtures (loaded by ``pytest_plugins`` in ``tests/conftest.py``),
harness helpers, private servers, and the Elasticsearch stand-in (:mod:`.es_server`)."""
