"""Live scheduler backends (Slurm, Kubernetes)."""
