"""``python -m bench ...``: the same command line as ``banditgate bench ...``."""

import sys

from bench.cli import main

sys.exit(main())
