"""gpufleet: an operations stack for GPU clusters."""

__version__ = "0.1.0"
