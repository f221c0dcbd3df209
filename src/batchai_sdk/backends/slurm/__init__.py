"""Slurm: an existing HPC cluster whose own scheduler (slurmctld) queues and places the jobs.

A cluster is a partition; ``job.submit()`` is ``sbatch``, ``terminate()`` is ``scancel``; the share is a
directory every Slurm node sees. See docs/slurm.md.
"""

from .backend import SlurmBackend
from .scheduler import SlurmScheduler

__all__ = ["SlurmBackend", "SlurmScheduler"]
