"""A test double of DCGM's Python bindings: modules named and shaped as DCGM installs them (dcgm_agent's calls with
their arguments and return values, dcgm_structs' structures with their fields, constants and DCGMError, dcgm_fields'
field ids and entity groups, dcgm_errors' codes; NVIDIA/DCGM testing/python3 at v3.3.9 and 4.6.0), with the host
engine's answers replayed from a recorded node (tests/captures/dcgm/*.json, each with its .source.txt).

Only what the agent's DCGM source calls is here; the structures are written after the bindings' own (same field
names, types and array sizes), so a call shaped differently from the real bindings fails here too.
"""

from __future__ import annotations

import json
from ctypes import (
    Structure,
    Union,
    c_bool,
    c_byte,
    c_char,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_longlong,
    c_short,
    c_uint,
    c_uint32,
    c_ushort,
    c_void_p,
    pointer,
)
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

CAPTURES = Path(__file__).parents[2] / "captures" / "dcgm"

# dcgm_structs.py constants
DCGM_ST_OK, DCGM_ST_BADPARAM, DCGM_ST_NOT_SUPPORTED, DCGM_ST_NO_DATA = 0, -1, -6, -14
DCGM_ST_CONNECTION_NOT_VALID, DCGM_ST_PROFILING_NOT_SUPPORTED = -21, -36
DCGM_MAX_STR_LENGTH, DCGM_MAX_BLOB_LENGTH, DCGM_MAX_NUM_DEVICES = 256, 4096, 32
DCGM_GROUP_MAX_ENTITIES_V2 = 1024
DCGM_HEALTH_WATCH_COUNT_V1 = 10
DCGM_MAX_PID_INFO_NUM = 16
DCGM_PROF_MAX_NUM_GROUPS_V2, DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2 = 10, 64
DCGM_POLICY_COND_MAX = 7
INT64_BLANK = 0x7FFFFFFFFFFFFFF0  # dcgmvalue.DCGM_INT64_BLANK
FP64_BLANK = 140737488355328.0  # dcgmvalue.DCGM_FP64_BLANK


class DCGMError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            DCGM_ST_CONNECTION_NOT_VALID: "The connection to the host engine is not valid any longer",
            DCGM_ST_PROFILING_NOT_SUPPORTED: "Profiling is not supported for this group of GPUs or GPU",
            DCGM_ST_NO_DATA: "No data is available",
        }.get(self.value, f"DCGM error {self.value}")


class c_dcgmGroupEntityPair_t(Structure):
    _fields_ = [("entityGroupId", c_uint32), ("entityId", c_uint32)]


class c_dcgmFieldValue_v1_value(Union):
    _fields_ = [("i64", c_int64), ("dbl", c_double), ("str", c_char * DCGM_MAX_STR_LENGTH),
                ("blob", c_byte * DCGM_MAX_BLOB_LENGTH)]  # fmt: skip


class c_dcgmFieldValue_v2(Structure):
    _fields_ = [("version", c_uint), ("entityGroupId", c_uint), ("entityId", c_uint), ("fieldId", c_ushort),
                ("fieldType", c_short), ("status", c_int), ("unused", c_uint), ("ts", c_int64),
                ("value", c_dcgmFieldValue_v1_value)]  # fmt: skip


class c_dcgmDeviceIdentifiers_v1(Structure):
    _fields_ = [("version", c_uint), *((n, c_char * DCGM_MAX_STR_LENGTH) for n in (
        "brandName", "deviceName", "pciBusId", "serial", "uuid", "vbios", "inforomImageVersion")),
        ("pciDeviceId", c_uint32), ("pciSubSystemId", c_uint32), ("driverVersion", c_char * DCGM_MAX_STR_LENGTH),
        ("virtualizationMode", c_uint32)]  # fmt: skip


class c_dcgmDeviceAttributes_v3(Structure):  # only the identifiers are read; the rest of the real one is left out
    _fields_ = [("version", c_uint), ("identifiers", c_dcgmDeviceIdentifiers_v1)]


