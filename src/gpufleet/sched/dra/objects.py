"""Dynamic Resource Allocation objects in their resource.k8s.io/v1 shapes (Kubernetes 1.34+).

DeviceClass, ResourceClaim, ResourceClaimTemplate and ResourceSlice accept the real JSON/YAML (camelCase keys) and
dump back to it with `to_k8s()`. Unknown keys are errors, so a typo names the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gpufleet.errors import ManifestError
from gpufleet.spec.base import read_yaml_documents, validate_as

API_VERSION: Literal["resource.k8s.io/v1"] = "resource.k8s.io/v1"
MAX_DEVICES_PER_SLICE = 128
MAX_SELECTORS = 32
MAX_ATTRIBUTES_AND_CAPACITIES = 32


class K8s(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel)

    def to_k8s(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def _quantity_text(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


class ObjectMeta(K8s):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    finalizers: list[str] | None = None
    owner_references: list[dict[str, Any]] | None = None
    managed_fields: list[dict[str, Any]] | None = None


class CELDeviceSelector(K8s):
    expression: str = Field(max_length=10 * 1024)


class DeviceSelector(K8s):
    cel: CELDeviceSelector | None = None


class OpaqueDeviceConfiguration(K8s):
    driver: str
    parameters: dict[str, Any]


class DeviceClassConfiguration(K8s):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(K8s):
    selectors: list[DeviceSelector] | None = Field(None, max_length=MAX_SELECTORS)
    config: list[DeviceClassConfiguration] | None = None
    extended_resource_name: str | None = None


class DeviceClass(K8s):
    api_version: Literal["resource.k8s.io/v1"] = API_VERSION
    kind: Literal["DeviceClass"] = "DeviceClass"
    metadata: ObjectMeta
    spec: DeviceClassSpec


class DeviceToleration(K8s):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class CapacityRequirements(K8s):
    requests: dict[str, str] | None = None

    @field_validator("requests", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return {k: _quantity_text(v) for k, v in value.items()} if isinstance(value, dict) else value


class _RequestBody(K8s):
    device_class_name: str
    selectors: list[DeviceSelector] | None = Field(None, max_length=MAX_SELECTORS)
    allocation_mode: Literal["ExactCount", "All"] | None = None
    count: int | None = Field(None, ge=1)
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    capacity: CapacityRequirements | None = None

    @model_validator(mode="after")
    def _count_only_exact(self) -> _RequestBody:
        if self.allocation_mode == "All" and self.count is not None:
            raise ValueError("count must not be set when allocationMode is All")
        return self

    @property
    def wanted(self) -> int | None:
        """Devices wanted; None means all matching devices."""
        return None if self.allocation_mode == "All" else (self.count or 1)


class ExactDeviceRequest(_RequestBody):
    pass


class DeviceSubRequest(_RequestBody):
    name: str


class DeviceRequest(K8s):
    name: str
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] | None = Field(None, max_length=8)

    @model_validator(mode="after")
    def _one_form(self) -> DeviceRequest:
        if (self.exactly is None) == (self.first_available is None):
            raise ValueError(f"request {self.name!r} must set exactly one of `exactly` and `firstAvailable`")
        return self


class DeviceConstraint(K8s):
    requests: list[str] | None = None
    match_attribute: str | None = None
    distinct_attribute: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> DeviceConstraint:
        if (self.match_attribute is None) == (self.distinct_attribute is None):
            raise ValueError("a constraint sets exactly one of matchAttribute and distinctAttribute")
        return self


class DeviceClaimConfiguration(K8s):
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(K8s):
    requests: list[DeviceRequest] | None = None
    constraints: list[DeviceConstraint] | None = None
    config: list[DeviceClaimConfiguration] | None = None


class ResourceClaimSpec(K8s):
    devices: DeviceClaim | None = None


class DeviceRequestAllocationResult(K8s):
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    share_id: str | None = Field(None, alias="shareID")
    consumed_capacity: dict[str, str] | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None


class DeviceAllocationConfiguration(K8s):
    source: Literal["FromClass", "FromClaim"]
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(K8s):
    results: list[DeviceRequestAllocationResult] | None = None
    config: list[DeviceAllocationConfiguration] | None = None


class NodeSelectorRequirement(K8s):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] | None = None


class NodeSelectorTerm(K8s):
    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(K8s):
    node_selector_terms: list[NodeSelectorTerm]


class AllocationResult(K8s):
    devices: DeviceAllocationResult | None = None
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None


class ResourceClaimConsumerReference(K8s):
    api_group: str | None = None
    resource: str
    name: str
    uid: str


class ResourceClaimStatus(K8s):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] | None = None
    devices: list[dict[str, Any]] | None = None


class ResourceClaim(K8s):
    api_version: Literal["resource.k8s.io/v1"] = API_VERSION
    kind: Literal["ResourceClaim"] = "ResourceClaim"
    metadata: ObjectMeta
    spec: ResourceClaimSpec
    status: ResourceClaimStatus | None = None


class ResourceClaimTemplateSpec(K8s):
    metadata: ObjectMeta | None = None
    spec: ResourceClaimSpec


class ResourceClaimTemplate(K8s):
    api_version: Literal["resource.k8s.io/v1"] = API_VERSION
    kind: Literal["ResourceClaimTemplate"] = "ResourceClaimTemplate"
    metadata: ObjectMeta
    spec: ResourceClaimTemplateSpec

    def instantiate(self, name: str, namespace: str | None = None) -> ResourceClaim:
        """The ResourceClaim a pod's `resourceClaimTemplateName` produces."""
        meta = self.spec.metadata.model_copy() if self.spec.metadata else ObjectMeta()
        meta.name, meta.namespace = name, namespace or self.metadata.namespace
        return ResourceClaim(metadata=meta, spec=self.spec.spec.model_copy(deep=True))


