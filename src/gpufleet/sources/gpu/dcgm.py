"""DCGM's host engine through DCGM's own Python bindings, on a node that runs it (nv-hostengine, or embedded).

The bindings are the ones DCGM installs with itself (never a copy of ours): `dcgm_agent`, `dcgm_structs`,
`dcgm_fields` and `dcgm_errors` under DCGM 4.x's /usr/share/datacenter-gpu-manager-4/bindings/python3 or DCGM 3.x's
/usr/local/dcgm/bindings/python3 (NVIDIA/DCGM scripts/verify_package_contents at v3.3.9 and 4.6.0). They load
libdcgm.so.3/.4 themselves. What this source reads, each collection:

- DCGM's profiling fields (DCGM_FI_PROF_*) the frame carries, on every GPU whose metric groups have them
  (dcgmProfGetSupportedMetricGroups; DCGM's profiling module runs on datacenter GPUs from Volta on), watched in one
  field group at the collection interval (dcgmWatchFields) and read with dcgmEntitiesGetLatestValues. DCGM writes
  them in the catalog's units already (ratios 0-1, bytes per second); a blank value (DCGM_FT_*_BLANK and above:
  dcgmvalue.py) or a status other than DCGM_ST_OK stays empty. Whole GPUs only: GPU instances are not read here.
- Its health watches (dcgmHealthSet with every system, dcgmHealthCheck each `health_every_s`): per GPU
  `gpufleet_dcgm_health` (DCGM's last result, a GPU field written every collection: 0 pass, 10 warning, 20
  failure) and each incident as `gpufleet_dcgm_health_incident{system, code}`, judged in health/dcgm_health.py
  with `dcgmi health`'s verdict (the agent's dcgm-health detector files it as a finding).
- Policy violations (DCGM 4.x's dcgmPolicyRegister_v2 on a policy of this source's own group: double-bit ECC,
  PCIe replays, retired pages past DCGM's limit, thermal and power past the GPU's own limits, NVLink errors): counted
  per GPU and condition in `gpufleet_dcgm_policy_violations_total{condition}`. DCGM calls back from its own thread;
  the count is taken on the next collection (and each new violation is a finding of the dcgm-policy detector).
- Job statistics per Slurm job of the frame's job map (dcgm_jobs.py: dcgmJobStartStats, dcgmJobGetStats,
  dcgmJobStopStats), as `gpufleet_dcgm_job_*{hpc_job}`.

The PROF series keep dcgm-exporter's names whichever source fills them; `gpufleet telemetry fields` and
gpufleet_source_up{source="dcgm"} say this one did (and the NVML source does not sample GPM while it runs).
"""

from __future__ import annotations

import importlib
import logging
import math
import sys
import threading
from collections.abc import Sequence
from ctypes import CFUNCTYPE, POINTER, c_uint64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.errors import BackendError, DependencyMissingError, UserError
from gpufleet.health.dcgm_health import HEALTH_INCIDENT_SERIES, POLICY_VIOLATIONS_SERIES
from gpufleet.sources.gpu.dcgm_jobs import INT64_BLANK, JOB_SERIES, DcgmJobStats
from gpufleet.telemetry.field_sources import SourceFields
from gpufleet.telemetry.fields import load_field_catalog
from gpufleet.telemetry.frame import GpuEntity, MetricFrame

log = logging.getLogger("gpufleet.dcgm")

# where DCGM installs its Python bindings: 4.x (deb and rpm), then 3.x
BINDING_PATHS = (
    Path("/usr/share/datacenter-gpu-manager-4/bindings/python3"),
    Path("/usr/local/dcgm/bindings/python3"),
)
DEFAULT_PORT = 5555  # nv-hostengine's (dcgm_structs.h DCGM_HE_PORT_NUMBER)
# dcgmvalue.py: DCGM's blank values start here (DCGM_FP64_IS_BLANK; the integer ones in dcgm_jobs.py)
FP64_BLANK = 140737488355328.0
FT_DOUBLE, FT_INT64 = ord("d"), ord("i")  # dcgm_fields.DCGM_FT_DOUBLE / DCGM_FT_INT64

