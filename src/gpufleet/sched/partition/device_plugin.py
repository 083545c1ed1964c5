"""The NVIDIA k8s-device-plugin config (api/config/v1) as pydantic models, and its resource naming rules.

The models accept the plugin's real YAML (camelCase keys, `version: v1`); `render_config` writes it back. Resource
names follow the plugin: `nvidia.com/gpu` for full GPUs (and for MIG devices under the `single` strategy),
`nvidia.com/mig-<profile>` under `mixed` with `+` written as `.`, and `<name>.shared` when a shared resource is
renamed by default.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpufleet import yaml_input
from gpufleet.errors import ManifestError
from gpufleet.spec.base import explain_validation

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SHARED_SUFFIX = ".shared"


class MigStrategy(StrEnum):
    none = "none"
    single = "single"
    mixed = "mixed"


class SharingStrategy(StrEnum):
    """The value of the `nvidia.com/gpu.sharing-strategy` label."""

    none = "none"
    time_slicing = "time-slicing"
    mps = "mps"


def mig_resource_name(profile: str) -> str:
    """`1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`, as the plugin names mixed-strategy resources."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PluginFlags(_Config):
    pass_device_specs: bool | None = Field(None, alias="passDeviceSpecs")
    device_list_strategy: str | list[str] | None = Field(None, alias="deviceListStrategy")
    device_id_strategy: Literal["uuid", "index"] | None = Field(None, alias="deviceIDStrategy")
    cdi_annotation_prefix: str | None = Field(None, alias="cdiAnnotationPrefix")
    nvidia_ctk_path: str | None = Field(None, alias="nvidiaCTKPath")
    container_driver_root: str | None = Field(None, alias="containerDriverRoot")
    shared_devices_allocation_policy: Literal["distributed", "packed"] | None = Field(
        None, alias="sharedDevicesAllocationPolicy"
    )


class GfdFlags(_Config):
    oneshot: bool | None = None
    no_timestamp: bool | None = Field(None, alias="noTimestamp")
    sleep_interval: str | None = Field(None, alias="sleepInterval")
    output_file: str | None = Field(None, alias="outputFile")
    machine_type_file: str | None = Field(None, alias="machineTypeFile")


class Flags(_Config):
    mig_strategy: MigStrategy | None = Field(None, alias="migStrategy")
    fail_on_init_error: bool | None = Field(None, alias="failOnInitError")
    mps_root: str | None = Field(None, alias="mpsRoot")
    nvidia_driver_root: str | None = Field(None, alias="nvidiaDriverRoot")
    nvidia_dev_root: str | None = Field(None, alias="nvidiaDevRoot")
    gds_enabled: bool | None = Field(None, alias="gdsEnabled")
    mofed_enabled: bool | None = Field(None, alias="mofedEnabled")
    use_node_feature_api: bool | None = Field(None, alias="useNodeFeatureAPI")
    device_discovery_strategy: str | None = Field(None, alias="deviceDiscoveryStrategy")
    plugin: PluginFlags | None = None
    gfd: GfdFlags | None = None


class ReplicatedResource(_Config):
    name: str
    rename: str | None = None
    devices: str | int | list[int | str] | None = None
    replicas: int = Field(ge=2)


class ReplicatedResources(_Config):
    rename_by_default: bool | None = Field(None, alias="renameByDefault")
    fail_requests_greater_than_one: bool | None = Field(None, alias="failRequestsGreaterThanOne")
    resources: list[ReplicatedResource] = Field(min_length=1)


