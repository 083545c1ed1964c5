"""The control plane: runs the cluster source (the twin by default), keeps durable state, answers queries."""
