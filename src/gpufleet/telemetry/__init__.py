"""Telemetry: the field catalog, frames that sources fill, /metrics exposition, the metric store, rules,
dashboards."""

from gpufleet.model.attribution import Attribution
from gpufleet.telemetry.exposition.config import CONTENT_TYPE, ExpositionConfig
from gpufleet.telemetry.exposition.dcgm import Renderer, render
from gpufleet.telemetry.fields import FieldCatalog, MetricField, load_field_catalog
from gpufleet.telemetry.frame import GpuEntity, Histogram, IbPort, MetricFrame

__all__ = [
    "CONTENT_TYPE",
    "Attribution",
    "ExpositionConfig",
    "FieldCatalog",
    "GpuEntity",
    "Histogram",
    "IbPort",
    "MetricField",
    "MetricFrame",
    "Renderer",
    "load_field_catalog",
    "render",
]
