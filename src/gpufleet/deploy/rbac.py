"""The Kubernetes API calls gpufleet makes from inside a cluster, and the RBAC rule each one needs.

The chart's ClusterRoles grant exactly these rules and nothing else; the tests hold the code, this table and the
rendered chart to each other, so a new API call without its rule (or a rule nothing uses) fails them.
The node agent's one call is not in this table: to name the pod of each GPU process it lists its node's pods over
plain HTTPS (sources.kubelet_pods; the API server's pods with a spec.nodeName field selector, or the kubelet's
/pods), and the chart's agent ClusterRole grants exactly that (tests/deploy/test_render.py holds the rendered rule
to the request the reader makes).
"""

from __future__ import annotations

from dataclasses import dataclass

Rule = tuple[str, str, str]  # (API group, resource, verb); "" is the core group


@dataclass(frozen=True, slots=True)
class ApiCall:
    method: str  # the official client's method (CoreV1Api, CustomObjectsApi), as the code calls it
    group: str
    resource: str
    verb: str

    @property
    def rule(self) -> Rule:
        return (self.group, self.resource, self.verb)


@dataclass(frozen=True, slots=True)
class Grant:
    """What one of the chart's service accounts may do, and the modules whose calls need it."""

    account: str  # the service account's suffix in the chart: <fullname>-<account>
    modules: tuple[str, ...]
    calls: tuple[ApiCall, ...]

    @property
    def rules(self) -> frozenset[Rule]:
        return frozenset(call.rule for call in self.calls)

    @property
    def methods(self) -> frozenset[str]:
        return frozenset(call.method for call in self.calls)


# `gpufleet server --backend kubernetes`: cordon, drain, requeue, a node condition and an event per action; a
# GPU-scoped drain deletes the pods of a namespace whose eviction mode is delete and reads the ReplicaSets and Jobs
# that own the pods it moves, to name their top controller. The fabric topology's node labels are a read_node and a
# patch_node too (labels are node metadata: the nodes patch rule covers them, and no other rule is needed). With
# --volcano-hypernodes (the chart's server.volcanoHyperNodes) it keeps Volcano's HyperNodes: a list, then a create,
# replace (update) or delete per object; the chart grants those rules only when that value is on.
VOLCANO_GROUP = "topology.volcano.sh"
HYPERNODE_CALLS = (
    ApiCall("list_cluster_custom_object", VOLCANO_GROUP, "hypernodes", "list"),
    ApiCall("create_cluster_custom_object", VOLCANO_GROUP, "hypernodes", "create"),
    ApiCall("replace_cluster_custom_object", VOLCANO_GROUP, "hypernodes", "update"),
    ApiCall("delete_cluster_custom_object", VOLCANO_GROUP, "hypernodes", "delete"),
)
CONTROL_PLANE = Grant(
    account="server",
    modules=("gpufleet.integrations.kubernetes.remediation", "gpufleet.integrations.kubernetes.client"),
    calls=(
        ApiCall("read_node", "", "nodes", "get"),
        ApiCall("list_node", "", "nodes", "list"),
        ApiCall("patch_node", "", "nodes", "patch"),
        ApiCall("patch_node_status", "", "nodes/status", "patch"),
        ApiCall("list_pod_for_all_namespaces", "", "pods", "list"),
        ApiCall("delete_namespaced_pod", "", "pods", "delete"),
        ApiCall("create_namespaced_pod_eviction", "", "pods/eviction", "create"),
        ApiCall("create_namespaced_event", "", "events", "create"),
        ApiCall("read_namespaced_replica_set", "apps", "replicasets", "get"),
        ApiCall("read_namespaced_job", "batch", "jobs", "get"),
        *HYPERNODE_CALLS,
    ),
)

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_RESOURCES = ("clusterqueues", "localqueues", "workloads")

# `gpufleet agent --workload kubernetes` on one node: pending pods, why they wait, and Kueue's queues.
WORKLOAD_WATCH = Grant(
    account="agent-watch",
    modules=("gpufleet.integrations.kubernetes.queue", "gpufleet.integrations.kubernetes.client"),
    calls=(
        ApiCall("list_pod_for_all_namespaces", "", "pods", "list"),
        ApiCall("list_event_for_all_namespaces", "", "events", "list"),
        *(ApiCall("list_cluster_custom_object", KUEUE_GROUP, plural, "list") for plural in KUEUE_RESOURCES),
    ),
)

GRANTS = (CONTROL_PLANE, WORKLOAD_WATCH)
