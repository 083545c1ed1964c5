"""Which vendor an accelerator resource, a node label or a container image belongs to.

The vendors' resources, label prefixes and PCI ids are the catalog's (gpufleet.catalog.vendors); AMD's partition
resources are built from the catalog's models and the mode pairs the kernel offers; image, label and variable
conventions are the `signals` table of data/rules/vendors.yaml, each with its source. Vendors are named as the
catalog names them: nvidia, amd, intel (Gaudi)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources as package_data

import yaml
from pydantic import BaseModel, ConfigDict

from gpufleet.catalog.gpus import load_gpu_models
from gpufleet.catalog.vendors import get_vendor, gpu_resources, load_vendors, vendor_of_resource

MIG_PREFIX = "nvidia.com/mig-"
SHARED_SUFFIX = ".shared"  # NVIDIA's time-sliced or MPS replicas with renameByDefault
AMD_PREFIX = "amd.com/"
# amd.com/<compute>_<memory> as the AMD device plugin's mixed strategy names partitions (also near misses such as
# amd.com/CPX-NPS4, so that GF031 can say they do not exist); other amd.com/ names (Xilinx FPGAs) are left alone.
_AMD_PARTITION_SHAPE = re.compile(r"^amd\.com/(spx|dpx|tpx|qpx|cpx)[-_]?(nps\d)$", re.IGNORECASE)
_NFD_PCI = re.compile(r"^feature\.node\.kubernetes\.io/pci-([0-9a-f_]+)\.present$")


class _Label(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    pattern: str
    vendor: str
    source: str


class _Image(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    vendor: str
    repository: str | None = None
    tag: str | None = None
    what: str
    source: str


class VendorSignals(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    labels: tuple[_Label, ...]
    images: tuple[_Image, ...]
    neutral_tags: str
    plugin_env: dict[str, tuple[str, ...]]
    ordinal_env: dict[str, tuple[str, ...]]
    rocm_env: str
    rocm_commands: str
    partition_modes: dict[str, tuple[str, ...]]


@cache
def signals() -> VendorSignals:
    text = package_data.files("gpufleet.doctor").joinpath("data", "rules", "vendors.yaml").read_text("utf-8")
    found = VendorSignals.model_validate(yaml.safe_load(text)["signals"])
    named = {x.vendor for x in found.labels} | {x.vendor for x in found.images}
    for vendor in named | set(found.plugin_env) | set(found.ordinal_env):
        get_vendor(vendor)  # a vendor the catalog does not know is a data error, caught on first use
    return found


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def display(vendor: str) -> str:
    return get_vendor(vendor).display_name


# --- resources -------------------------------------------------------------------------------------------------------


@cache
def amd_partition_resources() -> frozenset[str]:
    """Every amd.com/<compute>_<memory> the mixed naming strategy can advertise for a catalog model."""
    modes = signals().partition_modes
    out = set()
    for model in load_gpu_models().values():
        if model.vendor != "amd":
            continue
        for compute in model.compute_partitions:
            for memory in model.memory_partitions:
                if memory in modes.get(compute, ()):
                    out.add(f"{AMD_PREFIX}{compute.lower()}_{memory.lower()}")
    return frozenset(out)


@cache
def is_amd_partition(name: str) -> bool:
    """Shaped like an AMD partition resource (valid or not)."""
    return bool(_AMD_PARTITION_SHAPE.match(name))


@cache  # resource names are few; rules ask for every container
def is_accelerator(name: str) -> bool:
    """A whole device, a MIG slice, a shared replica or an AMD partition: what GF001 and GF002 hold to whole
    numbers in limits."""
    base = name.removesuffix(SHARED_SUFFIX)
    return base in gpu_resources() or name.startswith(MIG_PREFIX) or is_amd_partition(name)


@cache
def resource_vendor(name: str) -> str | None:
    """The vendor whose accelerators a resource name asks for; None for any other resource."""
    spec = vendor_of_resource(name.removesuffix(SHARED_SUFFIX))
    if spec is not None:
        return spec.name
    if name.startswith(MIG_PREFIX):
        return "nvidia"
    if is_amd_partition(name):
        return "amd"
    return None


# --- node labels -----------------------------------------------------------------------------------------------------


@cache
def _pci_vendors() -> dict[str, str]:
    return {v.pci_vendor_id.lower().removeprefix("0x"): v.name for v in load_vendors().values()}


@cache
def label_vendor(key: str) -> str | None:
    """The vendor whose accelerators a node with this label key carries; None for a label any node may have."""
    for vendor in load_vendors().values():
        if key.startswith(vendor.label_prefix):
            return vendor.name
    for label in signals().labels:
        if _regex(label.pattern).search(key):
            return label.vendor
    found = _NFD_PCI.match(key)
    if found:  # pci-<class>_<vendor>.present, pci-<vendor>.present (NFD's deviceLabelFields)
        pci = _pci_vendors()
        return next((pci[part] for part in found.group(1).split("_") if part in pci), None)
    return None


# --- images ----------------------------------------------------------------------------------------------------------


def split_image(image: str) -> tuple[str, str]:
    """(repository, tag) of an image reference, lower case, without digest ("" when there is no tag)."""
    ref = image.strip().lower().partition("@")[0]
    head, slash, last = ref.rpartition("/")
    name, _, tag = last.partition(":")
    return f"{head}{slash}{name}", tag


def image_stack(image: str) -> tuple[str, str] | None:
    """(vendor, what says so) for an image built for one vendor's accelerators; None when its name says none or
    more than one."""
    repository, tag = split_image(image)
    if not repository:
        return None
    s = signals()
    by_tag = {(x.vendor, x.what) for x in s.images if x.tag and tag and _regex(x.tag).search(tag)}
    if len({v for v, _ in by_tag}) == 1:
        return next(iter(by_tag))
    if by_tag or (tag and _regex(s.neutral_tags).search(tag)):
        return None  # a tag naming two stacks, or a CPU or XPU build
    by_name = {(x.vendor, x.what) for x in s.images if x.repository and _regex(x.repository).search(repository)}
    return next(iter(by_name)) if len({v for v, _ in by_name}) == 1 else None
