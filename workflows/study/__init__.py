"""What the scaling, sweep, Slurm and aggregate workflows share."""
