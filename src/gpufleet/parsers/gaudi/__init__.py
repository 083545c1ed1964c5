"""Intel Gaudi tools: hl-smi."""