HEALTH = "gpufleet_dcgm_health"
HEALTH_INCIDENT = HEALTH_INCIDENT_SERIES  # judged by the agent's dcgm detectors (health/detectors/dcgm.py)
POLICY_VIOLATIONS = POLICY_VIOLATIONS_SERIES
# dcgm_structs.h DCGM_HEALTH_WATCH_*: the system bit and its name in gpufleet's series (dcgmi prints "<X> system")
HEALTH_SYSTEMS = {
    0x1: "pcie", 0x2: "nvlink", 0x4: "pmu", 0x8: "mcu", 0x10: "memory", 0x20: "sm", 0x40: "inforom",
    0x80: "thermal", 0x100: "power", 0x200: "driver", 0x400: "nvswitch_nonfatal", 0x800: "nvswitch_fatal",
    0x1000: "connectx",
}  # fmt: skip
# dcgm_structs.h DCGM_POLICY_COND_*: the conditions registered, by their name in the series
POLICY_CONDITIONS = {0x1: "dbe", 0x2: "pcie", 0x4: "retired_pages", 0x8: "thermal", 0x10: "power", 0x20: "nvlink"}
# policy thresholds (DCGM_POLICY_COND_IDX_*: 0 DBE, 1 PCI, 2 max retired pages, 3 thermal, 4 power, 5 NVLink): the
# booleans switch a condition on; retired pages at DCGM's own limit (thresholds.yaml retired_pages_limit)
RETIRED_PAGES_LIMIT = 63
FIELDS = SourceFields(
    "dcgm",
    # the health of every GPU it watches; the profiling fields this node's GPUs have, declared per node
    # (`DcgmSource.fields`)
    fills=frozenset({HEALTH}),
    partly=(
        (HEALTH_INCIDENT, "GPUs with an open DCGM health incident"),
        (POLICY_VIOLATIONS, "GPUs with a policy violation since the agent started (DCGM 4.x)"),
        *((name, "GPUs in use by a Slurm job (the job map)") for name, _ in JOB_SERIES),
    ),
)


@dataclass(frozen=True, slots=True)
class Bindings:
    """DCGM's own modules: its API calls, its structures and constants, its field ids, its error codes."""

    agent: Any
    structs: Any
    fields: Any
    errors: Any = None


@dataclass(frozen=True, slots=True)
class DcgmTarget:
    """Where the host engine is: embedded (started in this process) or an nv-hostengine at host:port."""

    address: str  # "" when embedded

    @property
    def embedded(self) -> bool:
        return not self.address

    def __str__(self) -> str:
        return "embedded" if self.embedded else self.address


def parse_target(text: str) -> DcgmTarget | str | None:
    """`--dcgm`: host[:port] or embedded (a target), off (None), auto ("auto": the local nv-hostengine if its
    bindings and daemon are there, silently nothing otherwise)."""
    value = text.strip()
    if value in ("auto", ""):
        return "auto"
    if value == "off":
        return None
    if value == "embedded":
        return DcgmTarget("")
    host, _, port = value.rpartition(":") if ":" in value else (value, "", str(DEFAULT_PORT))
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--dcgm {text!r} is not host:port", fix="use host:port, embedded, off or auto")
    return DcgmTarget(f"{host}:{port}")


