"""`python -m localcluster` (the same as the `localcluster` command): see localcluster.cli."""

import sys

try:
    from .cli.commands import main
except ModuleNotFoundError as err:
    # Another interpreter than the project's venv: say how to run it instead of a traceback.
    print(f"error: Python module {err.name!r} is missing: run the local cluster with the project's "
          "virtualenv, .venv/bin/localcluster (`make setup` creates it)", file=sys.stderr)
    sys.exit(6)  # cli.EXIT_CANNOT_START, which cannot be imported here

sys.exit(main())
