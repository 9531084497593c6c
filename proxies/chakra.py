"""`mpirun -n P python -m proxies.chakra --trace-dir DIR`: replay a Chakra trace set."""

from .cli import main

if __name__ == "__main__":
    main("chakra")