def load_bindings(paths: Sequence[Path] | None = None) -> Bindings:
    """DCGM's bindings from its install path (default: BINDING_PATHS, looked up when called; DependencyMissingError
    when DCGM is not installed here)."""
    paths = BINDING_PATHS if paths is None else paths
    for path in paths:
        if (path / "dcgm_agent.py").is_file():
            if str(path) not in sys.path:
                sys.path.append(str(path))
            try:
                modules = [importlib.import_module(m) for m in ("dcgm_agent", "dcgm_structs", "dcgm_fields")]
            except Exception as exc:  # the bindings' own import failing (their version against this Python)
                raise DependencyMissingError(f"DCGM's Python bindings in {path} do not load: {exc}") from None
            try:
                errors = importlib.import_module("dcgm_errors")
            except ImportError:
                errors = None
            return Bindings(modules[0], modules[1], modules[2], errors)
    where = " or ".join(str(p) for p in paths)
    raise DependencyMissingError(
        f"DCGM's Python bindings are not installed (no {where})",
        fix="install DCGM (datacenter-gpu-manager-4-core), or run the agent with --dcgm off",
    )


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def error_names(errors: Any) -> dict[int, str]:
    """dcgmError_t codes by their DCGM_FR_* name (the bindings' dcgm_errors module), for the incident series."""
    if errors is None:
        return {}
    names: dict[int, str] = {}
    for name, value in vars(errors).items():
        if name.startswith("DCGM_FR_") and isinstance(value, int) and not name.endswith(("_MSG", "_NEXT")):
            names.setdefault(value, name)
    return names


def field_id(fields: Any, name: str) -> int | None:
    """A field's id by dcgm-exporter's name: the bindings' constant, or (DCGM 4.6 renamed its fields, keeping the
    old names as deprecated aliases resolved on access) the constant its alias names, read without the warning."""
    namespace = vars(fields)
    value = namespace.get(name)
    if value is None:
        value = namespace.get(namespace.get("_DEPRECATED_ALIASES", {}).get(name, ""))
    return value if isinstance(value, int) else None


