"""Who runs on which GPU: kubelet pod-resources, the kubelet pod list, /proc cgroups, the Slurm job map."""
