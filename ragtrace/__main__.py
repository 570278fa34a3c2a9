"""`python -m ragtrace ...`: the `ragtrace` command without the console script."""

import sys

from ragtrace.cli import main

sys.exit(main())
