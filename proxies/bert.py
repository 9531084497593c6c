"""`mpirun -n P python -m proxies.bert`: see `proxies.models` and the README."""

from .cli import main

if __name__ == "__main__":
    main("bert")