class c_dcgmDiagErrorDetail_t(Structure):
    _fields_ = [("msg", c_char * 1024), ("code", c_uint)]


class c_dcgmIncidentInfo_t(Structure):
    _fields_ = [("system", c_uint), ("health", c_uint32), ("error", c_dcgmDiagErrorDetail_t),
                ("entityInfo", c_dcgmGroupEntityPair_t)]  # fmt: skip


class c_dcgmHealthResponse_v5(Structure):
    _fields_ = [("version", c_uint32), ("overallHealth", c_uint32), ("incidentCount", c_uint32),
                ("incidents", c_dcgmIncidentInfo_t * DCGM_GROUP_MAX_ENTITIES_V2)]  # fmt: skip


class c_dcgmStatSummaryInt64_t(Structure):
    _fields_ = [("minValue", c_int64), ("maxValue", c_int64), ("average", c_int64)]


class c_dcgmStatSummaryInt32_t(Structure):
    _fields_ = [("minValue", c_int32), ("maxValue", c_int32), ("average", c_int32)]


class c_dcgmStatSummaryFp64_t(Structure):
    _fields_ = [("minValue", c_double), ("maxValue", c_double), ("average", c_double)]


class c_dcgmProcessUtilInfo_t(Structure):
    _fields_ = [("pid", c_uint), ("smUtil", c_double), ("memUtil", c_double)]


class c_dcgmHealthResponseInfo_t(Structure):
    _fields_ = [("system", c_uint), ("health", c_uint)]


class c_dcgmGpuUsageInfo_t(Structure):
    _fields_ = [
        ("gpuId", c_uint32), ("energyConsumed", c_int64), ("powerUsage", c_dcgmStatSummaryFp64_t),
        ("pcieRxBandwidth", c_dcgmStatSummaryInt64_t), ("pcieTxBandwidth", c_dcgmStatSummaryInt64_t),
        ("pcieReplays", c_int64), ("startTime", c_int64), ("endTime", c_int64),
        ("smUtilization", c_dcgmStatSummaryInt32_t), ("memoryUtilization", c_dcgmStatSummaryInt32_t),
        ("eccSingleBit", c_uint32), ("eccDoubleBit", c_uint32), ("memoryClock", c_dcgmStatSummaryInt32_t),
        ("smClock", c_dcgmStatSummaryInt32_t), ("numXidCriticalErrors", c_int32), ("xidCriticalErrorsTs", c_int64 * 10),
        ("numComputePids", c_int32), ("computePids", c_dcgmProcessUtilInfo_t * DCGM_MAX_PID_INFO_NUM),
        ("numGraphicsPids", c_int32), ("graphicsPids", c_dcgmProcessUtilInfo_t * DCGM_MAX_PID_INFO_NUM),
        ("maxGpuMemoryUsed", c_int64), ("powerViolationTime", c_int64), ("thermalViolationTime", c_int64),
        ("reliabilityViolationTime", c_int64), ("boardLimitViolationTime", c_int64), ("lowUtilizationTime", c_int64),
        ("syncBoostTime", c_int64), ("overallHealth", c_uint), ("incidentCount", c_uint),
        ("systems", c_dcgmHealthResponseInfo_t * DCGM_HEALTH_WATCH_COUNT_V1),
    ]  # fmt: skip


class c_dcgmJobInfo_v3(Structure):
    _fields_ = [("version", c_uint32), ("numGpus", c_int32), ("summary", c_dcgmGpuUsageInfo_t),
                ("gpus", c_dcgmGpuUsageInfo_t * DCGM_MAX_NUM_DEVICES)]  # fmt: skip


class c_dcgmPolicyConditionParmTypes_t(Union):
    _fields_ = [("boolean", c_bool), ("llval", c_longlong)]


