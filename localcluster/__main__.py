"""`python -m localcluster`: see localcluster.cli."""

import sys

from .cli import main

sys.exit(main())
