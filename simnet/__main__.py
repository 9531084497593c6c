"""``python -m simnet``: the tool's front door (a simulation or a workflow).

The one module of simnet that reaches the workflows: see workflows.cli.
"""

import sys

from workflows.cli import main

if __name__ == "__main__":
    sys.exit(main())