class c_dcgmPolicyConditionParms_t(Structure):
    _fields_ = [("tag", c_uint), ("val", c_dcgmPolicyConditionParmTypes_t)]


class c_dcgmPolicy_v1(Structure):
    _fields_ = [("version", c_uint), ("condition", c_uint), ("mode", c_uint), ("isolation", c_uint),
                ("action", c_uint), ("validation", c_uint), ("response", c_uint),
                ("parms", c_dcgmPolicyConditionParms_t * DCGM_POLICY_COND_MAX)]  # fmt: skip


class c_dcgmPolicyConditionDbe_t(Structure):
    _fields_ = [("timestamp", c_longlong), ("location", c_int), ("numerrors", c_uint)]


class c_dcgmPolicyCallbackResponse_v2(Structure):
    class Value(Union):
        _fields_ = [("dbe", c_dcgmPolicyConditionDbe_t)]  # the other conditions' members are not read

    _fields_ = [("version", c_uint), ("condition", c_int), ("val", Value), ("gpuId", c_uint)]


class c_dcgmProfMetricGroupInfo_v2(Structure):
    _fields_ = [("majorId", c_ushort), ("minorId", c_ushort), ("numFieldIds", c_uint32),
                ("fieldIds", c_ushort * DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2)]  # fmt: skip


class c_dcgmProfGetMetricGroups_v3(Structure):
    _fields_ = [("version", c_uint32), ("unused", c_uint32), ("gpuId", c_uint32), ("numMetricGroups", c_uint32),
                ("metricGroups", c_dcgmProfMetricGroupInfo_v2 * DCGM_PROF_MAX_NUM_GROUPS_V2)]  # fmt: skip


def _structs() -> ModuleType:
    m = ModuleType("dcgm_structs")
    for name, value in globals().items():
        if name.startswith(("c_dcgm", "DCGM_")) or name == "DCGMError":
            setattr(m, name, value)
    consts = {"DCGM_OPERATION_MODE_AUTO": 1, "DCGM_OPERATION_MODE_MANUAL": 2, "DCGM_GROUP_DEFAULT": 0,
              "DCGM_GROUP_EMPTY": 1, "DCGM_HEALTH_WATCH_ALL": 0xFFFFFFFF, "DCGM_POLICY_MODE_MANUAL": 1,
              "DCGM_POLICY_ISOLATION_NONE": 0, "DCGM_POLICY_ACTION_NONE": 0, "DCGM_POLICY_VALID_NONE": 0,
              "dcgmPolicy_version1": 1 << 24 | 0x10, "dcgmJobInfo_version3": 3 << 24}  # fmt: skip
    for name, value in consts.items():
        setattr(m, name, value)
    return m


# dcgm_fields.py: the entity group and the fields the source names (DCGM 3.3.9's names; 4.6.0 renamed them and
# resolves the old names as deprecated aliases)
FIELD_IDS = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (1001, "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"),
    "DCGM_FI_PROF_SM_ACTIVE": (1002, "DCGM_FI_PROF_SM_UTIL_RATIO"),
    "DCGM_FI_PROF_SM_OCCUPANCY": (1003, "DCGM_FI_PROF_SM_OCCUPANCY_RATIO"),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (1004, "DCGM_FI_PROF_TENSOR_UTIL_RATIO"),
    "DCGM_FI_PROF_DRAM_ACTIVE": (1005, "DCGM_FI_PROF_DRAM_UTIL_RATIO"),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": (1006, "DCGM_FI_PROF_FP64_UTIL_RATIO"),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": (1007, "DCGM_FI_PROF_FP32_UTIL_RATIO"),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": (1008, "DCGM_FI_PROF_FP16_UTIL_RATIO"),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (1009, "DCGM_FI_PROF_PCIE_TX_BYTES"),
    "DCGM_FI_PROF_PCIE_RX_BYTES": (1010, "DCGM_FI_PROF_PCIE_RX_BYTES"),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": (1011, "DCGM_FI_PROF_NVLINK_TX_BYTES"),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": (1012, "DCGM_FI_PROF_NVLINK_RX_BYTES"),
    "DCGM_FI_DEV_SLOWDOWN_TEMP": (158, "DCGM_FI_DEV_GPU_TEMP_SLOWDOWN_CELSIUS"),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX": (162, "DCGM_FI_DEV_BOARD_POWER_LIMIT_MAX_WATTS"),
}
FIELD_TYPES = {1009: "i", 1010: "i", 1011: "i", 1012: "i", 158: "i", 162: "d"}  # the rest are doubles


