"""`mpirun -n P python -m proxies.alexnet_ring`: see `workload.models` and the README."""

from .cli import main

if __name__ == "__main__":
    main("alexnet_ring")
