"""Entry point: `python3 -m vfl_lab`."""

import sys

from .cli import main

sys.exit(main())