def _fields(version: str) -> ModuleType:
    m = ModuleType("dcgm_fields")
    m.DCGM_FE_GPU = 1  # type: ignore[attr-defined]
    m.DCGM_FT_DOUBLE, m.DCGM_FT_INT64 = "d", "i"  # type: ignore[attr-defined]
    if version.startswith("4.6"):
        for fid, new in FIELD_IDS.values():
            setattr(m, new, fid)
        m._DEPRECATED_ALIASES = {old: new for old, (_, new) in FIELD_IDS.items() if old != new}  # type: ignore[attr-defined]
    else:
        for old, (fid, _) in FIELD_IDS.items():
            setattr(m, old, fid)
    return m


def _errors() -> ModuleType:
    m = ModuleType("dcgm_errors")
    # dcgm_errors.py (4.6.0): the codes the recorded incidents carry
    codes = {"DCGM_FR_PCI_REPLAY_RATE": 3, "DCGM_FR_VOLATILE_DBE_DETECTED": 4, "DCGM_FR_CLOCKS_EVENT_THERMAL": 10}
    for name, value in codes.items():
        setattr(m, name, value)
    m.DCGM_FR_CLOCK_THROTTLE_THERMAL = 10  # type: ignore[attr-defined]  # the 3.x name, an alias in 4.x
    return m


class HostEngine:
    """The recorded node's nv-hostengine, answering the calls dcgm_agent makes."""

    def __init__(self, node: dict[str, Any], reachable: bool = True) -> None:
        self.node = node
        self.reachable = reachable
        self.gpus = {int(g["id"]): g for g in node["gpus"]}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.groups: dict[int, list[int]] = {}
        self.watched: list[int] = []
        self.policy_callbacks: list[Any] = []
        self.jobs_started: dict[str, int] = {}
        self.jobs_stopped: list[str] = []
        self.health_set: int | None = None

    def check(self) -> None:
        if not self.reachable:
            raise DCGMError(DCGM_ST_CONNECTION_NOT_VALID)

    # the recorded answers
    def value(self, gpu: int, fid: int) -> c_dcgmFieldValue_v2:
        fv = c_dcgmFieldValue_v2()
        fv.version, fv.entityGroupId, fv.entityId, fv.fieldId = 0x2000038, 1, gpu, fid
        kind = FIELD_TYPES.get(fid, "d")
        fv.fieldType = ord(kind)
        recorded = self.gpus[gpu].get("values", {}).get(str(fid), "absent")
        if recorded == "absent":
            fv.status = DCGM_ST_NO_DATA
            recorded = None
        else:
            fv.status = DCGM_ST_OK
        if kind == "d":
            fv.value.dbl = FP64_BLANK if recorded is None else float(recorded)
        else:
            fv.value.i64 = INT64_BLANK if recorded is None else int(recorded)
        return fv

    def fire_policy(self) -> None:
        """DCGM's policy thread calling back each recorded violation."""
        for v in self.node.get("policy", []):
            response = c_dcgmPolicyCallbackResponse_v2()
            response.version, response.condition, response.gpuId = 2, int(v["condition"]), int(v["gpu"])
            for callback in self.policy_callbacks:
                callback(pointer(response), 0)


