"""``python -m exactlyonce.integration.cli``: the ``exactlyonce`` command."""

import sys

from exactlyonce.integration.cli import main

sys.exit(main())
