"""One package per external system (Slurm, Kubernetes): its client, scheduler backend and remediation backend."""
