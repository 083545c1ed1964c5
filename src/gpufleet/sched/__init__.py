"""Placement: cluster state, scoring policies, trace replay."""
