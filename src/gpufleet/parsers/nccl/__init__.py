"""NCCL's own reports that are not its debug log: the RAS status report (`ncclras`)."""
