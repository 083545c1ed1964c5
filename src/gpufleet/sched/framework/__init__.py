"""The Kubernetes scheduling framework: filters, scores, gangs, queues, preemption and backfill on a snapshot."""
