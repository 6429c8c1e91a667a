"""``python -m exactlyonce.integration.services up|status|down|env``."""

import sys

from exactlyonce.integration.services.command import main

sys.exit(main())
