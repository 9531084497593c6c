"""`mpirun -n P python -m proxies.gpt3`: see `workload.models` and the README."""

from .cli import main

if __name__ == "__main__":
    main("gpt3")
