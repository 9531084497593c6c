"""The AlexNet ring trainer: data parallelism whose gradients are synchronised
by a reduce-scatter then an all-gather over one or more rings.

Architecture (torchvision's AlexNet layout, CIFAR-10 shapes by default):
conv 11x11/64, conv 5x5/192, conv 3x3/384, conv 3x3/256, conv 3x3/256 (each
with a bias), an adaptive pool to 6x6, then fully connected 9216 -> 4096 ->
4096 -> num_classes. With 3 input channels and 10 classes that is 57,044,810
parameters; the gradient is that many float32 elements.

A step is: emulated forward + backward compute, then the reduce-scatter of
the gradient and the all-gather of the result. With several rings the
gradient is split evenly across them (the ``multiring`` schedule); the data
moves by the project's own point-to-point schedules in both executors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..layout import LayoutError, world_groups
from ..ops import Op
from ..program import BuildOptions, Phase, ProgramBuilder, Workload
from .base import Arg, BuildRequest, Counts, Model

# Emulated forward + backward time of one step of AlexNet on a batch of 32
# CIFAR-10 images on one GPU-class device: an assumption, stated in outputs.
DEFAULT_COMPUTE_US_PER_STEP = 5000
BATCH_PER_PROCESS = 32  # samples per step at DEFAULT_COMPUTE_US_PER_STEP us of compute


def alexnet_params(input_channels: int = 3, num_classes: int = 10) -> int:
    """Trainable parameters of AlexNet (weights and biases)."""
    convs = [(input_channels, 64, 11), (64, 192, 5), (192, 384, 3), (384, 256, 3), (256, 256, 3)]
    n = sum(cin * cout * k * k + cout for cin, cout, k in convs)
    fcs = [(256 * 6 * 6, 4096), (4096, 4096), (4096, num_classes)]
    return n + sum(i * o + o for i, o in fcs)


def ring_trainer_program(
    block_elems: int, world: int, compute_us: float, algorithm: str
) -> list[Op]:
    """One step; ``block_elems`` is each rank's block of the padded gradient."""
    b = ProgramBuilder(BuildOptions(scale=1.0, algorithm=algorithm))
    b.compute(compute_us, "forward_backward")
    if algorithm == "hierarchical":
        # Two-level: reduce-scatter in groups, allreduce across, allgather in groups.
        b.collective("allreduce", "world", block_elems * world, label="two_level_allreduce")
    else:
        b.collective("reduce_scatter", "world", block_elems, label="reduce_scatter")
        b.collective("allgather", "world", block_elems, label="allgather")
    return b.ops


