"""`mpirun -n P python -m proxies.gpt3_moe_one_pipe_step`: see `workload.models` and the README."""

from .cli import main

if __name__ == "__main__":
    main("gpt3_moe_one_pipe_step")
