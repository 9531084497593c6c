"""The configured choice of collective algorithms (``AlgorithmPolicy``) of a run: shared by
``simulate`` and ``jobs`` (each job's own) without either importing the other."""

from __future__ import annotations

from .config import Config, ring_orders
from .executor import AlgorithmPolicy


def build_policy(cfg: Config) -> AlgorithmPolicy:
    """The algorithm policy ``cfg`` configures: its fixed or per-op algorithms, NCCL
    channels and pipeline chunks, the node size (GPUs per node, ranks per group) and, on a
    ring whose every endpoint holds a rank, the ring orders of its permutations."""
    t = cfg.topology
    rings = None
    if t.type == "ring" and cfg.world_size == cfg.num_endpoints:
        rings = ring_orders(t.permutations, cfg.num_endpoints)
    return AlgorithmPolicy(
        by_op=dict(cfg.collectives.by_op),
        fixed=cfg.collectives.algorithm,
        local_size=t.effective_group_size,
        rings=rings,
        channels=cfg.collectives.channels,
        pipeline_chunks=cfg.collectives.pipeline_chunks,
        streamed_rings=cfg.collectives.streamed_rings,
        streamed_trees=cfg.collectives.streamed_trees,
    )
