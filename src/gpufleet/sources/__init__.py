"""Sources: read the real world (NVML, kernel log, fabric tools, Slurm, Kubernetes) into model objects."""
