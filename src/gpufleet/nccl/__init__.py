"""NCCL package (public API assembled at the end)."""
