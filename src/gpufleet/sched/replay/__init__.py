"""Trace replay: production pod traces (OpenB) placed on a vectorised cluster under pluggable policies."""
