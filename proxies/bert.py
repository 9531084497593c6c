"""`mpirun -n P python -m proxies.bert`: see `workload.models` and the README."""

from .cli import main

if __name__ == "__main__":
    main("bert")
