"""Accelerator device libraries: NVML, AMD SMI, HLML, and dcgmi run on the node."""
