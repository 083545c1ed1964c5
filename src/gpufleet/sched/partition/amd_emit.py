"""What an AMD partition plan produces: the AMD GPU Operator's Device Config Manager (DCM) ConfigMap, the
`dcm.amd.com/gpu-config-profile` node labels, what the device plugin will advertise, and the steps of the change.

The ConfigMap is DCM's documented shape: `data.config.json` holds `gpu-config-profiles`, each profile a list of
{computePartition, memoryPartition, numGPUsAssigned} entries (plus `skippedGPUs.ids`) that must add up to the node's
GPUs, and `gpuClientSystemdServices.names`, the host services DCM stops before it repartitions. A node takes a
profile when labelled `dcm.amd.com/gpu-config-profile=<name>`; before that it is tainted `amd-dcm=up:NoExecute` so
that no GPU client is left, and the taint comes off when DCM is done. Modes DCM does not apply (DPX, QPX, planned
with kernel modes) are set on the node with amd-smi instead.
"""

from __future__ import annotations

import json
from typing import Any

from gpufleet.catalog.vendors import get_vendor
from gpufleet.errors import InternalError
from gpufleet.sched.partition.amd_partition import PARTITION_LABEL, Naming, advertised, dcm_profile_problems
from gpufleet.sched.partition.amd_plan import DCM_TAINT, AmdPlan, NodeChoice

DCM_LABEL = "dcm.amd.com/gpu-config-profile"
DCM_CONFIGMAP = "config-manager-config"
DCM_NAMESPACE = get_vendor("amd").device_plugin_namespace  # kube-amd-gpu
GPU_CLIENT_SERVICES = ("amd-metrics-exporter", "gpuagent")  # what DCM stops on the host (its documented example)


def _taint(remove: bool = False) -> str:
    return f"{DCM_TAINT.key}={DCM_TAINT.value}:{DCM_TAINT.effect}" + ("-" if remove else "")


def dcm_profiles(plan: AmdPlan) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """DCM profiles for every node whose planned mode DCM applies, and the profile each such node is labelled with.

    A profile is named after its mode (`cpx-nps4`); when nodes of different GPU counts share a mode, after the count
    too (`cpx-nps4-4gpu`), since a profile's entries must add up to the node's GPUs."""
    dcm = [c for c in plan.choices if c.target.dcm_valid]
    counts: dict[str, set[int]] = {}
    for c in dcm:
        counts.setdefault(c.target.name, set()).add(c.gpus)
    profiles: dict[str, dict[str, Any]] = {}
    labels: dict[str, str] = {}
    for c in dcm:
        name = f"{c.target.compute}-{c.target.memory}".lower()
        if len(counts[c.target.name]) > 1:
            name += f"-{c.gpus}gpu"
        entry = {"computePartition": c.target.compute, "memoryPartition": c.target.memory, "numGPUsAssigned": c.gpus}
        problems = dcm_profile_problems([(c.target.compute, c.target.memory, c.gpus)], c.gpus)
        if problems:
            raise InternalError(f"profile {name} for {c.node} fails DCM's checks: {'; '.join(problems)}")
        profiles[name] = {"skippedGPUs": {"ids": []}, "profiles": [entry]}
        labels[c.node] = name
    return dict(sorted(profiles.items())), labels


def dcm_config(plan: AmdPlan) -> dict[str, Any]:
    profiles, _ = dcm_profiles(plan)
    return {"gpu-config-profiles": profiles, "gpuClientSystemdServices": {"names": list(GPU_CLIENT_SERVICES)}}


def dcm_configmap(plan: AmdPlan, namespace: str = DCM_NAMESPACE, name: str = DCM_CONFIGMAP) -> dict[str, Any]:
    """The ConfigMap the DeviceConfig's `spec.configManager.config.name` points at."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"config.json": json.dumps(dcm_config(plan), indent=2) + "\n"},
    }


def advertised_after(plan: AmdPlan, naming: Naming = "single") -> dict[str, dict[str, int]]:
    """Per node: the allocatable the AMD device plugin reports once the plan is applied."""
    return {c.node: advertised(c.model, [c.target] * c.gpus, naming) for c in plan.choices}


def _amd_smi(c: NodeChoice) -> list[str]:
    steps = []
    if c.target.memory != c.current.memory:
        steps.append(f"amd-smi set -g all -M {c.target.memory}  # reloads the amdgpu driver")
    if c.target.compute != c.current.compute:
        steps.append(f"amd-smi set -g all -C {c.target.compute}")
    return [f"# on {c.node}: {s}" for s in steps]


def commands(plan: AmdPlan) -> list[str]:
    """kubectl steps per changed node: taint (evicts every pod without the toleration), label the profile, wait for
    the node labeller to report the new mode (its partition labels must be enabled), untaint."""
    _, labels = dcm_profiles(plan)
    out: list[str] = []
    for c in plan.changed:
        out.append(f"kubectl taint nodes {c.node} {_taint()}")
        for pod in c.kept:
            namespace, name = pod.split("/", 1)
            out.append(f"kubectl delete pod -n {namespace} {name}  # on the GPUs, tolerates {DCM_TAINT.key}")
        if c.node in labels:
            out.append(f"kubectl label node {c.node} {DCM_LABEL}={labels[c.node]} --overwrite")
        else:
            out += _amd_smi(c)
        key = PARTITION_LABEL.replace(".", "\\.")
        out.append(
            f"kubectl wait node/{c.node} --for=jsonpath='{{.metadata.labels.{key}}}'={c.target.name} --timeout=30m"
        )
        out.append(f"kubectl taint nodes {c.node} {_taint(remove=True)}")
    return out


def summary(plan: AmdPlan, naming: Naming = "single") -> dict[str, Any]:
    """The plan as plain data (what `-o json|yaml` prints)."""
    _, labels = dcm_profiles(plan)
    after = advertised_after(plan, naming)
    return {
        "demand": plan.demand,
        "provided": plan.provided,
        "optimal": plan.optimal,
        "dcmOnly": plan.dcm_only,
        "resourceNamingStrategy": naming,
        "nodes": [
            {
                "node": c.node,
                "gpuModel": c.model.name,
                "gpus": c.gpus,
                "current": c.current.name,
                "target": c.target.name,
                "changed": c.changed,
                "driverReload": c.driver_reload,
                "logicalGpus": c.logical_gpus,
                "cusEach": c.target.cus_each,
                "memoryMiBEach": c.target.memory_mib,
                "advertised": after[c.node],
                "dcmProfile": labels.get(c.node),
                "drain": {"gpuPods": c.gpu_pods, "evicted": c.evicted, "tolerating": c.kept} if c.changed else None,
            }
            for c in plan.choices
        ],
        # only the nodes that change: labelling a node makes DCM stop its GPU clients and apply the profile
        "nodeLabels": {c.node: {DCM_LABEL: labels[c.node]} for c in plan.changed if c.node in labels},
        "taint": _taint(),
        "dcmConfigMap": dcm_configmap(plan),
        "commands": commands(plan),
    }
