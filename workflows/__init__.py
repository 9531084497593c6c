"""Workflows around the two executors: the end-to-end job, validation,
calibration, scaling studies, sweeps, Slurm scripts and aggregation.

They compose ``proxies`` (real runs, through :mod:`workflows.launcher`) and
``simnet`` (predictions); neither of those imports this package.
"""
