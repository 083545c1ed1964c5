"""The kubelet's pod-resources API (v1): which container was given which GPU, for per-workload attribution.

The kubelet serves `v1.PodResourcesLister` over gRPC on the unix socket /var/lib/kubelet/pod-resources/kubelet.sock.
`List` names, per pod and container, the device IDs each device plugin resource handed out and the devices each DRA
claim was allocated; `GetAllocatableResources` names every device ID the plugins offer, from which the number of
replicas of a time-sliced or MPS GPU follows (the NVIDIA plugin offers `GPU-<uuid>::0` .. `::<n-1>` for one GPU).

The messages mirror `k8s.io/kubelet/pkg/apis/podresources/v1/api.proto` field for field (names, numbers, types):
kubernetes/kubernetes staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto, published as
kubernetes/kubelet pkg/apis/podresources/v1/api.proto (as of kubernetes/kubelet commit 63b32497: the version with
PodResources.cpu_ids = 4 and memory = 5, proto3-optional ClaimResource.share_id = 5, and DynamicResource's field 1,
class_name, removed in 1.31); fields an older kubelet does not send are simply absent. The classes are built once,
on first use, from a FileDescriptorProto written out below, so no generated code is shipped and the module (with its
pure conversion functions, which the digital twin also calls) imports without grpcio or protobuf.

What it reads, and what it does not:

- A device plugin resource counts when its name is a GPU resource (`GPU_RESOURCES`: nvidia.com/gpu, its `.shared`
  rename, nvidia.com/mig-<profile>[.shared], amd.com/gpu and the AMD plugin's partition resources, habana.ai/gaudi):
  each of its device IDs becomes one `Allotment` as the plugin wrote it (a UUID, `<uuid>::<replica>`, a MIG UUID,
  a PCI address for AMD, a serial for Gaudi).
- A DRA claim counts when its driver is a GPU DRA driver (`GPU_DRA_DRIVERS`: gpu.nvidia.com, gpu.amd.com): the
  allocated device's name (`gpu-0`, a MIG device's `gpu-0-mig-...`) is the device ID and the driver the resource.
- Terminated pods: kubelets keep listing pods in a terminal phase (Succeeded, Failed) while they still hold them
  (kubernetes/kubernetes#119423; newer kubelets leave them out, kubernetes/kubernetes#135485), which is why the
  labels of finished pods linger in dcgm-exporter. The API says nothing of phases, so this reader cannot tell; the
  owner reader (the node's pod list) drops them.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from typing import Any, NamedTuple, Protocol

from gpufleet.catalog.vendors import gpu_resources, load_vendors
from gpufleet.errors import BackendError, DependencyMissingError, GpufleetError, ParseError
from gpufleet.model.attribution import Allotment, Allotments, Attribution

log = logging.getLogger("gpufleet.agent")

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
SERVICE = "v1.PodResourcesLister"
LIST_METHOD = f"/{SERVICE}/List"
ALLOCATABLE_METHOD = f"/{SERVICE}/GetAllocatableResources"
DEFAULT_TIMEOUT_S = 2.0
ALLOCATABLE_EVERY_S = 60.0  # the allocatable set changes only when a plugin's configuration does
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a full node's List; gRPC's 4 MiB default is too small for some
MAX_SAID = 256  # distinct warnings remembered (to say each once)
INSTALL_FIX = "pip install 'gpufleet[k8s]'"
MOUNT_FIX = (
    "mount the host's /var/lib/kubelet/pod-resources into the agent's pod (a hostPath volume), or pass the socket "
    "path if the kubelet keeps it elsewhere (--root-dir)"
)

# Exact names, or fnmatch patterns (with *, [..]) for families of resources.
GPU_RESOURCES: frozenset[str] = (
    frozenset(
        {
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",  # time-slicing or MPS with renameByDefault
            "nvidia.com/mig-*",  # mixed MIG strategy: nvidia.com/mig-1g.10gb, and its .shared rename
            "amd.com/gpu",
            "amd.com/[sdtqc]px_nps*",  # the AMD plugin's mixed naming: one resource per partition mode (cpx_nps4, ...)
            "habana.ai/gaudi",
        }
    )
    | gpu_resources()
)
GPU_DRA_DRIVERS: frozenset[str] = frozenset(v.dra_driver for v in load_vendors().values() if v.dra_driver)


def is_gpu_resource(name: str, resources: Collection[str] = GPU_RESOURCES) -> bool:
    """Whether a device plugin resource name is one of `resources` (exact names or fnmatch patterns)."""
    if name in resources:
        return True
    return any(("*" in p or "[" in p) and fnmatchcase(name, p) for p in resources)


# ---- the dict form of the answers -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListReading:
    """What a List answer gave: the GPU allotments, and a line for each part passed over as malformed."""

    allotments: tuple[Allotment, ...]
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AllocatableReading:
    """What a GetAllocatableResources answer gave: replicas per GPU (or MIG) UUID, and what was passed over."""

    replicas: dict[str, int]
    skipped: tuple[str, ...] = ()


class _Skip(Exception):
    """One part of an answer is malformed: passed over, with the reason."""


def _get(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    """A field by its JSON name (MessageToDict, grpcurl) or its proto name (preserving_proto_field_name)."""
    return obj[camel] if camel in obj else obj.get(snake)


def _text(value: Any, where: str) -> str:
    if value is None:
        return ""  # proto3's JSON form leaves empty strings out
    if not isinstance(value, str):
        raise _Skip(f"{where} is {type(value).__name__}, not a string")
    return value


def _items(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Skip(f"{where} is {type(value).__name__}, not a list")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _Skip(f"{where} is {type(value).__name__}, not an object")
    return value


def _top(response: Any, camel: str, snake: str, what: str) -> list[Any]:
    if not isinstance(response, Mapping):
        raise ParseError(
            f"the {what} answer is {type(response).__name__}, not an object",
            fix="pass the dict json_format.MessageToDict makes of the response",
        )
    try:
        return _items(_get(response, camel, snake), camel)
    except _Skip as exc:
        raise ParseError(f"the {what} answer is malformed: {exc}", fix="check what produced it") from None


def parse_list(response: Mapping[str, Any], resources: Collection[str] = GPU_RESOURCES) -> ListReading:
    """The GPU allotments in a ListPodResourcesResponse (its MessageToDict form). A malformed pod, container,
    device or claim is passed over with a line in `skipped`; only an answer that is not a response at all is a
    ParseError."""
    found: dict[Allotment, None] = {}  # ordered, each once
    skipped: list[str] = []
    for p, raw_pod in enumerate(_top(response, "podResources", "pod_resources", "List")):
        where = f"podResources[{p}]"
        try:
            pod = _object(raw_pod, where)
            name = _text(_get(pod, "name", "name"), f"{where}.name")
            namespace = _text(_get(pod, "namespace", "namespace"), f"{where}.namespace")
            if not name:
                raise _Skip(f"{where} has no name")
            containers = _items(_get(pod, "containers", "containers"), f"{where}.containers")
        except _Skip as exc:
            skipped.append(str(exc))
            continue
        for c, raw_container in enumerate(containers):
            cwhere = f"pod {namespace}/{name} containers[{c}]"
            try:
                container = _object(raw_container, cwhere)
                cname = _text(_get(container, "name", "name"), f"{cwhere}.name")
                if not cname:
                    raise _Skip(f"{cwhere} has no name")
                devices = _items(_get(container, "devices", "devices"), f"{cwhere}.devices")
                claims = _items(_get(container, "dynamicResources", "dynamic_resources"), f"{cwhere}.dynamicResources")
            except _Skip as exc:
                skipped.append(str(exc))
                continue
            holder = Attribution(pod=name, namespace=namespace, container=cname)
            cwhere = f"pod {namespace}/{name} container {cname}"
            for d, raw_device in enumerate(devices):
                for resource, device_id in _device_ids(raw_device, f"{cwhere} devices[{d}]", resources, skipped):
                    found.setdefault(Allotment(device_id, holder, resource=resource))
            for k, raw_claim in enumerate(claims):
                for driver, device in _claim_devices(raw_claim, f"{cwhere} dynamicResources[{k}]", skipped):
                    found.setdefault(Allotment(device, holder, resource=driver))
    return ListReading(tuple(found), tuple(skipped))


def _device_ids(raw: Any, where: str, resources: Collection[str], skipped: list[str]) -> list[tuple[str, str]]:
    """(resource, device ID) for each ID of a GPU resource in one ContainerDevices."""
    try:
        device = _object(raw, where)
        resource = _text(_get(device, "resourceName", "resource_name"), f"{where}.resourceName")
        ids = _items(_get(device, "deviceIds", "device_ids"), f"{where}.deviceIds")
    except _Skip as exc:
        skipped.append(str(exc))
        return []
    if not is_gpu_resource(resource, resources):
        return []
    out = []
    for i, device_id in enumerate(ids):
        if isinstance(device_id, str) and device_id:
            out.append((resource, device_id))
        else:
            skipped.append(f"{where}.deviceIds[{i}] is {device_id!r}, not a device ID")
    return out


def _claim_devices(raw: Any, where: str, skipped: list[str]) -> list[tuple[str, str]]:
    """(driver, device name) for each device a GPU DRA driver allocated to one claim."""
    out: list[tuple[str, str]] = []
    try:
        claim = _object(raw, where)
        claim_name = _text(_get(claim, "claimName", "claim_name"), f"{where}.claimName")
        results = _items(_get(claim, "claimResources", "claim_resources"), f"{where}.claimResources")
    except _Skip as exc:
        skipped.append(str(exc))
        return out
    for r, raw_result in enumerate(results):
        rwhere = f"{where} (claim {claim_name or '?'}) claimResources[{r}]"
        try:
            result = _object(raw_result, rwhere)
            driver = _text(_get(result, "driverName", "driver_name"), f"{rwhere}.driverName")
            device = _text(_get(result, "deviceName", "device_name"), f"{rwhere}.deviceName")
        except _Skip as exc:
            skipped.append(str(exc))
            continue
        if driver not in GPU_DRA_DRIVERS:
            continue
        if not device:
            skipped.append(f"{rwhere} names no device of {driver}")
            continue
        out.append((driver, device))
    return out


def allotments_from_list(
    response: Mapping[str, Any], resources: Collection[str] = GPU_RESOURCES
) -> tuple[Allotment, ...]:
    """Each GPU device ID (or DRA GPU device) a container was given, from a ListPodResourcesResponse's
    MessageToDict form; malformed parts are passed over (`parse_list` says which)."""
    return parse_list(response, resources).allotments


def parse_allocatable(response: Mapping[str, Any], resources: Collection[str] = GPU_RESOURCES) -> AllocatableReading:
    """How many device IDs each GPU (or MIG) UUID offers in an AllocatableResourcesResponse's dict form: the IDs
    `<uuid>::0` .. `<uuid>::9` give 10, a plain `<uuid>` gives 1. Other resources are left out."""
    ids: dict[str, set[str]] = {}
    skipped: list[str] = []
    for d, raw_device in enumerate(_top(response, "devices", "devices", "GetAllocatableResources")):
        for _, device_id in _device_ids(raw_device, f"devices[{d}]", resources, skipped):
            ids.setdefault(device_id.partition("::")[0], set()).add(device_id)
    return AllocatableReading({uuid: len(replicas) for uuid, replicas in ids.items()}, tuple(skipped))


def replicas_from_allocatable(response: Mapping[str, Any]) -> dict[str, int]:
    """Replicas each GPU (or MIG) UUID offers, from an AllocatableResourcesResponse's MessageToDict form."""
    return parse_allocatable(response).replicas


