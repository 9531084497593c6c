"""`mpirun -n P python -m proxies.resnet152_scal`: see `workload.models` and the README."""

from .cli import main

if __name__ == "__main__":
    main("resnet152_scal")
