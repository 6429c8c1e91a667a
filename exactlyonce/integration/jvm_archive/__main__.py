"""``python -m exactlyonce.integration.jvm_archive [--force]`` (``make jars`` runs it)."""

import sys

from exactlyonce.integration.jvm_archive import main

sys.exit(main(sys.argv[1:]))
