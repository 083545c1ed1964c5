"""KEDA ScaledObjects: the trigger's query and target, the options refused, and strict checking against KEDA's
vendored CRD schema and Kubernetes' ObjectMeta."""

from __future__ import annotations

import copy
from importlib import resources
from typing import Any

import pytest

from gpufleet.deploy.keda import CRD_FILE, KedaOptions, check, crd_schema, problems, query, scaled_object
from gpufleet.errors import UserError


def trigger(obj: dict[str, Any]) -> dict[str, Any]:
    (only,) = obj["spec"]["triggers"]
    return dict(only)


def test_p99_scales_on_the_latency_against_a_target() -> None:
    obj = scaled_object(KedaOptions("llm-serve", "llama-3-70b", namespace="ml"))
    assert obj["apiVersion"] == "keda.sh/v1alpha1" and obj["kind"] == "ScaledObject"
    assert obj["metadata"]["name"] == "llm-serve" and obj["metadata"]["namespace"] == "ml"
    assert obj["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-serve"}
    assert (obj["spec"]["minReplicaCount"], obj["spec"]["maxReplicaCount"]) == (1, 10)
    t = trigger(obj)
    assert t["type"] == "prometheus" and t["metricType"] == "Value"
    assert t["metadata"]["query"] == (
        "histogram_quantile(0.99, sum by (le) "
        '(rate(gpufleet_inference_request_duration_seconds_bucket{model="llama-3-70b"}[2m])))'
    )
    assert t["metadata"]["threshold"] == "1.5"  # 75 % of the 2 s p99 objective
    assert t["metadata"]["serverAddress"] == "http://prometheus-operated.monitoring.svc:9090"
    assert "activationThreshold" not in t["metadata"] and "authenticationRef" not in t


def test_queue_scales_to_zero_per_replica() -> None:
    opts = KedaOptions(
        "llm-serve", "llama", version="v3", signal="queue", target=8, min_replicas=0, max_replicas=16,
        polling_interval_s=5, cooldown_period_s=600, authentication="prom-creds",
        authentication_kind="ClusterTriggerAuthentication",
    )  # fmt: skip
    obj = scaled_object(opts)
    t = trigger(obj)
    assert t["metricType"] == "AverageValue"
    assert t["metadata"]["query"] == 'sum(gpufleet_inference_queue_depth{model="llama", version="v3"})'
    assert t["metadata"]["threshold"] == "8" and t["metadata"]["activationThreshold"] == "0"
    assert t["authenticationRef"] == {"name": "prom-creds", "kind": "ClusterTriggerAuthentication"}
    assert obj["spec"]["minReplicaCount"] == 0 and obj["spec"]["pollingInterval"] == 5
    assert obj["spec"]["cooldownPeriod"] == 600


def test_label_values_are_quoted_for_promql() -> None:
    assert query(KedaOptions("d", 'we"ird\\model', signal="queue")) == (
        'sum(gpufleet_inference_queue_depth{model="we\\"ird\\\\model"})'
    )


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (KedaOptions("LLM-Serve", "m"), r"--deployment 'LLM-Serve' is not a valid Deployment name"),
        (KedaOptions("llm", "m", namespace="ml.prod"), r"--namespace 'ml\.prod' is not a valid namespace name"),
        (KedaOptions("llm", "m", name="-x"), r"--name '-x' is not a valid ScaledObject name"),
        (KedaOptions("a" * 254, "m"), r"at most 253 characters"),
        (KedaOptions("llm", " "), r"--model is empty"),
        (KedaOptions("llm", "m", target=0), r"--target 0 must be positive"),
        (KedaOptions("llm", "m", min_replicas=5, max_replicas=2), r"do not make a range"),
        (KedaOptions("llm", "m", server_address="prometheus:9090"), r"is not an http\(s\) URL"),
        (KedaOptions("llm", "m", min_replicas=0), r"--signal p99 cannot scale from zero"),
        (KedaOptions("llm", "m", authentication="Creds"), r"not a valid TriggerAuthentication name"),
    ],
)
def test_bad_options_are_refused(opts: KedaOptions, message: str) -> None:
    with pytest.raises(UserError, match=message) as caught:
        scaled_object(opts)
    assert caught.value.fix


def test_the_vendored_crd_records_its_source() -> None:
    text = resources.files("gpufleet.deploy").joinpath("data", CRD_FILE).read_text(encoding="utf-8")
    header = text.split("---", 1)[0]
    assert "https://github.com/kedacore/keda/blob/v2.20.2/config/crd/bases/keda.sh_scaledobjects.yaml" in header
    assert "Version:  KEDA v2.20.2" in header and "Vendored: " in header
    schema = crd_schema()
    assert {"scaleTargetRef", "triggers", "minReplicaCount"} <= set(schema["properties"]["spec"]["properties"])


VALID = scaled_object(KedaOptions("llm-serve", "llama", signal="queue", min_replicas=0, authentication="creds"))


def edited(path: list[str | int], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(VALID)
    node = obj
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return obj


def test_a_generated_object_is_valid() -> None:
    assert problems(VALID) == []


@pytest.mark.parametrize(
    ("obj", "found"),
    [
        (edited(["spec", "minReplicas"], 1), "unknown field 'spec.minReplicas' (did you mean 'minReplicaCount'?)"),
        (edited(["spec", "scaleTargetRef", "nmae"], "x"), "unknown field 'spec.scaleTargetRef.nmae' (did you mean"),
        (edited(["spec", "triggers", 0, "authenticationRef", "kind"], "Secret"), "'Secret' is not one of"),
        (edited(["spec", "triggers", 0, "metadata", "threshold"], 4), "4 is not of type 'string'"),
        (edited(["spec", "maxReplicaCount"], 0), "spec.maxReplicaCount: 0 is less than the minimum of 1"),
        (edited(["metadata", "lables"], {}), "unknown field 'metadata.lables' (did you mean 'labels'?)"),
        (edited(["metadata", "labels"], {"a": 1}), "metadata.labels.a: 1 is not of type 'string', 'null'"),
        (edited(["status"], {"hpaName": "x", "extra": 1}), "unknown field 'status.extra'"),
        (
            edited(["spec", "triggers", 0, "metadata", "treshold"], "1"),
            "the Prometheus scaler has no key 'treshold' (did you mean 'threshold'?)",
        ),
    ],
)
def test_schema_is_strict(obj: dict[str, Any], found: str) -> None:
    assert any(found in p for p in problems(obj)), problems(obj)
    with pytest.raises(UserError, match="ScaledObject llm-serve is invalid"):
        check(obj)


def test_required_fields() -> None:
    obj = copy.deepcopy(VALID)
    del obj["spec"]["scaleTargetRef"]
    assert "spec: 'scaleTargetRef' is a required property" in problems(obj)
    obj = edited(["spec", "triggers"], [])
    assert any(p.startswith("spec.triggers: [] should be non-empty") for p in problems(obj)), problems(obj)