# ---- the API's messages, built at run time -----------------------------------------------------------------------


class _Field(NamedTuple):
    name: str
    number: int
    kind: str  # a scalar ("string", "int64", "uint64") or a message of this file
    repeated: bool = False
    optional: bool = False  # proto3 `optional` (explicit presence)


_REPEATED = True
# api.proto, message by message (k8s.io/kubelet/pkg/apis/podresources/v1)
API_MESSAGES: tuple[tuple[str, tuple[_Field, ...]], ...] = (
    ("AllocatableResourcesRequest", ()),
    (
        "AllocatableResourcesResponse",
        (
            _Field("devices", 1, "ContainerDevices", _REPEATED),
            _Field("cpu_ids", 2, "int64", _REPEATED),
            _Field("memory", 3, "ContainerMemory", _REPEATED),
        ),
    ),
    ("ListPodResourcesRequest", ()),
    ("ListPodResourcesResponse", (_Field("pod_resources", 1, "PodResources", _REPEATED),)),
    (
        "PodResources",
        (
            _Field("name", 1, "string"),
            _Field("namespace", 2, "string"),
            _Field("containers", 3, "ContainerResources", _REPEATED),
            _Field("cpu_ids", 4, "int64", _REPEATED),
            _Field("memory", 5, "ContainerMemory", _REPEATED),
        ),
    ),
    (
        "ContainerResources",
        (
            _Field("name", 1, "string"),
            _Field("devices", 2, "ContainerDevices", _REPEATED),
            _Field("cpu_ids", 3, "int64", _REPEATED),
            _Field("memory", 4, "ContainerMemory", _REPEATED),
            _Field("dynamic_resources", 5, "DynamicResource", _REPEATED),
        ),
    ),
    (
        "ContainerMemory",
        (_Field("memory_type", 1, "string"), _Field("size", 2, "uint64"), _Field("topology", 3, "TopologyInfo")),
    ),
    (
        "ContainerDevices",
        (
            _Field("resource_name", 1, "string"),
            _Field("device_ids", 2, "string", _REPEATED),
            _Field("topology", 3, "TopologyInfo"),
        ),
    ),
    ("TopologyInfo", (_Field("nodes", 1, "NUMANode", _REPEATED),)),
    ("NUMANode", (_Field("ID", 1, "int64"),)),
    (
        "DynamicResource",  # field 1 (class_name) was removed in 1.31
        (
            _Field("claim_name", 2, "string"),
            _Field("claim_namespace", 3, "string"),
            _Field("claim_resources", 4, "ClaimResource", _REPEATED),
        ),
    ),
    (
        "ClaimResource",
        (
            _Field("cdi_devices", 1, "CDIDevice", _REPEATED),
            _Field("driver_name", 2, "string"),
            _Field("pool_name", 3, "string"),
            _Field("device_name", 4, "string"),
            _Field("share_id", 5, "string", optional=True),
        ),
    ),
    ("CDIDevice", (_Field("name", 1, "string"),)),
    ("GetPodResourcesRequest", (_Field("pod_name", 1, "string"), _Field("pod_namespace", 2, "string"))),
    ("GetPodResourcesResponse", (_Field("pod_resources", 1, "PodResources"),)),
)
API_METHODS: tuple[tuple[str, str, str], ...] = (
    ("List", "ListPodResourcesRequest", "ListPodResourcesResponse"),
    ("GetAllocatableResources", "AllocatableResourcesRequest", "AllocatableResourcesResponse"),
    ("Get", "GetPodResourcesRequest", "GetPodResourcesResponse"),
)
PROTO_FILE = "k8s.io/kubelet/pkg/apis/podresources/v1/api.proto"
PROTO_PACKAGE = "v1"


