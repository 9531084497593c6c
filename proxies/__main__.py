"""``python -m proxies <model> [args]``: the same as ``python -m proxies.<model>``."""

from .cli import dispatch

if __name__ == "__main__":
    dispatch()
