"""Inside a Slurm allocation: the job step that launches, prepares and runs ranks there (Slurm queues and
places; our scheduler does not run on this backend)."""