class Sharing(_Config):
    time_slicing: ReplicatedResources | None = Field(None, alias="timeSlicing")
    mps: ReplicatedResources | None = None

    @model_validator(mode="after")
    def _one_strategy(self) -> Sharing:
        if self.time_slicing is not None and self.mps is not None:
            raise ValueError("timeSlicing and mps are mutually exclusive")
        return self

    @property
    def strategy(self) -> SharingStrategy:
        if self.mps is not None:
            return SharingStrategy.mps
        if self.time_slicing is not None:
            return SharingStrategy.time_slicing
        return SharingStrategy.none

    @property
    def replicated(self) -> ReplicatedResources | None:
        return self.mps or self.time_slicing

    @property
    def fail_requests_greater_than_one(self) -> bool:
        """Unset means false for time-slicing and true for MPS (the plugin keeps MPS's historical behaviour)."""
        rep = self.replicated
        if rep is None:
            return False
        if rep.fail_requests_greater_than_one is None:
            return self.mps is not None
        return rep.fail_requests_greater_than_one

    def replicas_for(self, resource: str) -> ReplicatedResource | None:
        rep = self.replicated
        if rep is None:
            return None
        return next((r for r in rep.resources if r.name == resource), None)

    def shared_name(self, resource: str) -> str:
        """The name a replicated resource is advertised under: its `rename`, or `<name>.shared` by default."""
        entry = self.replicas_for(resource)
        rep = self.replicated
        if entry is None or rep is None:
            return resource
        if entry.rename:
            return entry.rename
        return resource + SHARED_SUFFIX if rep.rename_by_default else resource

    def is_renamed(self, resource: str) -> bool:
        return self.shared_name(resource) != resource


class DevicePluginConfig(_Config):
    version: Literal["v1"]
    flags: Flags = Flags()
    sharing: Sharing = Sharing()

    @property
    def mig_strategy(self) -> MigStrategy:
        return self.flags.mig_strategy or MigStrategy.none


def load_config(text: str, source: str = "device-plugin config") -> DevicePluginConfig:
    doc = yaml_input.load(text, source)
    if not isinstance(doc, dict):
        raise ManifestError(source, "expected a mapping with `version: v1`", fix="start the file with `version: v1`")
    if doc.get("version") != "v1":
        raise ManifestError(source, f"unknown version {doc.get('version')!r}", fix="set `version: v1`")
    try:
        return DevicePluginConfig.model_validate(doc)
    except ValidationError as exc:
        raise explain_validation(source, DevicePluginConfig, exc) from None


def render_config(config: DevicePluginConfig) -> str:
    return yaml.safe_dump(config.model_dump(by_alias=True, exclude_none=True, mode="json"), sort_keys=False)


def build_config(
    *,
    mig_strategy: MigStrategy = MigStrategy.none,
    time_slicing: int | None = None,
    mps: int | None = None,
    rename: bool = False,
    fail_requests_greater_than_one: bool | None = None,
    resources: tuple[str, ...] = (GPU_RESOURCE,),
) -> DevicePluginConfig:
    """A config with one sharing section: `time_slicing` or `mps` replicas for each of `resources`."""
    if time_slicing is not None and mps is not None:
        raise ManifestError("device-plugin config", "time-slicing and MPS are mutually exclusive", fix="pick one")
    flags = Flags(mig_strategy=mig_strategy, fail_on_init_error=True)
    replicas = time_slicing or mps
    if replicas is None:
        return DevicePluginConfig(version="v1", flags=flags)
    try:
        section = ReplicatedResources(
            rename_by_default=rename,
            fail_requests_greater_than_one=fail_requests_greater_than_one,
            resources=[ReplicatedResource(name=r, replicas=replicas) for r in resources],
        )
    except ValidationError:
        raise ManifestError(
            "device-plugin config", f"replicas must be at least 2, got {replicas}", fix="pass 2 or more"
        ) from None
    sharing = Sharing(time_slicing=section) if time_slicing is not None else Sharing(mps=section)
    return DevicePluginConfig(version="v1", flags=flags, sharing=sharing)


def configmap(name: str, configs: dict[str, DevicePluginConfig], namespace: str = "gpu-operator") -> dict[str, object]:
    """A ConfigMap holding named configs, as the plugin's `config.map` / GPU Operator `devicePlugin.config` expect.

    Nodes pick a key with the `nvidia.com/device-plugin.config=<key>` label.
    """
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: render_config(cfg) for key, cfg in configs.items()},
    }


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (configs inside ConfigMaps) as `|` blocks, as people write them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def dump_manifests(docs: list[dict[str, Any]]) -> str:
    return yaml.dump_all(docs, Dumper=_BlockDumper, sort_keys=False)
