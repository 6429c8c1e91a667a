"""What the tests share: fixtures (loaded by ``pytest_plugins`` in ``tests/conftest.py``),
harness helpers, private servers. The Elasticsearch stand-in is the lab's
(:mod:`exactlyonce.integration.lab.es_stand_in`): a local service chaos can restart."""