class DcgmSource:
    """Reads the node's GPUs through DCGM into the frame (see the module's note)."""

    name = "dcgm"

    def __init__(
        self,
        entities: Sequence[GpuEntity],
        target: DcgmTarget,
        interval_s: float = 1.0,
        bindings: Bindings | None = None,
        health_every_s: float = 10.0,
    ) -> None:
        self.b = bindings or load_bindings()
        self.target = target
        self.interval_s = interval_s
        self.health_every_s = health_every_s
        agent, structs = self.b.agent, self.b.structs
        self.error = structs.DCGMError
        try:
            agent.dcgmInit()
            if target.embedded:
                self.handle = agent.dcgmStartEmbedded(structs.DCGM_OPERATION_MODE_AUTO)
            else:
                self.handle = agent.dcgmConnect(target.address)
            self.gpu_ids = list(agent.dcgmGetAllSupportedDevices(self.handle))
            uuids = {g: _text(agent.dcgmGetDeviceAttributes(self.handle, g).identifiers.uuid) for g in self.gpu_ids}
        except self.error as exc:
            where = "an embedded host engine" if target.embedded else f"nv-hostengine at {target.address}"
            raise BackendError(
                f"DCGM: {where} did not answer: {exc}",
                fix="start nv-hostengine (systemctl start nvidia-dcgm), or run the agent with --dcgm off",
            ) from None
        # frame column of each DCGM GPU: the whole-GPU entity with its UUID
        by_uuid = {e.uuid: k for k, e in enumerate(entities) if e.gpu_instance_id is None}
        self.columns = {g: by_uuid[u] for g, u in uuids.items() if u in by_uuid}
        self.entities = list(entities)
        self.codes = error_names(self.b.errors)
        self._names: dict[int, str] = {}
        self._field_ids: list[int] = []
        self._supported: dict[int, frozenset[str]] = {}
        self._health_at = -math.inf
        self._health: dict[int, float] = {}  # per GPU: DCGM's last result, written every collection
        self._health_keys: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self._violations: dict[tuple[int, str], int] = {}
        self._pending: list[tuple[int, int]] = []  # (gpu id, condition) from DCGM's callback thread
        self._lock = threading.Lock()
        self._callback: Any = None
        self.policy_why = ""
        try:
            self.group = agent.dcgmGroupCreate(self.handle, structs.DCGM_GROUP_EMPTY, "gpufleet")
            for g in self.columns:
                agent.dcgmGroupAddDevice(self.handle, self.group, g)
            if self.columns:
                agent.dcgmHealthSet(self.handle, self.group, structs.DCGM_HEALTH_WATCH_ALL)
        except self.error as exc:
            raise BackendError(f"DCGM: its group of this node's GPUs could not be made: {exc}") from None
        # the catalog's profiling fields by DCGM field id, as these bindings name them
        names = load_field_catalog().names("gpu")
        ids = {n: field_id(self.b.fields, n) for n in names if n.startswith("DCGM_FI_PROF_")}
        self._prof_ids = {n: i for n, i in ids.items() if i is not None}
        self._supported = {g: self._prof_fields(g) for g in self.columns}
        self.job_stats = DcgmJobStats(self.b, self.handle, interval_s, self.columns, self._labels)
        self._register_policy()

    # -- what DCGM can give here ------------------------------------------------------------------------------------
    def _prof_fields(self, gpu: int) -> frozenset[str]:
        """The DCGM_FI_PROF_* names DCGM's profiling module has for one GPU (empty: none, or not supported)."""
        try:
            groups = self.b.agent.dcgmProfGetSupportedMetricGroups(self.handle, gpu)
        except self.error as exc:
            log.info("DCGM: GPU %d has no profiling metrics: %s", gpu, exc)
            return frozenset()
        ids = {int(f) for k in range(groups.numMetricGroups) for f in groups.metricGroups[k].fieldIds[
            : groups.metricGroups[k].numFieldIds]}  # fmt: skip
        return frozenset(name for name, fid in self._prof_ids.items() if fid in ids)

    @property
    def fields(self) -> SourceFields:
        """The profiling fields DCGM fills on this node: on every GPU (fills), on some (partly)."""
        sets = list(self._supported.values())
        every = frozenset.intersection(*sets) if sets else frozenset()
        some = frozenset().union(*sets) - every
        partly = [(f, "GPUs whose DCGM profiling metric groups have it") for f in sorted(some)]
        return SourceFields("dcgm", every | FIELDS.fills, (*partly, *FIELDS.partly))

    def prof_by_gpu(self) -> dict[int, frozenset[str]]:
        """The profiling fields DCGM fills on each whole GPU, by the GPU's index in the frame's entities (NVML's)."""
        return {self.entities[c].gpu: self._supported.get(g, frozenset()) for g, c in self.columns.items()}

    def _watch(self, frame: MetricFrame) -> None:
        """One field group of the profiling fields the frame carries and some GPU here has, watched at the
        collection interval."""
        agent, wanted = self.b.agent, set().union(*self._supported.values()) if self._supported else set()
        ids = {self._prof_ids[f.name]: f.name for f in frame.gpu_fields if f.name in wanted}
        self._names = ids
        self._field_ids = sorted(ids)
        if not self._field_ids:
            return
        try:
            fg = agent.dcgmFieldGroupCreate(self.handle, self._field_ids, "gpufleet-prof")
            keep_s = max(3 * self.interval_s, 30.0)
            agent.dcgmWatchFields(self.handle, self.group, fg, int(self.interval_s * 1e6), keep_s, 0)
        except self.error as exc:
            self._field_ids = []
            raise BackendError(f"DCGM: the profiling fields could not be watched: {exc}") from None

    # -- policy violations --------------------------------------------------------------------------------------------
    def _register_policy(self) -> None:
        agent, structs = self.b.agent, self.b.structs
        if not self.columns:
            return
        if not hasattr(agent, "dcgmPolicyRegister_v2"):
            self.policy_why = "this DCGM's bindings have no dcgmPolicyRegister_v2 (DCGM 4.x): no policy violations"
            log.info("DCGM: %s", self.policy_why)
            return
        condition = 0
        for bit in POLICY_CONDITIONS:
            condition |= bit
        policy = structs.c_dcgmPolicy_v1()
        policy.version = structs.dcgmPolicy_version1
        policy.condition = condition
        policy.mode = structs.DCGM_POLICY_MODE_MANUAL
        policy.isolation = structs.DCGM_POLICY_ISOLATION_NONE
        policy.action = structs.DCGM_POLICY_ACTION_NONE
        policy.validation = structs.DCGM_POLICY_VALID_NONE
        for index in (0, 1, 5):  # DBE, PCI, NVLink: on
            policy.parms[index].tag, policy.parms[index].val.boolean = 0, True
        limits = ((2, RETIRED_PAGES_LIMIT), (3, self._limit("DCGM_FI_DEV_SLOWDOWN_TEMP")),
                  (4, self._limit("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX")))  # fmt: skip
        for index, value in limits:
            if value is not None:
                policy.parms[index].tag, policy.parms[index].val.llval = 1, int(value)
        response = structs.c_dcgmPolicyCallbackResponse_v2

        @CFUNCTYPE(None, POINTER(response), c_uint64)
        def callback(resp: Any, _user: int) -> None:
            with self._lock:
                self._pending.append((int(resp.contents.gpuId), int(resp.contents.condition)))

        try:
            agent.dcgmPolicySet(self.handle, self.group, policy, None)
            agent.dcgmPolicyRegister_v2(self.handle, self.group, condition, callback, 0)
        except self.error as exc:
            self.policy_why = f"DCGM refused the policy: {exc}"
            log.warning("DCGM: %s; no policy violations", self.policy_why)
            return
        self._callback = callback  # held: DCGM calls it for as long as the registration stands

    def _limit(self, field: str) -> float | None:
        """The lowest of the GPUs' values of a limit field (one policy holds for the whole group)."""
        fid = field_id(self.b.fields, field)
        if fid is None:
            return None
        values = [v for g in self.columns if (v := self._latest_one(g, fid)) is not None and not math.isnan(v)]
        return min(values) if values else None

    def _latest_one(self, gpu: int, fid: int) -> float | None:
        try:
            (value,) = self.b.agent.dcgmEntitiesGetLatestValues(self.handle, [self._pair(gpu)], [fid], 0)
        except (self.error, ValueError):
            return None
        return _value(value)

    def _pair(self, gpu: int) -> Any:
        pair = self.b.structs.c_dcgmGroupEntityPair_t()
        pair.entityGroupId, pair.entityId = self.b.fields.DCGM_FE_GPU, gpu
        return pair

    # -- each collection ---------------------------------------------------------------------------------------------
    def collect(self, frame: MetricFrame) -> None:
        if not self._names and any(self._supported.values()):
            self._watch(frame)
        if self._field_ids:
            self._read_prof(frame)
        now = frame.timestamp
        if now - self._health_at >= self.health_every_s:
            self._health_at = now
            self._check_health(frame)
        if frame.has_gpu_field(HEALTH):
            for gpu, health in self._health.items():
                frame.gpu(HEALTH)[self.columns[gpu]] = health
        self._count_violations(frame)
        self.job_stats.collect(frame)

    def _read_prof(self, frame: MetricFrame) -> None:
        gpus = list(self.columns)
        values = self.b.agent.dcgmEntitiesGetLatestValues(self.handle, [self._pair(g) for g in gpus],
                                                          self._field_ids, 0)  # fmt: skip
        for fv in values:
            column = self.columns.get(int(fv.entityId))
            name = self._names.get(int(fv.fieldId))
            if column is None or name is None or not frame.has_gpu_field(name):
                continue
            if name in self._supported.get(int(fv.entityId), ()):
                frame.gpu(name)[column] = _value(fv) if int(fv.status) == 0 else math.nan

    def _labels(self, gpu: int, **more: str) -> dict[str, str]:
        entity = self.entities[self.columns[gpu]]
        return {"gpu": str(entity.gpu), "UUID": entity.uuid, **more}

    def _check_health(self, frame: MetricFrame) -> None:
        try:
            response = self.b.agent.dcgmHealthCheck(self.handle, self.group)
        except self.error as exc:
            raise BackendError(f"DCGM: dcgmHealthCheck failed: {exc}") from None
        worst = dict.fromkeys(self.columns, 0)
        keys: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        gpu_group = self.b.fields.DCGM_FE_GPU
        for k in range(min(int(response.incidentCount), len(response.incidents))):
            incident = response.incidents[k]
            gpu = int(incident.entityInfo.entityId)
            if int(incident.entityInfo.entityGroupId) != gpu_group or gpu not in self.columns:
                continue
            health = int(incident.health)
            worst[gpu] = max(worst[gpu], health)
            code = int(incident.error.code)
            system = HEALTH_SYSTEMS.get(int(incident.system), f"system_{int(incident.system):#x}")
            labels = self._labels(gpu, system=system, code=self.codes.get(code, str(code)))
            frame.set_gauge(HEALTH_INCIDENT, labels, float(health))
            keys.add((HEALTH_INCIDENT, tuple(labels.items())))
            log.debug("DCGM health: GPU %d %s %d: %s", gpu, system, health, _text(incident.error.msg))
        for gone in self._health_keys - keys:
            frame.remove_gauge(gone[0], dict(gone[1]))
        self._health_keys = keys
        self._health = {gpu: float(health) for gpu, health in worst.items()}

    def _count_violations(self, frame: MetricFrame) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for gpu, condition in pending:
            name = POLICY_CONDITIONS.get(condition)
            if name is None or gpu not in self.columns:
                continue
            self._violations[(gpu, name)] = self._violations.get((gpu, name), 0) + 1
        for (gpu, name), count in self._violations.items():
            frame.set_gauge(POLICY_VIOLATIONS, self._labels(gpu, condition=name), float(count))

    def stop(self) -> None:
        agent = self.b.agent
        try:
            if self._callback is not None:
                agent.dcgmPolicyUnregister(self.handle, self.group, sum(POLICY_CONDITIONS))
            if self.target.embedded:
                agent.dcgmStopEmbedded(self.handle)
            else:
                agent.dcgmDisconnect(self.handle)
            agent.dcgmShutdown()
        except self.error as exc:
            log.debug("DCGM: not shut down cleanly: %s", exc)


