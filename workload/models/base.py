"""What every model description provides: its arguments and a builder."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..program import BuildOptions, Workload


@dataclass(frozen=True)
class Arg:
    """A positional argument of the reference program (an integer)."""

    name: str
    default: int
    help: str


class Model(ABC):
    """A proxy model: a short description that builds a :class:`Workload`."""

    name: str = ""
    description: str = ""
    args: tuple[Arg, ...] = ()
    # Model-specific named options (``--name-with-dashes N``), 0 meaning unset.
    flags: tuple[Arg, ...] = ()
    reference_warmup: int = 0
    reference_runs: int = 1
    # Defaults for this 2-core machine (documented in the README).
    default_warmup: int = 1
    default_runs: int = 3
    per_tensor_available: bool = False

    def params(self, values: list[int]) -> dict[str, int]:
        """Positional values (possibly fewer than args) -> all parameters."""
        if len(values) > len(self.args):
            names = " ".join(f"[{a.name}={a.default}]" for a in self.args)
            raise ValueError(f"{self.name}: too many arguments; usage: {self.name} {names}")
        out = {a.name: a.default for a in self.args}
        for a, v in zip(self.args, values, strict=False):
            if v < 1:
                raise ValueError(f"{self.name}: {a.name} must be >= 1 (got {v})")
            out[a.name] = v
        return out

    @abstractmethod
    def build(
        self,
        world_size: int,
        params: dict[str, int],
        options: BuildOptions,
        given: int | None = None,
    ) -> Workload:
        """Instantiate for ``world_size`` ranks; raise LayoutError if impossible.

        ``given`` is how many positional arguments the user passed (some
        reference quirks depend on it); None means all.
        """
