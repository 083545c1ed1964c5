"""Partitioning GPUs: MIG geometry and layouts, the layout planner, device-plugin configs and sharing."""
