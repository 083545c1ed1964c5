"""Slurm: the command runner and parsers, GRES job submission, and remediation through scontrol."""
