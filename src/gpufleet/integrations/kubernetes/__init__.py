"""Kubernetes: the API client, the scheduler backend and remediation through cordon, taint and eviction."""