def _json_name(name: str) -> str:
    """protoc's JSON name: each underscore dropped and the letter after it upper-cased."""
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _protobuf() -> Any:
    try:
        from google import protobuf
    except ImportError:
        raise DependencyMissingError(
            "protobuf is not installed: the kubelet's pod-resources API cannot be read", fix=INSTALL_FIX
        ) from None
    return protobuf


def _grpc() -> Any:
    try:
        import grpc
    except ImportError:
        raise DependencyMissingError(
            "grpcio is not installed: the kubelet's pod-resources API cannot be read", fix=INSTALL_FIX
        ) from None
    return grpc


def file_descriptor() -> Any:
    """api.proto as a descriptor_pb2.FileDescriptorProto."""
    _protobuf()
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto(name=PROTO_FILE, package=PROTO_PACKAGE, syntax="proto3")
    fdp.options.go_package = "k8s.io/kubelet/pkg/apis/podresources/v1"
    scalars = {
        "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
        "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
    }
    for message_name, fields in API_MESSAGES:
        message = fdp.message_type.add(name=message_name)
        for f in fields:
            field = message.field.add(name=f.name, number=f.number, json_name=_json_name(f.name))
            field.label = (
                descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                if f.repeated
                else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
            )
            if f.kind in scalars:
                field.type = scalars[f.kind]
            else:
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                field.type_name = f".{PROTO_PACKAGE}.{f.kind}"
            if f.optional:  # proto3 optional: a synthetic one-field oneof named _<field>
                field.proto3_optional = True
                field.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=f"_{f.name}")
    service = fdp.service.add(name="PodResourcesLister")
    for method, request, response in API_METHODS:
        service.method.add(
            name=method, input_type=f".{PROTO_PACKAGE}.{request}", output_type=f".{PROTO_PACKAGE}.{response}"
        )
    return fdp


