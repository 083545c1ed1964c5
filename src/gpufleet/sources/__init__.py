"""Sources: read the real world (NVML, nvidia-smi, the kernel log, IB diagnostics, schedulers) or the twin."""