def bindings(node: dict[str, Any], reachable: bool = True) -> tuple[SimpleNamespace, HostEngine]:
    """(dcgm_agent, dcgm_structs, dcgm_fields, dcgm_errors) answering from `node`, and the engine behind them."""
    engine = HostEngine(node, reachable)
    structs = _structs()
    agent = ModuleType("dcgm_agent")
    version = str(node.get("dcgm", "4.6.0"))

    def call(name: str, *args: Any) -> None:
        engine.calls.append((name, args))

    def dcgmInit() -> int:
        call("dcgmInit")
        return DCGM_ST_OK

    def dcgmShutdown() -> int:
        call("dcgmShutdown")
        return DCGM_ST_OK

    def dcgmStartEmbedded(opMode: int) -> c_void_p:
        call("dcgmStartEmbedded", opMode)
        engine.check()
        return c_void_p(1)

    def dcgmStopEmbedded(handle: Any) -> int:
        call("dcgmStopEmbedded")
        return DCGM_ST_OK

    def dcgmConnect(ip_address: str) -> c_void_p:
        call("dcgmConnect", ip_address)
        engine.check()
        return c_void_p(1)

    def dcgmDisconnect(handle: Any) -> int:
        call("dcgmDisconnect")
        return DCGM_ST_OK

    def dcgmGetAllSupportedDevices(handle: Any) -> list[int]:
        engine.check()
        return sorted(engine.gpus)

    def dcgmGetDeviceAttributes(handle: Any, gpuId: int) -> c_dcgmDeviceAttributes_v3:
        attributes = c_dcgmDeviceAttributes_v3()
        attributes.identifiers.uuid = engine.gpus[gpuId]["uuid"].encode()
        attributes.identifiers.deviceName = engine.gpus[gpuId].get("name", "").encode()
        return attributes

    def dcgmGroupCreate(handle: Any, type: int, groupName: str) -> c_void_p:
        group = len(engine.groups) + 100
        engine.groups[group] = sorted(engine.gpus) if type == 0 else []
        call("dcgmGroupCreate", groupName)
        return c_void_p(group)

    def dcgmGroupAddDevice(handle: Any, group_id: c_void_p, gpu_id: int) -> int:
        engine.groups[int(group_id.value or 0)].append(gpu_id)
        return DCGM_ST_OK

    def dcgmGroupDestroy(handle: Any, group_id: c_void_p) -> int:
        engine.groups.pop(int(group_id.value or 0), None)
        return DCGM_ST_OK

    def dcgmProfGetSupportedMetricGroups(handle: Any, gpuId: int) -> c_dcgmProfGetMetricGroups_v3:
        groups = engine.gpus[gpuId].get("prof_groups")
        if not groups:
            raise DCGMError(DCGM_ST_PROFILING_NOT_SUPPORTED)
        msg = c_dcgmProfGetMetricGroups_v3()
        msg.gpuId, msg.numMetricGroups = gpuId, len(groups)
        for k, ids in enumerate(groups):
            msg.metricGroups[k].majorId, msg.metricGroups[k].numFieldIds = k, len(ids)
            for j, fid in enumerate(ids):
                msg.metricGroups[k].fieldIds[j] = fid
        return msg

    def dcgmFieldGroupCreate(handle: Any, fieldIds: list[int], fieldGroupName: str) -> c_void_p:
        engine.watched = list(fieldIds)
        return c_void_p(7)

    def dcgmWatchFields(handle: Any, groupId: Any, fieldGroupId: Any, updateFreq: int, maxKeepAge: float,
                        maxKeepSamples: int) -> int:  # fmt: skip
        call("dcgmWatchFields", updateFreq, maxKeepAge, maxKeepSamples)
        return DCGM_ST_OK

    def dcgmEntitiesGetLatestValues(handle: Any, entities: list[Any], fieldIds: list[int], flags: int) -> Any:
        engine.check()
        values = (c_dcgmFieldValue_v2 * (len(entities) * len(fieldIds)))()
        k = 0
        for entity in entities:
            for fid in fieldIds:
                values[k] = engine.value(int(entity.entityId), fid)
                k += 1
        return values

    def dcgmHealthSet(handle: Any, groupId: Any, systems: int) -> int:
        engine.health_set = systems
        return DCGM_ST_OK

    def dcgmHealthCheck(handle: Any, groupId: Any, version: int = 5) -> c_dcgmHealthResponse_v5:
        engine.check()
        response = c_dcgmHealthResponse_v5()
        incidents = engine.node.get("health", {}).get("incidents", [])
        response.incidentCount = len(incidents)
        response.overallHealth = max((int(i["health"]) for i in incidents), default=0)
        for k, incident in enumerate(incidents):
            target = response.incidents[k]
            target.system, target.health = int(incident["system"]), int(incident["health"])
            target.error.code, target.error.msg = int(incident["code"]), incident["msg"].encode()
            target.entityInfo.entityGroupId, target.entityInfo.entityId = 1, int(incident["gpu"])
        return response

    def dcgmPolicySet(handle: Any, group_id: Any, policy: c_dcgmPolicy_v1, status_handle: Any) -> int:
        call("dcgmPolicySet", policy.condition, [(p.tag, p.val.llval) for p in policy.parms])
        return DCGM_ST_OK

    def dcgmPolicyRegister_v2(handle: Any, groupId: Any, condition: int, callback: Any, userData: Any) -> int:
        engine.policy_callbacks.append(callback)
        return DCGM_ST_OK

    def dcgmPolicyUnregister(handle: Any, groupId: Any, condition: int) -> int:
        engine.policy_callbacks.clear()
        return DCGM_ST_OK

    def dcgmWatchJobFields(handle: Any, groupId: Any, updateFreq: int, maxKeepAge: float, maxKeepSamples: int) -> int:
        return DCGM_ST_OK

    def dcgmJobStartStats(handle: Any, groupId: c_void_p, jobid: str) -> int:
        engine.jobs_started[jobid] = int(groupId.value or 0)
        return DCGM_ST_OK

    def dcgmJobStopStats(handle: Any, jobid: str) -> int:
        engine.jobs_stopped.append(jobid)
        return DCGM_ST_OK

    def dcgmJobRemove(handle: Any, jobid: str) -> int:
        return DCGM_ST_OK

    def dcgmJobGetStats(handle: Any, jobid: str) -> c_dcgmJobInfo_v3:
        recorded = engine.node.get("jobs", {}).get(jobid)
        if jobid not in engine.jobs_started or recorded is None:
            raise DCGMError(DCGM_ST_NO_DATA)
        info = c_dcgmJobInfo_v3()
        info.numGpus = len(recorded)
        for k, gpu in enumerate(recorded):
            usage = info.gpus[k]
            usage.gpuId = int(gpu["gpu"])
            blank = INT64_BLANK
            usage.energyConsumed = blank if gpu.get("energy") is None else int(gpu["energy"])
            usage.smUtilization.average = 0x7FFFFFF0 if gpu.get("sm_util") is None else int(gpu["sm_util"])
            usage.maxGpuMemoryUsed = int(gpu.get("max_memory", blank))
            usage.numXidCriticalErrors = int(gpu.get("xids", 0))
            usage.eccDoubleBit = int(gpu.get("dbe", 0))
            usage.pcieReplays = int(gpu.get("pcie_replays", 0))
        return info

    for fn in list(locals().values()):
        if callable(fn) and getattr(fn, "__name__", "").startswith("dcgm"):
            setattr(agent, fn.__name__, fn)
    if version.startswith("3."):  # DCGM 3.x registers policies through dcgmPolicyRegister (begin/finish callbacks)
        del agent.dcgmPolicyRegister_v2
    return SimpleNamespace(agent=agent, structs=structs, fields=_fields(version), errors=_errors()), engine


def load(name: str) -> dict[str, Any]:
    return json.loads((CAPTURES / f"{name}.json").read_text())