@cache
def api_messages() -> dict[str, Any]:
    """The API's message classes by name ("ListPodResourcesResponse", ...), built once in a private pool."""
    _protobuf()
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(file_descriptor().SerializeToString())
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PROTO_PACKAGE}.{name}"))
        for name, _ in API_MESSAGES
    }


# ---- the client ------------------------------------------------------------------------------------------------


class MethodUnimplementedError(BackendError):
    """The kubelet does not serve this method (too old, or its feature gate is off)."""


class PodResourcesClient:
    """One gRPC channel to the kubelet's pod-resources socket, kept open across calls and replaced after a failure
    (a failed channel backs off before it dials again; a new one dials at once)."""

    def __init__(
        self, socket_path: str | os.PathLike[str] = DEFAULT_SOCKET, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.messages = api_messages()
        self.grpc = _grpc()
        from google.protobuf import json_format

        self.json_format = json_format
        self.socket_path = os.fspath(socket_path)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._channel: Any = None
        self._calls: dict[str, Any] = {}
        # the last answer of each method, as bytes and as read: the kubelet answers the same until a pod changes, so
        # an unchanged answer is not decoded again (the same dict comes back; callers must not change it)
        self._last: dict[str, tuple[bytes, dict[str, Any]]] = {}

    def list(self) -> dict[str, Any]:
        """ListPodResourcesResponse, as json_format.MessageToDict gives it."""
        return self._call(LIST_METHOD, "ListPodResourcesRequest", "ListPodResourcesResponse")

    def allocatable(self) -> dict[str, Any]:
        """AllocatableResourcesResponse, as json_format.MessageToDict gives it."""
        return self._call(ALLOCATABLE_METHOD, "AllocatableResourcesRequest", "AllocatableResourcesResponse")

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._calls = {}

    def _call(self, method: str, request: str, response: str) -> dict[str, Any]:
        with self._lock:
            if self._channel is None:
                self._check_socket()
                self._channel = self.grpc.insecure_channel(
                    f"unix:{self.socket_path}",
                    options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), ("grpc.enable_retries", 0)],
                )
            call = self._calls.get(method)
            if call is None:
                call = self._channel.unary_unary(
                    method,
                    request_serializer=self.messages[request].SerializeToString,
                    response_deserializer=bytes,
                )
                self._calls[method] = call
            try:
                reply = call(self.messages[request](), timeout=self.timeout_s)
            except self.grpc.RpcError as exc:
                error = self._error(method, exc)
                if not isinstance(error, MethodUnimplementedError):
                    self._drop()
                raise error from None
        last = self._last.get(method)
        if last is not None and last[0] == reply:
            return last[1]
        try:
            message = self.messages[response].FromString(reply)
        except Exception as exc:  # DecodeError: not this API's message
            raise BackendError(
                f"the kubelet's {method} answer is not a {response}: {exc}", fix="check the kubelet's version and log"
            ) from None
        result: dict[str, Any] = self.json_format.MessageToDict(message)
        self._last[method] = (reply, result)
        return result

    def _check_socket(self) -> None:
        """Say plainly what is wrong with the socket before gRPC says it as a connection failure."""
        path = self.socket_path
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise BackendError(f"the kubelet's pod-resources socket {path} does not exist", fix=MOUNT_FIX) from None
        except PermissionError:
            raise BackendError(
                f"cannot reach the kubelet's pod-resources socket {path}: permission denied on its directory",
                fix="run the agent as root (the kubelet makes the directory root-only)",
            ) from None
        except OSError as exc:
            raise BackendError(
                f"cannot reach the kubelet's pod-resources socket {path}: {exc.strerror}", fix=MOUNT_FIX
            ) from None
        if not stat.S_ISSOCK(mode):
            raise BackendError(f"{path} is not a socket, so not the kubelet's pod-resources socket", fix=MOUNT_FIX)
        if not os.access(path, os.R_OK | os.W_OK):
            raise BackendError(
                f"cannot connect to the kubelet's pod-resources socket {path}: permission denied",
                fix="run the agent as root (the socket belongs to root and connecting needs write permission)",
            )

    def _error(self, method: str, exc: Any) -> BackendError:
        grpc = self.grpc
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        details = (exc.details() if callable(getattr(exc, "details", None)) else "") or ""
        name = method.rsplit("/", 1)[-1]
        path = self.socket_path
        if code == grpc.StatusCode.UNIMPLEMENTED:
            if method == ALLOCATABLE_METHOD:
                return MethodUnimplementedError(
                    "the kubelet does not serve GetAllocatableResources",
                    fix="upgrade the kubelet to 1.23 or later, or on 1.21-1.22 enable its feature gate "
                    "KubeletPodResourcesGetAllocatable",
                )
            return MethodUnimplementedError(
                f"the kubelet does not serve {SERVICE}/{name}",
                fix="use a kubelet of 1.20 or later (the v1 pod-resources API)",
            )
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return BackendError(
                f"the kubelet's pod-resources API did not answer {name} within {self.timeout_s:g} s ({path})",
                fix="check the kubelet on this node is running and not overloaded (systemctl status kubelet), "
                "or allow a longer timeout",
            )
        if "permission denied" in details.lower():
            return BackendError(
                f"cannot connect to the kubelet's pod-resources socket {path}: permission denied",
                fix="run the agent as root (the socket belongs to root)",
            )
        if code == grpc.StatusCode.UNAVAILABLE:
            return BackendError(
                f"the kubelet's pod-resources socket {path} does not answer: {details or 'unavailable'}",
                fix="check the kubelet on this node is running (it recreates the socket when it restarts); "
                + MOUNT_FIX,
            )
        return BackendError(
            f"the kubelet's pod-resources API failed {name}: {getattr(code, 'name', code)}: {details}",
            fix="see the kubelet's log on this node",
        )


