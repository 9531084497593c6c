"""``python -m simnet``: see simnet.cli."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
