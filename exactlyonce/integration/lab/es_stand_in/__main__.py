"""``python -m exactlyonce.integration.lab.es_stand_in [--host H] [--port N] [--user U
--password P] [--data DIR]``."""

from exactlyonce.integration.lab.es_stand_in.server import main

main()
