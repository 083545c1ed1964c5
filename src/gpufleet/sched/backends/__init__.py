"""Live scheduler backends: Kubernetes (secondary scheduler) and Slurm."""
