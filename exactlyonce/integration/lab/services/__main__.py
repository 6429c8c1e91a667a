"""``python -m exactlyonce.integration.lab.services up|status|down|env``."""

import sys

from exactlyonce.integration.lab.services.command import main

sys.exit(main())