class AlexNetRing(Model):
    name = "alexnet_ring"
    gives_schedule_params = True  # its rings (one, 0..P-1) and --hierarchical G
    description = (
        "AlexNet ring trainer: data parallelism, gradients by reduce-scatter then "
        "all-gather over rings (project schedules)"
    )
    args = (Arg("input_channels", 3, "image channels"), Arg("num_classes", 10, "classes"))
    flags = (
        Arg("compute_us", DEFAULT_COMPUTE_US_PER_STEP, "emulated compute per step (us)", minimum=0),
        Arg(
            "hierarchical",
            0,
            "group size of the two-level algorithm (0: rings); with --algorithm, only "
            "--algorithm hierarchical",
            minimum=0,
        ),
    )
    order = 120
    counts = Counts(0, 100, 1, 10)
    batch_definition = (
        f"samples per process = {BATCH_PER_PROCESS} x compute_us / "
        f"{DEFAULT_COMPUTE_US_PER_STEP} (the trainer's {DEFAULT_COMPUTE_US_PER_STEP} us per step "
        f"is its assumption for a batch of {BATCH_PER_PROCESS}); global = that x P"
    )
    strong_scaling = "compute per step divided by P"
    # The seed configuration file describes this trainer: AlexNet's shapes, the
    # compute per step, and the topology's rings or groups.
    args_from_config_model = True
    compute_flag = "compute_us"
    group_size_flag = "hierarchical"
    uses_ring_orders = True
    trainer_module = "proxies.ring_trainer"

    def options_problem(
        self, params: Mapping[str, Any], algorithm: str | None
    ) -> tuple[str, str] | None:
        """The group size and the algorithm name one schedule: --hierarchical G is the
        two-level algorithm, which --algorithm can only name again."""
        local = params.get("hierarchical") or 0
        if algorithm == "hierarchical" and not local:
            return (
                "algorithm",
                "{field} hierarchical needs the group size: add {field:flags.hierarchical} N "
                "(groups of N ranks, N dividing the world size)",
            )
        if local and algorithm not in (None, "hierarchical"):
            return (
                "algorithm",
                f"{{field}} {algorithm} and {{field:flags.hierarchical}} {local} do not go "
                f"together: {{field:flags.hierarchical}} runs the two-level algorithm, which "
                f"{{field}} {algorithm} would replace; leave out one of them",
            )
        return None

    def _build(self, req: BuildRequest) -> Workload:
        world_size, params, options, _ = req
        if world_size < 2:
            raise LayoutError(
                f"{self.name}: a ring needs at least 2 ranks (got {world_size}); "
                "nearest valid world size: 2"
            )
        total = alexnet_params(params["input_channels"], params["num_classes"])
        scaled = max(world_size, round(total * options.scale))
        # The gradient is padded to whole blocks of world_size: each rank owns one block.
        block = -(-scaled // world_size)
        local = params.get("hierarchical") or 0
        if local and world_size % local:
            from ..spec import SpecError  # (spec imports this registry: not at import time)

            # The option is what to fix: each front end names it its way, as the
            # sibling checks of options_problem do.
            fits = ", ".join(str(g) for g in range(1, world_size + 1) if world_size % g == 0)
            raise SpecError(
                "flags",
                f"{{field:flags.hierarchical}} {local} must divide the world size {world_size} "
                f"(groups of {local} ranks for the two-level algorithm); sizes that do: {fits}",
            )
        algorithm = options.algorithm or ("hierarchical" if local else "multiring")
        compute = float(params.get("compute_us", DEFAULT_COMPUTE_US_PER_STEP))

        rings = [list(r) for r in options.rings] if options.rings else [list(range(world_size))]
        if algorithm == "multiring" and any(len(r) != world_size for r in rings):
            raise LayoutError(f"{self.name}: every ring must order all {world_size} ranks")
        ops = ring_trainer_program(block, world_size, compute, algorithm)

        def program(rank: int) -> list[Op]:
            return ops

        return self.workload(
            world_size,
            params,
            {"world": world_groups(world_size)},
            [Phase("step", program)],
            info={
                "parameters": total,
                "gradient_elems": block * world_size,
                "block_elems": block,
                "compute_us_per_step": compute,
                "algorithm": algorithm,
            },
            summary=[
                ("world_size", world_size),
                ("parameters", total),
                (
                    "gradient elements synchronised",
                    f"{block * world_size} (scale {options.scale:g})",
                ),
            ],
            per="step",
            collective_params={"rings": rings, "local_size": local or None},
        )

    def samples_per_iteration(
        self, world_size: int, params: dict[str, Any], info: dict[str, Any]
    ) -> float | None:
        compute = info.get("compute_us_per_step", DEFAULT_COMPUTE_US_PER_STEP)
        return BATCH_PER_PROCESS * float(compute) / DEFAULT_COMPUTE_US_PER_STEP * world_size

    def strong_point_flags(self, flags: dict[str, int], p: int, base: int) -> dict[str, int]:
        """Compute per step ``C x P1 / p`` (C: the compute_us option), whole microseconds."""
        out = dict(flags)
        c = out.get("compute_us", DEFAULT_COMPUTE_US_PER_STEP)
        out["compute_us"] = max(1, round(c * base / p))
        return out

    def strong_note(self, flags: dict[str, int], base: int) -> str:
        c = flags.get("compute_us", DEFAULT_COMPUTE_US_PER_STEP)
        return (
            f"compute per step {c:g} us x {base} / P (whole us), global batch "
            f"{BATCH_PER_PROCESS * c / DEFAULT_COMPUTE_US_PER_STEP * base:g}"
        )
