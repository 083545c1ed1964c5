"""Manifests: pydantic models for every YAML a person writes, loaders with clear errors, and builders."""
