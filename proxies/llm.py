"""`mpirun -n P python -m proxies.llm --preset NAME [--tp N --pp N ...]`: see docs/llm.md."""

from .cli import main

if __name__ == "__main__":
    main("llm")
