"""``python -m tests.support.es_server [--host H] [--port N] [--user U --password P]``."""

from tests.support.es_server.server import main

main()
