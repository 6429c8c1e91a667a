"""``python -m exactlyonce``: the ``exactlyonce`` command."""

import sys

from exactlyonce.integration.cli import main

sys.exit(main())
