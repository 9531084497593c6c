"""Pipeline-parallel schedules: the order in which one stage runs the forward and
backward passes of an iteration's micro-batches."""

from __future__ import annotations

PIPELINE_SCHEDULES = ("1f1b", "gpipe")


def stage_schedule(
    schedule: str, stage: int, stages: int, microbatches: int
) -> list[tuple[str, int]]:
    """``[("F", i) | ("B", i), ...]``: stage ``stage`` (0-based) of ``stages``.

    gpipe: every forward, then every backward (Huang et al. 2019).
    1f1b: PipeDream-Flush as Megatron-LM runs it (Narayanan et al. 2021): stage s first
    runs min(stages - s - 1, microbatches) forwards, then alternates one forward and
    one backward, then runs the remaining backwards. Both keep micro-batch order in
    each direction, so matching sends and receives come in the same order.
    """
    if schedule == "gpipe":
        return [("F", i) for i in range(microbatches)] + [("B", i) for i in range(microbatches)]
    if schedule != "1f1b":
        raise ValueError(
            f"unknown pipeline schedule {schedule!r}; known: {', '.join(PIPELINE_SCHEDULES)}"
        )
    warm = min(stages - stage - 1, microbatches)
    order = [("F", i) for i in range(warm)]
    for j in range(microbatches - warm):
        order += [("F", warm + j), ("B", j)]
    order += [("B", i) for i in range(microbatches - warm, microbatches)]
    return order
