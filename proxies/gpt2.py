"""`mpirun -n P python -m proxies.gpt2`: see `workload.models` and the README."""

from .cli import main

if __name__ == "__main__":
    main("gpt2")
