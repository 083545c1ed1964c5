"""The Helm chart as real Helm renders it (helm-python-sdk): lint, the defaults and the example values, every object
valid for Kubernetes 1.30 and 1.33, the ServiceMonitor finding the agents, the least privilege the agent runs with,
and RBAC equal to the API calls the code makes."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import httpx
import pytest
import typer
import yaml

from gpufleet import __version__
from gpufleet.cli.agent import register as register_agent
from gpufleet.cli.server import register as register_server
from gpufleet.cost.config import CostConfig
from gpufleet.deploy import rbac
from gpufleet.deploy.chart import chart_dir
from gpufleet.deploy.render import (
    HEADER,
    Manifest,
    files,
    kube_version,
    load_values,
    render,
    to_json,
    to_yaml,
    validate,
    write,
)
from gpufleet.errors import DependencyMissingError, ManifestError, UserError
from gpufleet.sources.workload import kubelet_pods
from gpufleet.telemetry.exposition.config import workload_series_settings
from tests.conftest import REPO_ROOT

CHART = REPO_ROOT / "deploy" / "helm" / "gpufleet"
EXAMPLE = REPO_ROOT / "deploy" / "kubernetes" / "values.yaml"
MANIFESTS = REPO_ROOT / "deploy" / "kubernetes" / "manifests"
KUBE_VERSIONS = ["1.30", "1.33"]
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def example_values() -> dict[str, Any]:
    return load_values(EXAMPLE.read_text(), str(EXAMPLE))


# Value sets that switch on what the defaults leave off, so every branch of the templates is rendered and checked.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "example": example_values(),
    "sqlite-one-replica": {
        "server": {
            "replicas": 1,
            "postgresql": {"enabled": False},
            "persistence": {"enabled": True, "storageClassName": "fast"},
            "backend": "none",
            "tls": {"secretName": "gpufleet-tls"},
        },
        "agent": {
            "kernelLog": {"source": "kmsg", "privileged": True},
            "infiniband": {"enabled": False},
            "dataHostPath": "",
        },
    },
    "watch-with-own-affinity": {
        "agent": {
            "workloadWatch": {"enabled": True, "kueue": False},
            "podResources": {"enabled": False},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]},
                            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a100"]}]},
                        ]
                    }
                }
            },
        },
        "serviceMonitor": {"enabled": False},
        "prometheusRule": {"enabled": False},
        "dashboards": {"enabled": False},
    },
    "agents-only": {
        "server": {"enabled": False},
        "agent": {"controlPlane": {"url": "https://gpufleet.example.com:8470"}},
    },
    "attribution-from-kubelet": {
        "agent": {
            "workloadWatch": {"enabled": True},
            "attribution": {
                "podList": "kubelet",
                "workloadSeries": ["sharing:all", "namespace:ml-train"],
                "workloadSeriesBudget": 500,
            },
        },
    },
    "no-attribution": {"agent": {"attribution": {"enabled": False}}},
    "node-actions": {
        "agent": {
            "nodeActions": {"enabled": True, "commands": {"reset-gpu": "nvidia-smi -r -i {gpu}"}},
            "token": {"enroll": False},
        }
    },
    "cost-config": {
        "cost": {
            "config": {
                "default_usd_per_gpu_hour": 2.5,
                "prices": [{"model": "h100-sxm", "provider": "aws", "offering": "on-demand", "usd_per_gpu_hour": 6.88}],
            }
        },
        "agent": {"workloadWatch": {"enabled": True}},
    },
}


def objects(values: dict[str, Any], version: str = "1.33") -> list[Manifest]:
    return render(values, source="test values", version=version).manifests


def find(manifests: list[Manifest], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [m.obj for m in manifests if m.kind == kind and (name is None or m.name == name)]
    assert len(matches) == 1, f"{kind} {name}: {len(matches)} found"
    return matches[0]


def pod_specs(manifests: list[Manifest]) -> list[dict[str, Any]]:
    return [m.obj["spec"]["template"]["spec"] for m in manifests if m.kind in ("DaemonSet", "Deployment")]


# --- the chart as Helm sees it -----------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_lint_strict_has_no_errors_or_warnings(variant: str) -> None:
    for version in ("v1.30.0", "v1.33.0"):
        report = helm.lint(str(CHART), values=VARIANTS[variant], strict=True, kube_version=version)
        assert report["errors"] == []
        # severity 1 is information (Helm recommends an icon, which this chart has none of); 2+ would be warnings
        assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_chart_metadata() -> None:
    with helm.Chart.load(str(CHART)) as chart:
        meta = chart.metadata
        assert chart.schema is not None and chart.schema["additionalProperties"] is False
    assert meta["apiVersion"] == "v2" and meta["name"] == "gpufleet"
    assert meta["appVersion"] == __version__  # the image tag defaults to it
    assert chart_dir() == CHART
    for name in ("values.yaml", "values.schema.json", "templates/_helpers.tpl", "templates/NOTES.txt"):
        assert (CHART / name).is_file(), name


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_is_valid_for_kubernetes(variant: str, version: str) -> None:
    """render() checks each object with kubernetes-validate (strict); only the Prometheus Operator's custom
    resources, which Kubernetes' schemas do not describe, go unchecked."""
    rendered = render(VARIANTS[variant], version=version)
    assert rendered.kube_version == version
    assert {m.kind for m in rendered.unchecked} <= {"ServiceMonitor", "PrometheusRule"}
    assert rendered.manifests and all(m.obj["apiVersion"] and m.name for m in rendered.manifests)


