"""NVIDIA tools: nvidia-smi in all its forms, `nvidia-smi topo`, dcgmi diag and dcgmi health."""
