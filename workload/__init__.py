"""The workload description both executors run: operations, rank programs,
process layouts, collective schedules, the models and the run specification.

Nothing here calls MPI or simpy; ``proxies`` runs these programs over MPI and
``simnet`` predicts them.
"""
