"""Process layouts: the groups (communicators) a model's ranks form, and the
world sizes a layout accepts."""

from __future__ import annotations


class LayoutError(ValueError):
    """A world size or argument the model's process layout cannot accept."""


def world_groups(world_size: int) -> list[tuple[int, ...]]:
    return [tuple(range(world_size))]


def block_groups(world_size: int, size: int) -> list[tuple[int, ...]]:
    """Consecutive blocks of ``size`` ranks: [0..size), [size..2 size), ..."""
    return [tuple(range(s, s + size)) for s in range(0, world_size, size)]


def strided_groups(world_size: int, stride: int) -> list[tuple[int, ...]]:
    """Ranks with the same ``rank % stride``, ordered by rank."""
    return [tuple(range(s, world_size, stride)) for s in range(stride)]


def require_multiple(model: str, world_size: int, divisor: int, rule: str) -> None:
    """Raise LayoutError unless world_size is a positive multiple of divisor."""
    if world_size < 1 or world_size % divisor:
        below = (world_size // divisor) * divisor
        above = below + divisor
        near = [n for n in (below, above) if n > 0]
        raise LayoutError(
            f"{model}: {rule} (world size {world_size}); "
            f"nearest valid world sizes: {', '.join(map(str, near))}"
        )