# ---- the reader ------------------------------------------------------------------------------------------------


class PodResourcesAPI(Protocol):
    """What the reader needs of a client (PodResourcesClient; a fake in tests, or the twin's)."""

    def list(self) -> Mapping[str, Any]: ...

    def allocatable(self) -> Mapping[str, Any]: ...

    def close(self) -> None: ...


class PodResourcesReader:
    """The agent's allotment reader over pod-resources: List every read, GetAllocatableResources at most every
    `allocatable_every_s` (its answer changes only with a device plugin's configuration). A kubelet without
    GetAllocatableResources is said once; replicas then come from the IDs List names alone (attribution counts
    the `::<n>` replicas it sees)."""

    name = "pod-resources"
    # How long the agent keeps an answer while no process starts or ends on a GPU and the pod list stays the same
    # (agent.attribution). The kubelet's allotments change only when a pod is admitted or removed; a pod's first
    # process and last exit show in NVML's lists and a pod that starts or ends in the pod list, both read anyway, and
    # either has List asked again at once. Only a pod given a device it runs no process on waits this long, the pod
    # list's own refresh (CgroupOwners.refresh_s). A List over gRPC costs more than the rest of attribution.
    keep_s = 10.0

    def __init__(
        self,
        socket_path: str | os.PathLike[str] = DEFAULT_SOCKET,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        allocatable_every_s: float = ALLOCATABLE_EVERY_S,
        resources: Collection[str] = GPU_RESOURCES,
        client: PodResourcesAPI | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client: PodResourcesAPI = (
            client if client is not None else PodResourcesClient(socket_path, timeout_s=timeout_s)
        )
        self.allocatable_every_s = allocatable_every_s
        self.resources = resources
        self.clock = clock
        self._replicas: dict[str, int] = {}
        self._replicas_at: float | None = None
        self._no_allocatable = False
        self._said: set[str] = set()
        self._listed: tuple[Mapping[str, Any], ListReading] | None = None  # the last answer and what it read

    def read(self) -> Allotments:
        try:
            answer = self.client.list()
        except GpufleetError:
            # ask GetAllocatableResources again once the kubelet answers: it may come back upgraded or reconfigured
            self._replicas_at = None
            self._no_allocatable = False
            raise
        if self._listed is not None and self._listed[0] is answer:  # the client's unchanged answer
            listing = self._listed[1]
        else:
            listing = parse_list(answer, self.resources)
            self._listed = (answer, listing)
        self._say_each(listing.skipped)
        return Allotments(listing.allotments, self._allocatable())

    def close(self) -> None:
        self.client.close()

    def _allocatable(self) -> dict[str, int]:
        if self._no_allocatable:
            return {}
        now = self.clock()
        if self._replicas_at is not None and now - self._replicas_at < self.allocatable_every_s:
            return dict(self._replicas)
        try:
            reading = parse_allocatable(self.client.allocatable(), self.resources)
        except MethodUnimplementedError as exc:
            self._say(f"pod-resources: {exc.message} ({exc.fix}); replicas are counted from the IDs List names")
            self._no_allocatable = True
            self._replicas = {}
            return {}
        except GpufleetError as exc:  # List answered: keep its allotments and the replicas last read
            self._say(f"pod-resources: GetAllocatableResources failed, replicas are the last read: {exc}")
            return dict(self._replicas)
        self._say_each(reading.skipped)
        self._replicas, self._replicas_at = reading.replicas, now
        return dict(self._replicas)

    def _say(self, line: str) -> None:
        if line not in self._said:  # each once, not every collection
            if len(self._said) >= MAX_SAID:
                self._said.clear()
            self._said.add(line)
            log.warning("%s", line)

    def _say_each(self, lines: tuple[str, ...]) -> None:
        for line in lines:
            self._say(f"pod-resources: skipped {line}")
