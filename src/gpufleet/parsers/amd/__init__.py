"""AMD tools: amd-smi and rocm-smi."""