def test_defaults_render_the_core() -> None:
    rendered = render({})
    kinds = sorted(m.kind for m in rendered.manifests)
    assert kinds == [
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
        "Deployment",
        "PodDisruptionBudget",
        "PrometheusRule",
        "Service",
        "Service",
        "ServiceAccount",
        "ServiceAccount",
        "ServiceMonitor",
    ]
    assert "kubectl -n gpufleet create secret generic gpufleet-agent-token" in rendered.notes
    deployment = find(rendered.manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    state = next(
        e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "GPUFLEET_STATE"
    )
    assert state["valueFrom"]["secretKeyRef"] == {"name": "gpufleet-postgresql", "key": "dsn"}
    assert find(rendered.manifests, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    service = find(rendered.manifests, "Service", "gpufleet-server")
    assert [p["port"] for p in service["spec"]["ports"]] == [8470]


def test_rendering_is_repeatable() -> None:
    assert to_yaml(objects(example_values())) == to_yaml(objects(example_values()))


def test_committed_plain_manifests_are_current() -> None:
    """deploy/kubernetes/manifests is what `gpufleet deploy render -f deploy/kubernetes/values.yaml` makes now."""
    want = files(objects(example_values()))
    have = {p.name: p.read_text() for p in MANIFESTS.glob("*.yaml")}
    assert sorted(have) == sorted(want), (
        "regenerate: gpufleet deploy render -f deploy/kubernetes/values.yaml --out deploy/kubernetes/manifests"
    )
    for name, text in want.items():
        assert have[name] == text, f"{name} is stale: render deploy/kubernetes/values.yaml again"


def test_prometheus_rule_holds_the_generated_groups() -> None:
    rule = find(objects({}), "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "gpufleet-rules.yml").read_text())
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    custom = find(objects({"prometheusRule": {"labels": {"release": "monitoring"}}}), "PrometheusRule")
    assert custom["metadata"]["labels"]["release"] == "monitoring"


def test_dashboards_config_map_holds_the_generated_dashboards() -> None:
    config_map = find(objects({}), "ConfigMap", "gpufleet-dashboards")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    boards = sorted((CHART / "files" / "dashboards").glob("*.json"))
    assert sorted(config_map["data"]) == [b.name for b in boards]
    for board in boards:
        assert yaml.safe_load(config_map["data"][board.name]) == yaml.safe_load(board.read_text())
    relabelled = objects({"dashboards": {"labels": {"dashboards": "gpu"}, "namespace": "grafana"}})
    moved = find(relabelled, "ConfigMap", "gpufleet-dashboards")
    assert moved["metadata"]["labels"]["dashboards"] == "gpu" and moved["metadata"]["namespace"] == "grafana"


# --- the ServiceMonitor finds the agents ------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["defaults", "example"])
def test_service_monitor_selects_the_agent_service(variant: str) -> None:
    manifests = objects(VARIANTS[variant])
    monitor = find(manifests, "ServiceMonitor")
    service = find(manifests, "Service", "gpufleet-agent")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert service["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"] and "metrics" in ports
    assert service["spec"]["clusterIP"] == "None"
    # ... and the Service's endpoints are every agent pod, watch or not, on the port the ServiceMonitor names
    for daemonset in (m.obj for m in manifests if m.kind == "DaemonSet"):
        pod = daemonset["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        container_ports = {p["name"] for c in pod["spec"]["containers"] for p in c["ports"]}
        assert service["spec"]["ports"][0]["targetPort"] in container_ports


def test_daemonset_selectors_do_not_overlap() -> None:
    """Two DaemonSets whose selectors match each other's pods would fight over them."""
    manifests = objects(VARIANTS["example"])
    sets = [m.obj for m in manifests if m.kind == "DaemonSet"]
    assert len(sets) == 2
    for one in sets:
        for other in sets:
            if one is not other:
                labels = other["spec"]["template"]["metadata"]["labels"]
                assert not one["spec"]["selector"]["matchLabels"].items() <= labels.items()


# --- the agent: GPU nodes, host paths read-only, least privilege ----------------------------------------------------


@pytest.mark.parametrize("variant", ["defaults", "example"])
def test_daemonset_runs_on_gpu_nodes_and_mounts_host_paths_read_only(variant: str) -> None:
    daemonset = find(objects(VARIANTS[variant]), "DaemonSet", "gpufleet-agent")
    spec = daemonset["spec"]["template"]["spec"]
    assert GPU_TAINT in spec["tolerations"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    # the token is for the pod list alone (see the attribution tests below)
    assert spec["runtimeClassName"] == "nvidia" and spec["automountServiceAccountToken"] is True
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["GPUFLEET_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "gpufleet-agent-token", "key": "token"}
    assert "--node=$(NODE_NAME)" in container["args"]
    assert not any("nvidia.com" in r for r in container["resources"].get("requests", {}))  # NVML needs no GPU
    assert container["livenessProbe"]["httpGet"]["path"] == container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    host_paths = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    for name in host_paths:
        if name != "data":  # the agent's own spool is the one host path it writes
            assert mounts[name]["readOnly"] is True, name
    paths = {hp["path"]: hp.get("type") for hp in host_paths.values()}
    assert paths["/var/lib/kubelet/pod-resources"] == "Directory"
    assert paths["/sys/class"] == paths["/sys/devices"] == "Directory"
    # /sys/class/infiniband/<hca> links to ../../devices/...: both trees sit side by side under the --ib-sysfs root
    assert "--ib-sysfs=/host/sys/class/infiniband" in container["args"]
    assert {mounts["sys-class"]["mountPath"], mounts["sys-devices"]["mountPath"]} == {
        "/host/sys/class",
        "/host/sys/devices",
    }
    # every variant follows the host's kern.log (the default: no device, no capability)
    assert paths["/var/log"] == "Directory" and "--kmsg-file=/host/kernel-log/kern.log" in container["args"]
    assert "/dev/kmsg" not in paths
    # the host's /proc for the cgroups of NVML's host PIDs: read-only, submounts too where possible, no hostPID
    assert paths["/proc"] == "Directory" and "--proc-root=/host/proc" in container["args"]
    assert mounts["host-proc"]["mountPath"] == "/host/proc"
    assert mounts["host-proc"]["recursiveReadOnly"] == "IfPossible" and "mountPropagation" not in mounts["host-proc"]
    assert "hostPID" not in spec and "hostNetwork" not in spec


def test_agent_security_context_is_the_least_that_works() -> None:
    spec = find(objects({"agent": {"kernelLog": {"source": "kmsg"}}}), "DaemonSet")["spec"]["template"]["spec"]
    security = spec["containers"][0]["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}  # SYSLOG: /dev/kmsg, nothing else
    paths = {v["hostPath"]["path"]: v["hostPath"].get("type") for v in spec["volumes"] if "hostPath" in v}
    assert paths["/dev/kmsg"] == "CharDevice"
    assert security["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in spec and "hostPID" not in spec
    # following a log file (the default) needs no capability at all
    file_mode = find(objects({}), "DaemonSet")["spec"]["template"]["spec"]
    assert file_mode["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert file_mode["securityContext"]["supplementalGroups"] == [4]


@pytest.mark.parametrize(
    "variant",
    ["defaults", "example", "watch-with-own-affinity", "agents-only", "attribution-from-kubelet", "no-attribution"],
)
def test_no_container_is_privileged(variant: str) -> None:
    for spec in pod_specs(objects(VARIANTS[variant])):
        assert "hostNetwork" not in spec and "hostPID" not in spec and "hostIPC" not in spec
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"] and security["readOnlyRootFilesystem"] is True


def test_privileged_agent_only_when_asked() -> None:
    spec = find(objects(VARIANTS["sqlite-one-replica"]), "DaemonSet")["spec"]["template"]["spec"]
    assert spec["containers"][0]["securityContext"]["privileged"] is True


def test_control_plane_runs_as_non_root() -> None:
    spec = find(objects({}), "Deployment")["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    probes = spec["containers"][0]
    assert probes["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTP"}


def test_workload_watch_runs_on_the_labelled_node_only() -> None:
    manifests = objects(VARIANTS["watch-with-own-affinity"])
    watch = find(manifests, "DaemonSet", "gpufleet-agent-watch")["spec"]["template"]["spec"]
    agents = find(manifests, "DaemonSet", "gpufleet-agent")["spec"]["template"]["spec"]
    assert watch["nodeSelector"]["gpufleet.io/workload-watch"] == "true"
    assert "--workload=kubernetes" in watch["containers"][0]["args"]
    assert "--workload=kubernetes" not in agents["containers"][0]["args"]
    terms = agents["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # the user's two alternatives are kept, each now also excluding the watch's node
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["h100"], ["a100"]]
    not_watch = {"key": "gpufleet.io/workload-watch", "operator": "NotIn", "values": ["true"]}
    assert all(t["matchExpressions"][-1] == not_watch for t in terms)


# --- RBAC: what the code calls, nothing more ------------------------------------------------------------------------


def _client_methods() -> set[str]:
    from kubernetes.client import AppsV1Api, BatchV1Api, CoreV1Api, CustomObjectsApi

    apis = (CoreV1Api, CustomObjectsApi, AppsV1Api, BatchV1Api)
    return {n for api in apis for n in dir(api) if not n.startswith("_")}


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    return Path(spec.origin).read_text()


def _api_calls(module: str) -> set[str]:
    """Every Kubernetes client method the module names (self.core.patch_node, core.list_node, ...)."""
    methods = _client_methods()
    return {n.attr for n in ast.walk(ast.parse(_source(module))) if isinstance(n, ast.Attribute) and n.attr in methods}


def _kubernetes_imports(module: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(_source(module))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpufleet.integrations.kubernetes"):
            found.add(str(node.module))
    return found


def _rules(role: dict[str, Any]) -> set[rbac.Rule]:
    return {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }


@pytest.mark.parametrize("grant", rbac.GRANTS, ids=lambda g: g.account)
def test_rbac_table_names_exactly_the_calls_the_code_makes(grant: rbac.Grant) -> None:
    called = set().union(*(_api_calls(m) for m in grant.modules))
    assert called == grant.methods


def test_the_commands_the_chart_runs_use_only_those_modules() -> None:
    assert _kubernetes_imports("gpufleet.cli.server") <= set(rbac.CONTROL_PLANE.modules)
    assert _kubernetes_imports("gpufleet.cli.agent") <= set(rbac.WORKLOAD_WATCH.modules)


def test_kueue_lists_are_the_ones_the_queue_reader_makes() -> None:
    from gpufleet.integrations.kubernetes.queue import KubernetesQueueReader

    class Recorder:
        def __init__(self) -> None:
            self.calls: list[tuple[str, tuple[Any, ...]]] = []

        def __getattr__(self, method: str) -> Any:
            def call(*args: Any, **kwargs: Any) -> dict[str, Any]:
                self.calls.append((method, args))
                return {"items": []}

            return call

    core, custom = Recorder(), Recorder()
    KubernetesQueueReader(core, custom).objects()
    made = {(m, args[0], args[2]) for m, args in custom.calls}
    table = {(c.method, c.group, c.resource) for c in rbac.WORKLOAD_WATCH.calls if c.group}
    assert made == table
    assert {m for m, _ in core.calls} == {c.method for c in rbac.WORKLOAD_WATCH.calls if not c.group}


def _server_params(manifests: list[Manifest]) -> dict[str, Any]:
    """The control plane's args as the chart passes them, parsed by the server command itself (not run)."""
    app = typer.Typer()
    register_server(app)
    args = find(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "server"
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return dict(group.commands["server"].make_context("server", args[1:]).params)


def test_control_plane_cluster_role_grants_exactly_the_table() -> None:
    manifests = objects({})
    role = find(manifests, "ClusterRole", "gpufleet-server")
    hypernodes = {call.rule for call in rbac.HYPERNODE_CALLS}
    assert _rules(role) == rbac.CONTROL_PLANE.rules - hypernodes  # Volcano's HyperNodes only when asked for
    assert _server_params(manifests)["volcano_hypernodes"] is False
    volcano = objects({"server": {"volcanoHyperNodes": True}})
    assert _rules(find(volcano, "ClusterRole", "gpufleet-server")) == rbac.CONTROL_PLANE.rules
    assert _server_params(volcano)["volcano_hypernodes"] is True
    binding = find(manifests, "ClusterRoleBinding", "gpufleet-server")
    pod = find(manifests, "Deployment")["spec"]["template"]["spec"]
    assert binding["roleRef"]["name"] == "gpufleet-server"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "gpufleet"}
    ]
    assert pod["automountServiceAccountToken"] is True
    # observe only: no role, no token
    observe = objects({"server": {"backend": "none"}})
    assert not [m for m in observe if m.kind in ("ClusterRole", "ClusterRoleBinding") and m.name == "gpufleet-server"]
    assert find(observe, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("kueue", [True, False])
def test_workload_watch_cluster_role_grants_exactly_the_table(kueue: bool) -> None:
    manifests = objects({"agent": {"workloadWatch": {"enabled": True, "kueue": kueue}}})
    role = find(manifests, "ClusterRole", "gpufleet-agent-watch")
    want = {r for r in rbac.WORKLOAD_WATCH.rules if kueue or r[0] != rbac.KUEUE_GROUP}
    assert _rules(role) == want
    watch = find(manifests, "DaemonSet", "gpufleet-agent-watch")["spec"]["template"]["spec"]
    binding = find(manifests, "ClusterRoleBinding", "gpufleet-agent-watch")
    assert binding["subjects"][0]["name"] == watch["serviceAccountName"] and watch["automountServiceAccountToken"]


# --- the agent's attribution: the host's /proc, its node's pods, and the one role that reads them -----------------

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
NODE = {"NODE_NAME": "gpu-node-7", "HOST_IP": "10.0.3.7"}  # what the downward API would give on one node


def agent_daemonsets(manifests: list[Manifest]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, agent container) of every agent DaemonSet: the node agents and the workload watch's."""
    specs = [m.obj["spec"]["template"]["spec"] for m in manifests if m.kind == "DaemonSet"]
    return [(spec, spec["containers"][0]) for spec in specs]


def flag(args: list[str], name: str) -> list[str]:
    return [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]


def kubelet_expands(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The container's args as the kubelet hands them to it: $(VAR) replaced for the variables its env defines (an
    undefined one would be passed as is, so none may be)."""
    defined = {e["name"] for e in container["env"]}
    for arg in container["args"]:
        for name in _REFERENCE.findall(arg):
            assert name in defined, f"{arg}: $({name}) is not in the container's env"
    return [_REFERENCE.sub(lambda m: env[m.group(1)], arg) for arg in container["args"]]


def pod_list_request(url: str, tmp_path: Path) -> httpx.Request:
    """The request the agent's pod-list reader makes for `url`, with a service-account token."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"apiVersion": "v1", "kind": "PodList", "items": []})

    token = tmp_path / "token"
    token.write_text("service-account-token\n")
    reader = kubelet_pods.KubeletPodList(url, token_path=token, transport=httpx.MockTransport(answer))
    assert len(reader.index()) == 0
    (request,) = seen
    assert request.headers["Authorization"] == "Bearer service-account-token"
    return request


def rule_for(request: httpx.Request) -> rbac.Rule:
    """The RBAC rule a GET needs: on the API server, a core collection outside any namespace is list on the resource
    (cluster-wide: a ClusterRole); the kubelet authorizes /pods as get on nodes/pods (KubeletFineGrainedAuthz)."""
    assert request.method == "GET"
    parts = request.url.path.strip("/").split("/")
    if request.url.port == 10250:
        assert parts == ["pods"]
        return ("", "nodes/pods", "get")
    assert parts[:2] == ["api", "v1"] and len(parts) == 3, request.url.path
    return ("", parts[2], "list")


@pytest.mark.parametrize("variant", ["defaults", "example", "attribution-from-kubelet"])
def test_agent_role_grants_exactly_the_pod_list_the_agent_reads(variant: str, tmp_path: Path) -> None:
    manifests = objects(VARIANTS[variant])
    role = find(manifests, "ClusterRole", "gpufleet-agent")
    binding = find(manifests, "ClusterRoleBinding", "gpufleet-agent")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    daemonsets = agent_daemonsets(manifests)
    # every agent, the workload watch's too, is bound, and nothing else
    assert sorted(s["name"] for s in binding["subjects"]) == sorted(
        spec["serviceAccountName"] for spec, _ in daemonsets
    )
    assert all(s["kind"] == "ServiceAccount" and s["namespace"] == "gpufleet" for s in binding["subjects"])
    # the reader sends the token from where automounting puts it
    assert Path("/var/run/secrets/kubernetes.io/serviceaccount/token") == kubelet_pods.TOKEN_PATH
    for spec, container in daemonsets:
        assert spec["automountServiceAccountToken"] is True
        assert "hostNetwork" not in spec and "hostPID" not in spec
        args = kubelet_expands(container, NODE)
        (url,) = flag(args, "--pod-list")
        request = pod_list_request(url, tmp_path)
        assert _rules(role) == {rule_for(request)}
        # the pod list is read only with pod-resources, which stays mounted read-only
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["pod-resources"]["readOnly"] is True
        if rule_for(request) == ("", "pods", "list"):
            assert request.url.host == "kubernetes.default.svc"
            assert request.url.params["fieldSelector"] == "spec.nodeName=gpu-node-7"  # this node's pods only
            assert request.url.params["resourceVersion"] == "0"  # from the API server's cache, not etcd
            assert flag(args, "--pod-list-ca") == [str(kubelet_pods.CA_PATH)]  # the API server's certificate is checked
        else:
            assert request.url.host == "10.0.3.7" and request.url.scheme == "https"
            env = {e["name"]: e for e in container["env"]}
            assert env["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
            assert flag(args, "--pod-list-ca") == []  # the kubelet's self-signed certificate
    # the watch's own role is unchanged by it
    if variant == "example":
        assert _rules(find(manifests, "ClusterRole", "gpufleet-agent-watch")) == rbac.WORKLOAD_WATCH.rules


def test_a_pod_list_url_of_ones_own(tmp_path: Path) -> None:
    url = "https://[$(HOST_IP)]:10250/pods"
    manifests = objects({"agent": {"attribution": {"podList": "kubelet", "podListUrl": url}}})
    ((_, container),) = agent_daemonsets(manifests)
    args = kubelet_expands(container, {**NODE, "HOST_IP": "fd00::7"})
    request = pod_list_request(flag(args, "--pod-list")[0], tmp_path)
    assert request.url.host == "fd00::7" and rule_for(request) == ("", "nodes/pods", "get")
    assert _rules(find(manifests, "ClusterRole", "gpufleet-agent")) == {rule_for(request)}


@pytest.mark.parametrize(
    ("values", "pod_list_flag", "proc"),
    [
        ({"attribution": {"enabled": False}}, None, False),
        ({"attribution": {"podList": "none"}}, "none", True),
        ({"podResources": {"enabled": False}}, "none", True),  # the pod list only names pod-resources' holders
    ],
    ids=["attribution-off", "pod-list-none", "no-pod-resources"],
)
def test_without_a_pod_list_the_agent_has_no_token_and_no_role(
    values: dict[str, Any], pod_list_flag: str | None, proc: bool
) -> None:
    manifests = objects({"agent": values})
    assert not [m for m in manifests if m.name == "gpufleet-agent" and m.kind.startswith("ClusterRole")]
    bound = [s["name"] for m in manifests if m.kind.endswith("RoleBinding") for s in m.obj["subjects"]]
    assert "gpufleet-agent" not in bound
    assert find(manifests, "ServiceAccount", "gpufleet-agent")["automountServiceAccountToken"] is False
    ((spec, container),) = agent_daemonsets(manifests)
    args = container["args"]
    assert spec["automountServiceAccountToken"] is False
    assert flag(args, "--pod-list") == ([pod_list_flag] if pod_list_flag else [])
    assert "--pod-list-ca" not in " ".join(args) and "HOST_IP" not in {e["name"] for e in container["env"]}
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert ("/proc" in host_paths) is proc and ("/host/proc" in mounts) is proc
    assert (flag(args, "--proc-root") == ["/host/proc"]) is proc
    assert ("--no-attribution" in args) is not proc
    if not proc:  # attribution off: none of its flags either
        assert not [a for a in args if a.startswith("--workload-series")]


def test_without_rbac_create_the_token_stays_for_a_binding_of_ones_own() -> None:
    manifests = objects({"rbac": {"create": False}})
    assert not [m for m in manifests if m.kind.startswith("ClusterRole")]
    ((spec, _),) = agent_daemonsets(manifests)
    assert spec["automountServiceAccountToken"] is True


def test_the_role_is_bound_to_the_agents_own_account_only() -> None:
    named = objects({"agent": {"serviceAccount": {"create": False, "name": "gpu-agents"}}})
    assert find(named, "ClusterRoleBinding", "gpufleet-agent")["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-agents", "namespace": "gpufleet"}
    ]
    # the namespace's default account would give every pod running as it the pod list
    with pytest.raises(ManifestError) as caught:
        render({"agent": {"serviceAccount": {"create": False}}}, source="my-values.yaml")
    assert caught.value.message.startswith("my-values.yaml: agent.serviceAccount.create is false")
    assert "agent.serviceAccount.name" in caught.value.message and "podList=none" in caught.value.message
    without = objects({"agent": {"serviceAccount": {"create": False}, "attribution": {"podList": "none"}}})
    assert not [m for m in without if m.name == "gpufleet-agent" and m.kind.startswith("ClusterRole")]


def test_workload_series_flags() -> None:
    ((_, defaults),) = agent_daemonsets(objects({}))
    assert flag(defaults["args"], "--workload-series") == []  # the agent's own default selection
    assert flag(defaults["args"], "--workload-series-budget") == ["2000"]
    for _, container in agent_daemonsets(objects(VARIANTS["attribution-from-kubelet"])):
        selectors = flag(container["args"], "--workload-series")
        assert selectors == ["sharing:all", "namespace:ml-train"]
        assert workload_series_settings(selectors) == {
            "workload_series_sharing": ("all",),
            "workload_series_namespaces": ("ml-train",),
        }
        assert flag(container["args"], "--workload-series-budget") == ["500"]


@pytest.mark.parametrize(
    ("selector", "valid"),
    [
        ("sharing:mps", True),
        ("sharing:mig-time-slicing", True),
        ("sharing:all", True),
        ("namespace:*", True),
        ("namespace:ml-train", True),
        ("all", True),
        ("none", True),
        ("sharing:shared", False),
        ("namespace:", False),
        ("pod:trainer-0", False),
    ],
)
def test_the_schema_takes_the_selectors_the_agent_takes(selector: str, valid: bool) -> None:
    values = {"agent": {"attribution": {"workloadSeries": [selector]}}}
    if valid:
        workload_series_settings([selector])
        ((_, container),) = agent_daemonsets(objects(values))
        assert flag(container["args"], "--workload-series") == [selector]
    else:
        with pytest.raises(UserError):
            workload_series_settings([selector])
        with pytest.raises(ManifestError, match=r"agent\.attribution\.workloadSeries\.0"):
            render(values)


def test_none_stands_alone() -> None:
    with pytest.raises(UserError):
        workload_series_settings(["none", "all"])
    with pytest.raises(ManifestError) as caught:
        render({"agent": {"attribution": {"workloadSeries": ["none", "all"]}}}, source="my-values.yaml")
    assert 'agent.attribution.workloadSeries is ["none","all"]' in caught.value.message
    assert "execution error" not in caught.value.message


@pytest.mark.parametrize(
    ("attribution", "message"),
    [
        ({"podList": "hostNetwork"}, r"agent\.attribution\.podList: .*apiserver"),
        ({"workloadSeriesBudget": -1}, r"agent\.attribution\.workloadSeriesBudget"),
        ({"podListUrl": "http://kubernetes.default.svc/api/v1/pods"}, r"agent\.attribution\.podListUrl"),
        ({"enable": True}, r"agent\.attribution: additional properties 'enable' not allowed"),
    ],
)
def test_attribution_values_outside_the_schema(attribution: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        render({"agent": {"attribution": attribution}})


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_agent_takes_every_flag_the_chart_passes(variant: str) -> None:
    """The chart's args, expanded as the kubelet does, parsed by the agent command itself (not run)."""
    app = typer.Typer()
    register_agent(app)
    command = typer.main.get_command(app)
    for _, container in agent_daemonsets(objects(VARIANTS[variant])):
        args = kubelet_expands(container, NODE)
        assert args[0] == "agent"
        params = command.make_context("agent", args[1:]).params
        assert params["attribution"] is (VARIANTS[variant].get("agent", {}).get("attribution", {}).get("enabled", True))
        if params["attribution"]:
            assert params["proc_root"] == Path("/host/proc")


def _cost_mounts(manifests: list[Manifest]) -> tuple[list[Path], list[tuple[str, str]], dict[str, str]]:
    """Where each agent reads the cost config (--cost-config, parsed by the agent command) and each control plane
    (ConfigMap and key mounted as $GPUFLEET_HOME/cost.yaml), and the pods' cost checksums by object name."""
    app = typer.Typer()
    register_agent(app)
    command = typer.main.get_command(app)
    agents = []
    for spec, container in agent_daemonsets(manifests):
        path = command.make_context("agent", kubelet_expands(container, NODE)[1:]).params["cost_config"]
        mount = next(m for m in container["volumeMounts"] if m["name"] == "cost")
        volume = next(v for v in spec["volumes"] if v["name"] == "cost")["configMap"]
        assert mount["readOnly"] and path.parent == Path(mount["mountPath"])
        assert [item["path"] for item in volume["items"]] == [path.name]
        agents.append((volume["name"], volume["items"][0]["key"], path))
    server = find(manifests, "Deployment")["spec"]["template"]["spec"]
    mount = next(m for m in server["containers"][0]["volumeMounts"] if m["name"] == "cost")
    volume = next(v for v in server["volumes"] if v["name"] == "cost")["configMap"]
    home = next(e["value"] for e in server["containers"][0]["env"] if e["name"] == "GPUFLEET_HOME")
    assert mount["readOnly"] and mount["mountPath"] == f"{home}/cost.yaml"  # where the cost report reads it
    servers = [(volume["name"], mount["subPath"])]
    assert {(name, key) for name, key, _ in agents} == set(servers), (agents, servers)  # one file for both sides
    sums = {
        m.name: m.obj["spec"]["template"]["metadata"].get("annotations", {}).get("checksum/cost", "")
        for m in manifests
        if m.kind in ("DaemonSet", "Deployment")
    }
    return [p for _, _, p in agents], servers, sums


def test_agents_price_idle_cost_with_the_control_planes_cost_config() -> None:
    """values cost.config is one ConfigMap: every agent gets --cost-config on it and the control plane reads it as
    $GPUFLEET_HOME/cost.yaml, so the idle-cost series and the cost report charge the same; a new price rolls both."""
    manifests = objects(VARIANTS["cost-config"])
    paths, servers, sums = _cost_mounts(manifests)
    assert paths == [Path("/etc/gpufleet/cost/cost.yaml")] * 2  # the node agents and the workload watch's
    configmap = find(manifests, "ConfigMap", servers[0][0])
    config = CostConfig.from_data(yaml.safe_load(configmap["data"][servers[0][1]]), "rendered")
    assert config.default_usd_per_gpu_hour == 2.5 and config.prices[0].usd_per_gpu_hour == 6.88
    assert len(set(sums.values())) == 1 and all(sums.values())
    dearer = {"cost": {"config": {"default_usd_per_gpu_hour": 3.0}}}
    assert set(_cost_mounts(objects(dearer))[2].values()).isdisjoint(sums.values())
    # none given: no ConfigMap, no flag, no mount; both sides take the catalog's list prices
    plain = objects({})
    for spec, container in agent_daemonsets(plain):
        assert not flag(container["args"], "--cost-config") and all(v["name"] != "cost" for v in spec["volumes"])
    assert all(v["name"] != "cost" for v in find(plain, "Deployment")["spec"]["template"]["spec"]["volumes"])
    assert [m.name for m in plain if m.kind == "ConfigMap"] == ["gpufleet-dashboards"]


def test_a_cost_config_map_of_ones_own() -> None:
    manifests = objects({"cost": {"existingConfigMap": "site-prices", "key": "prices.yaml"}})
    paths, servers, sums = _cost_mounts(manifests)
    assert paths == [Path("/etc/gpufleet/cost/prices.yaml")] and servers == [("site-prices", "prices.yaml")]
    assert not any(sums.values())  # the chart cannot see its content: nothing to roll the pods on
    assert "site-prices" not in {m.name for m in manifests if m.kind == "ConfigMap"}


def test_a_cost_config_the_agent_would_refuse_is_refused_at_render() -> None:
    with pytest.raises(ManifestError, match=r"cost\.config.*unknown field 'prise'; did you mean 'prices'"):
        render({"cost": {"config": {"prise": []}}})
    with pytest.raises(ManifestError, match=r"cost\.config and cost\.existingConfigMap"):
        render({"cost": {"config": {"default_usd_per_gpu_hour": 1}, "existingConfigMap": "mine"}})
    with pytest.raises(ManifestError, match="values schema"):
        render({"cost": {"key": "a/b"}})


# --- values that cannot work: a clean error that names the fix ------------------------------------------------------


def test_values_that_are_not_yaml_or_not_a_mapping() -> None:
    with pytest.raises(ManifestError, match=r"my-values\.yaml: not valid YAML at line 3"):
        load_values("server:\n  replicas: [2\n", "my-values.yaml")
    with pytest.raises(ManifestError, match="not a mapping"):
        load_values("- server\n", "my-values.yaml")
    assert load_values("", "empty.yaml") == {}
    assert load_values("commonLabels:\n  since: 2024-05-01\n", "v.yaml") == {"commonLabels": {"since": "2024-05-01"}}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"server": {"replicas": "two"}}, r"server\.replicas: got string, want integer"),
        ({"server": {"replica": 2}}, r"server: additional properties 'replica' not allowed"),
        ({"agent": {"tolerations": [{"key": "a", "efect": "NoSchedule"}]}}, r"agent\.tolerations\.0: .*'efect'"),
        ({"monitoring": {}}, r"\(top level\): additional properties 'monitoring' not allowed"),
        ({"agent": {"kernelLog": {"source": "journal"}}}, r"agent\.kernelLog\.source: .*kmsg"),
    ],
)
def test_values_outside_the_schema(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError, match=message) as caught:
        render(values, source="my-values.yaml")
    assert caught.value.message.startswith("my-values.yaml: does not fit the chart's values schema")
    assert caught.value.fix and "values.yaml" in caught.value.fix


def test_replicas_without_postgresql_fail_with_the_fix() -> None:
    with pytest.raises(ManifestError) as caught:
        render({"server": {"postgresql": {"enabled": False}}}, source="my-values.yaml")
    message = caught.value.message
    assert message.startswith("my-values.yaml: server.replicas is 2 but server.postgresql.enabled is false")
    assert "server.replicas=1" in message and "execution error" not in message
    render({"server": {"replicas": 1, "postgresql": {"enabled": False}}})  # one replica on SQLite is fine


def test_an_invalid_passthrough_value_names_the_object_and_field() -> None:
    """Free-form values (affinity) are checked by the Kubernetes schemas once rendered."""
    values: dict[str, Any] = {"agent": {"affinity": {"nodeAfinity": {}}}}
    with pytest.raises(
        UserError, match=r"DaemonSet gpufleet/gpufleet-agent .*spec\.template\.spec\.affinity: .*nodeAfinity"
    ):
        render(values)


def test_kube_versions() -> None:
    assert kube_version("v1.30.4") == "1.30" and kube_version("1.33") == "1.33"
    for bad, fix in (("banana", "e.g."), ("1.99", "choose a version"), ("1.29", "1.30 or newer")):
        with pytest.raises(UserError) as caught:
            kube_version(bad, minimum=(1, 30))
        assert caught.value.fix and fix in caught.value.fix
    with pytest.raises(UserError, match=r"needs Kubernetes 1\.30"):
        render({}, version="1.29")


def test_bad_release_or_namespace_names() -> None:
    with pytest.raises(UserError, match="--name"):
        render({}, name="Not_A_Name")
    with pytest.raises(UserError, match="--namespace"):
        render({}, namespace="GPU Ops")


def test_without_helm_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "helm_python", None)  # import helm_python now raises ImportError
    with pytest.raises(DependencyMissingError) as caught:
        render({})
    assert caught.value.fix == "pip install 'gpufleet[deploy]'"


# --- output ------------------------------------------------------------------------------------------------------


def test_yaml_and_json_output() -> None:
    manifests = objects({})
    docs = [d for d in yaml.safe_load_all(to_yaml(manifests)) if d]
    assert docs == [m.obj for m in manifests]
    listed = yaml.safe_load(to_json(manifests))
    assert listed["kind"] == "List" and listed["items"] == [m.obj for m in manifests]


def test_write_replaces_only_what_it_rendered(tmp_path: Path) -> None:
    (tmp_path / "values.yaml").write_text("server: {}\n")  # not rendered: kept
    (tmp_path / "ingress-old.yaml").write_text(f"{HEADER}\nkind: Ingress\n")  # rendered before, not now: removed
    written, removed = write(objects({}), tmp_path)
    assert removed == [tmp_path / "ingress-old.yaml"]
    assert (tmp_path / "values.yaml").exists()
    assert sorted(p.name for p in tmp_path.glob("*.yaml")) == sorted([p.name for p in written] + ["values.yaml"])
    daemonset = (tmp_path / "daemonset-gpufleet-agent.yaml").read_text()
    assert daemonset.startswith(HEADER + "\n# Source: gpufleet/templates/agent-daemonset.yaml\n")
    assert "# The groups that may read the host's kernel log" in daemonset  # the chart's comments travel with it


def test_an_invalid_rendered_object_is_refused_with_its_field_and_a_hint() -> None:
    good = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "gpufleet"}}
    monitor = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "m"}}
    unchecked = validate([Manifest(good, "", "t/cm.yaml"), Manifest(monitor, "", "t/sm.yaml")], "1.33")
    assert [m.kind for m in unchecked] == ["ServiceMonitor"]
    bad = {**good, "dataa": {"k": "v"}}
    with pytest.raises(UserError) as raised:
        validate([Manifest(bad, "", "t/cm.yaml")], "1.33")
    assert "ConfigMap gpufleet/x (from t/cm.yaml) is not valid for Kubernetes 1.33: (the object): unknown field" in (
        raised.value.message
    )
    assert "'dataa' -> 'data'" in (raised.value.fix or "")


def test_node_actions_make_a_privileged_agent_that_names_its_commands() -> None:
    on = find(objects(VARIANTS["node-actions"]), "DaemonSet")["spec"]["template"]["spec"]
    agent = on["containers"][0]
    assert on["hostPID"] is True and agent["securityContext"]["privileged"] is True
    assert (
        "--action-command=reboot-node=nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl reboot"
        in (agent["args"])
    )
    assert "--action-command=reset-gpu=nvidia-smi -r -i {gpu}" in agent["args"] and "--no-enroll" in agent["args"]
    off = find(objects({}), "DaemonSet")["spec"]["template"]["spec"]
    assert "hostPID" not in off and off["containers"][0]["securityContext"]["privileged"] is False
    assert "--no-node-actions" in off["containers"][0]["args"] and "--no-enroll" not in off["containers"][0]["args"]
