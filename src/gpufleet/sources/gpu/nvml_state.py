"""What NVML says a GPU needs and where it belongs, read each collection: its recovery action and its NVLink fabric
state (clique and cluster). Both are read as DCGM reads them, so the values mean what dcgm-exporter's do.

- Recovery action: the field value NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230; nvidia-ml-py 13.615.71 pynvml.py,
  nvml.h R570+), an nvmlDeviceGpuRecoveryAction_t: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and
  reset (NVIDIA GPU Memory Error Management, "Error Recovery and Response Flags"). DCGM exposes it as
  DCGM_FI_DEV_GPU_RECOVERY_ACTION (1523; NVIDIA/DCGM dcgmlib/src/dcgm_fields.cpp, v4.5.3 + 72fa3fe, the field's NVML
  field id). A driver without the field answers the value's own nvmlReturn (NOT_SUPPORTED): no value.
- Memory temperature: the field value NVML_FI_DEV_MEMORY_TEMP (82, "Memory temperature for the device"; nvml.h,
  nvidia-ml-py 13.615.71), DCGM_FI_DEV_MEMORY_TEMP in °C; a GPU without a memory sensor answers NOT_SUPPORTED.
  These fields are read in one nvmlDeviceGetFieldValues call a GPU each collection (with NVLink's error totals).
- Fabric: nvmlDeviceGetGpuFabricInfoV with the v2 structure (drivers R535+), else nvmlDeviceGetGpuFabricInfo (R525):
  state (NVML_GPU_FABRIC_STATE_NOT_SUPPORTED 0, NOT_STARTED 1, IN_PROGRESS 2, COMPLETED 3), status (an nvmlReturn_t,
  meaningful only once COMPLETED), clique id and cluster UUID. DCGM_FI_DEV_FABRIC_MANAGER_STATUS (170) is DCGM's
  dcgmFabricManagerStatus_t made from them (DcgmCacheManager.cpp GetFMStatusFromStruct: the state's own number up to
  in progress, then 3 success or 4 failure by the status); DCGM_FI_DEV_FABRIC_CLIQUE_ID (173) the clique id.
"""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
RECOVERY_ACTION = "DCGM_FI_DEV_GPU_RECOVERY_ACTION"
MEMORY_TEMP = "DCGM_FI_DEV_MEMORY_TEMP"
FABRIC_STATUS = "DCGM_FI_DEV_FABRIC_MANAGER_STATUS"
FABRIC_CLIQUE = "DCGM_FI_DEV_FABRIC_CLIQUE_ID"

NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
NVML_FI_DEV_MEMORY_TEMP = 82  # the memory's (HBM's) temperature in °C, DCGM_FI_DEV_MEMORY_TEMP
NVML_SUCCESS = 0
# nvmlGpuFabricState_t
FABRIC_NOT_SUPPORTED, FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED = 0, 1, 2, 3
# dcgmFabricManagerStatus_t (NVIDIA/DCGM dcgmlib/dcgm_structs.h)
DCGM_FM_SUCCESS, DCGM_FM_FAILURE, DCGM_FM_UNRECOGNIZED = 3, 4, 5
FABRIC_STATES = {0: "Not Supported", 1: "Not Started", 2: "In Progress", 3: "Completed"}  # as nvidia-smi -q prints


@dataclass(frozen=True, slots=True)
class FabricInfo:
    """A GPU's NVLink fabric registration as NVML gives it."""

    state: int  # nvmlGpuFabricState_t
    status: int  # nvmlReturn_t of the registration; read only once the state is COMPLETED
    clique_id: int
    cluster_uuid: str  # "" when NVML gives none (all zeros)

    @property
    def joined(self) -> bool:
        """The GPU registered with the fabric and the registration succeeded: it is in its NVLink domain."""
        return self.state == FABRIC_COMPLETED and self.status == NVML_SUCCESS

    @property
    def dcgm_status(self) -> int:
        """DCGM_FI_DEV_FABRIC_MANAGER_STATUS for this reading."""
        if self.state == FABRIC_COMPLETED:
            return DCGM_FM_SUCCESS if self.status == NVML_SUCCESS else DCGM_FM_FAILURE
        return self.state if self.state in FABRIC_STATES else DCGM_FM_UNRECOGNIZED


# nvmlFieldValue_t's value union member for each nvmlValueType_t (nvml.h NVML_VALUE_TYPE_*)
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def field_values(nvml: Any, handle: Any, field_ids: Sequence[int]) -> dict[int, float]:
    """The fields of `field_ids` NVML gives this GPU, in one nvmlDeviceGetFieldValues call: a field whose own return
    is not success is left out, and all of them where the call itself fails (a driver or bindings without it)."""
    try:
        values = nvml.nvmlDeviceGetFieldValues(handle, list(field_ids))
    except (nvml.NVMLError, AttributeError, ValueError):
        return {}
    out = {}
    for value in values:
        kind = int(value.valueType)
        if int(value.nvmlReturn) == NVML_SUCCESS and 0 <= kind < len(_VALUE_MEMBERS):
            out[int(value.fieldId)] = float(getattr(value.value, _VALUE_MEMBERS[kind]))
    return out


def recovery_action(nvml: Any, handle: Any) -> int | None:
    """The GPU's recovery action (nvmlDeviceGpuRecoveryAction_t), or None where the driver does not give it."""
    action = field_values(nvml, handle, [NVML_FI_DEV_GET_GPU_RECOVERY_ACTION]).get(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
    return None if action is None else int(action)


def _uuid(raw: Any) -> str:
    data = bytes(raw)
    return "" if not any(data) else str(uuid.UUID(bytes=data[:16]))


def fabric_info(nvml: Any, handle: Any) -> FabricInfo | None:
    """The GPU's fabric registration; None where the driver or the bindings have no fabric call."""
    info: Any
    try:
        info = nvml.c_nvmlGpuFabricInfo_v2_t()
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    except (nvml.NVMLError, AttributeError):
        try:
            info = nvml.c_nvmlGpuFabricInfo_t()
            nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
        except (nvml.NVMLError, AttributeError):
            return None
    return FabricInfo(int(info.state), int(info.status), int(info.cliqueId), _uuid(info.clusterUuid))