def _value(fv: Any) -> float | None:
    """A field value as a float; None (or NaN for a frame) when DCGM says it is blank."""
    kind = int(fv.fieldType)
    if kind == FT_DOUBLE:
        value = float(fv.value.dbl)
        return math.nan if value >= FP64_BLANK or math.isnan(value) else value
    if kind == FT_INT64:
        raw = int(fv.value.i64)
        return math.nan if raw >= INT64_BLANK else float(raw)
    return math.nan


def open_dcgm(
    entities: Sequence[GpuEntity], choice: DcgmTarget | str | None, interval_s: float, bindings: Bindings | None = None
) -> tuple[DcgmSource | None, str]:
    """The DCGM source for `--dcgm`, and why there is none ("" when not asked: off, or auto on a node without
    DCGM's bindings or daemon; auto stays silent)."""
    if choice is None:
        return None, ""
    auto = choice == "auto"
    target = DcgmTarget(f"127.0.0.1:{DEFAULT_PORT}") if auto else choice
    assert isinstance(target, DcgmTarget)
    try:
        source = DcgmSource(entities, target, interval_s, bindings=bindings)
    except (DependencyMissingError, BackendError) as exc:
        if auto:
            log.debug("DCGM not used: %s", exc.message)
            return None, ""
        return None, exc.message
    log.info("DCGM: reading %d GPU(s) through %s", len(source.columns), target)
    return source, ""
