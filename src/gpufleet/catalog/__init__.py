"""Facts as data files, with one loader each: GPU models, MIG geometry, Xid codes, IB counters, dcgm-exporter fields,
the driver/CUDA setup errors."""

from gpufleet.catalog.dcgm_fields import DcgmField, load_dcgm_fields
from gpufleet.catalog.gpus import GpuModelSpec, get_gpu_model, load_gpu_models, model_for_product_name
from gpufleet.catalog.ib_counters import IbCounter, load_ib_counters
from gpufleet.catalog.mig import MigProfile, load_mig_profiles, mig_profiles_for
from gpufleet.catalog.setup_errors import SetupError, load_setup_errors
from gpufleet.catalog.xid import XidInfo, load_xid_catalog

__all__ = [
    "DcgmField",
    "GpuModelSpec",
    "IbCounter",
    "MigProfile",
    "SetupError",
    "XidInfo",
    "get_gpu_model",
    "load_dcgm_fields",
    "load_gpu_models",
    "load_ib_counters",
    "load_mig_profiles",
    "load_setup_errors",
    "load_xid_catalog",
    "mig_profiles_for",
    "model_for_product_name",
]
