"""``python -m exactlyonce.integration.lab.demo``: the kill -9 demo (see :mod:`.command`)."""

from __future__ import annotations

import sys

from exactlyonce.integration.lab.demo.command import main

sys.exit(main())