class DeviceAttribute(K8s):
    int_: int | None = Field(None, alias="int")
    bool_: bool | None = Field(None, alias="bool")
    string: str | None = Field(None, max_length=64)
    version: str | None = Field(None, max_length=64)

    @model_validator(mode="after")
    def _exactly_one(self) -> DeviceAttribute:
        if sum(v is not None for v in (self.int_, self.bool_, self.string, self.version)) != 1:
            raise ValueError("a device attribute sets exactly one of int, bool, string and version")
        return self


class DeviceCapacity(K8s):
    value: str
    request_policy: dict[str, Any] | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _quantity_text(value)


class DeviceTaint(K8s):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute"]
    time_added: str | None = None


class Counter(K8s):
    value: str

    @field_validator("value", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _quantity_text(value)


class CounterSet(K8s):
    name: str
    counters: dict[str, Counter]


class DeviceCounterConsumption(K8s):
    counter_set: str
    counters: dict[str, Counter]


class Device(K8s):
    name: str
    attributes: dict[str, DeviceAttribute] | None = None
    capacity: dict[str, DeviceCapacity] | None = None
    consumes_counters: list[DeviceCounterConsumption] | None = None
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: list[DeviceTaint] | None = None
    binds_to_node: bool | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    allow_multiple_allocations: bool | None = None

    @model_validator(mode="after")
    def _limits(self) -> Device:
        n = len(self.attributes or {}) + len(self.capacity or {})
        if n > MAX_ATTRIBUTES_AND_CAPACITIES:
            raise ValueError(f"device {self.name!r} has {n} attributes and capacities; at most 32 are allowed")
        return self


class ResourcePool(K8s):
    name: str
    generation: int
    resource_slice_count: int = Field(ge=1)


class ResourceSliceSpec(K8s):
    driver: str
    pool: ResourcePool
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    devices: list[Device] | None = Field(None, max_length=MAX_DEVICES_PER_SLICE)
    shared_counters: list[CounterSet] | None = None

    @model_validator(mode="after")
    def _one_node_choice(self) -> ResourceSliceSpec:
        chosen = [self.node_name, self.node_selector, self.all_nodes, self.per_device_node_selection]
        if sum(v is not None and v is not False for v in chosen) != 1:
            raise ValueError("set exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection")
        return self


class ResourceSlice(K8s):
    api_version: Literal["resource.k8s.io/v1"] = API_VERSION
    kind: Literal["ResourceSlice"] = "ResourceSlice"
    metadata: ObjectMeta
    spec: ResourceSliceSpec


DRA_KINDS: dict[str, type[K8s]] = {
    "DeviceClass": DeviceClass,
    "ResourceClaim": ResourceClaim,
    "ResourceClaimTemplate": ResourceClaimTemplate,
    "ResourceSlice": ResourceSlice,
}


def parse_dra_object(doc: dict[str, Any], source: str = "(document)") -> K8s:
    kind = doc.get("kind")
    if doc.get("apiVersion") != API_VERSION:
        raise ManifestError(
            source, f"apiVersion {doc.get('apiVersion')!r} is not {API_VERSION}", fix=f"use {API_VERSION}"
        )
    model = DRA_KINDS.get(str(kind))
    if model is None:
        raise ManifestError(source, f"unknown DRA kind {kind!r}", fix=f"use one of: {', '.join(DRA_KINDS)}")
    return validate_as(source, model, doc)


def load_dra_objects(path: Path) -> list[K8s]:
    """Every DRA object in a YAML file (several documents, or a `kind: List` with items)."""
    out: list[K8s] = []
    for doc in read_yaml_documents(path):
        items = doc.get("items") if doc.get("kind", "").endswith("List") else [doc]
        for item in items or []:
            out.append(parse_dra_object(item, str(path)))
    return out
