"""Scheduling and GPU partitioning."""
