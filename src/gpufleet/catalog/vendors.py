"""Accelerator vendors (vendors.yaml): the resource a device plugin advertises, the devices and driver, the exporter.

Vendor-neutral code asks a GPU's model for its vendor and the vendor for these facts; it never names one.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

from gpufleet.catalog._files import read_text
from gpufleet.errors import NotFoundError

VendorName = Literal["nvidia", "amd", "intel"]
VENDORS: tuple[VendorName, ...] = ("nvidia", "amd", "intel")


class VendorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: VendorName
    display_name: str
    pci_vendor_id: str
    resource: str  # the extended resource the device plugin advertises
    dra_driver: str  # "" where the vendor ships no DRA driver
    kernel_driver: str
    device_node: str  # format with minor / render_minor
    host_devices: tuple[str, ...] = ()  # what a device plugin or workload needs mounted besides the device itself
    label_prefix: str
    product_label: str  # the node label its feature discovery writes the product under
    exporter: str
    exporter_port: int
    smi: str
    device_plugin_namespace: str


@cache
def load_vendors() -> dict[str, VendorSpec]:
    raw = yaml.safe_load(read_text("vendors.yaml"))
    return {name: VendorSpec(name=name, **fields) for name, fields in raw.items()}


def get_vendor(name: str) -> VendorSpec:
    vendor = load_vendors().get(name.strip().lower())
    if vendor is None:
        raise NotFoundError(f"unknown accelerator vendor {name!r}", fix=f"use one of: {', '.join(VENDORS)}")
    return vendor


@cache
def gpu_resources() -> frozenset[str]:
    """Every vendor's whole-device resource name (nvidia.com/gpu, amd.com/gpu, habana.ai/gaudi)."""
    return frozenset(v.resource for v in load_vendors().values())


def vendor_of_resource(resource: str) -> VendorSpec | None:
    """The vendor whose whole-device resource this is; None for any other resource."""
    for vendor in load_vendors().values():
        if vendor.resource == resource:
            return vendor
    return None
