"""The proxy models, by command name (``python -m proxies.<name>``).

A model is a :class:`Model` subclass with a ``name`` in any module of this
package: the registry imports every module and finds it, so a new model is
one new file (plus, if wanted, its ``python -m proxies.<name>`` shim).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from .base import Arg, Model


def discover() -> dict[str, Model]:
    """One instance of every named Model subclass in this package, by name, in
    listing order (``Model.order``, then name)."""
    found: dict[str, type[Model]] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            named = issubclass(cls, Model) and bool(vars(cls).get("name"))
            if not named or inspect.isabstract(cls):
                continue
            if found.setdefault(cls.name, cls) is not cls:
                raise TypeError(
                    f"two models named {cls.name!r}: {found[cls.name].__module__} and "
                    f"{cls.__module__}"
                )
    ordered = sorted(found.values(), key=lambda c: (c.order, c.name))
    return {c.name: c() for c in ordered}


MODELS: dict[str, Model] = discover()


def get_model(name: str) -> Model:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


__all__ = ["MODELS", "Arg", "Model", "discover", "get_model"]
