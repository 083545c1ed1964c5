"""A KEDA ScaledObject (keda.sh/v1alpha1) that scales an inference Deployment on a Prometheus query of gpufleet's
serving metrics: the p99 request duration against a target (metricType Value: replicas grow with the ratio of the
latency to the target), or the queue of waiting requests per replica (metricType AverageValue).

Every object is checked before it is printed: against KEDA's own CRD schema (vendored in data/, strict as
`kubectl apply --validate=strict` is: an unknown field is an error), its metadata against Kubernetes' ObjectMeta
(kubernetes-validate's schema), and the Prometheus trigger's metadata keys against those KEDA's Prometheus scaler
reads, since the CRD takes any key there and KEDA would ignore a misspelt one.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal
from urllib.parse import urlparse

import yaml

from gpufleet.errors import DependencyMissingError, UserError
from gpufleet.instrument import names
from gpufleet.integrations.kubernetes.crds import strict_schema

API_VERSION = "keda.sh/v1alpha1"
CRD_FILE = "keda.sh_scaledobjects.yaml"
# kube-prometheus-stack and every Prometheus Operator install: the operator's governing Service in `monitoring`.
DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
DEFAULT_QUEUE_PER_REPLICA = 4.0
P99_TARGET_SHARE = 0.75  # the default p99 target: this share of the p99 objective, to scale out before breaching it
RATE_WINDOW = "2m"
# The trigger metadata KEDA v2.20.2's Prometheus scaler reads (pkg/scalers/prometheus_scaler.go, prometheusMetadata,
# and the triggerMetadata keys of pkg/scalers/authentication/authentication_types.go).
PROMETHEUS_METADATA = frozenset(
    {
        "serverAddress", "query", "queryParameters", "threshold", "activationThreshold", "namespace", "customHeaders",
        "ignoreNullValues", "unsafeSsl", "awsRegion", "timeout", "identityOwner", "authModes", "authMode", "apiKey",
        "method", "keyParamName",
    }
)  # fmt: skip
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


@dataclass(frozen=True, slots=True)
class KedaOptions:
    """What to scale, on which signal, and how far."""

    deployment: str
    model: str
    version: str | None = None
    signal: Literal["p99", "queue"] = "p99"
    target: float | None = None  # p99: seconds; queue: waiting requests per replica. Default: see target_value
    namespace: str = "default"
    name: str | None = None  # the ScaledObject's name; the Deployment's by default
    server_address: str = DEFAULT_PROMETHEUS
    min_replicas: int = 1
    max_replicas: int = 10
    polling_interval_s: int = 15
    cooldown_period_s: int = 300
    activation_threshold: float | None = None
    authentication: str | None = None  # a TriggerAuthentication (or ClusterTriggerAuthentication) for Prometheus
    authentication_kind: Literal["TriggerAuthentication", "ClusterTriggerAuthentication"] = "TriggerAuthentication"

    def target_value(self) -> float:
        if self.target is not None:
            return self.target
        if self.signal == "queue":
            return DEFAULT_QUEUE_PER_REPLICA
        from gpufleet.telemetry.monitoring.objectives import Objectives

        p99 = Objectives().p99_s or 2.0
        return round(p99 * P99_TARGET_SHARE, 6)


def _check_dns(kind: str, value: str, flag: str, *, label: bool) -> None:
    pattern, limit = (_DNS_LABEL, 63) if label else (_DNS_SUBDOMAIN, 253)
    if len(value) > limit or not pattern.match(value):
        what = "an RFC 1123 label" if label else "an RFC 1123 subdomain"
        raise UserError(
            f"{flag} {value!r} is not a valid {kind} name: it must be {what} (at most {limit} characters)",
            fix="use lowercase letters, digits and '-'" + ("" if label else " or '.'") + ", starting and ending with "
            "a letter or digit",
        )


def check_options(opts: KedaOptions) -> None:
    """Refuse options KEDA or the API server would refuse, or that could never scale, with what to change."""
    _check_dns("Deployment", opts.deployment, "--deployment", label=False)
    _check_dns("ScaledObject", opts.name or opts.deployment, "--name", label=False)
    _check_dns("namespace", opts.namespace, "--namespace", label=True)
    if opts.authentication is not None:
        _check_dns(opts.authentication_kind, opts.authentication, "--auth", label=False)
    if not opts.model.strip():
        raise UserError("--model is empty", fix="give the model label the service's metrics carry")
    if not opts.target_value() > 0:
        raise UserError(f"--target {opts.target_value():g} must be positive", fix="e.g. --target 1.5 for p99")
    if opts.min_replicas < 0 or opts.max_replicas < 1 or opts.min_replicas > opts.max_replicas:
        raise UserError(
            f"--min-replicas {opts.min_replicas} and --max-replicas {opts.max_replicas} do not make a range",
            fix="use 0 <= --min-replicas <= --max-replicas and --max-replicas >= 1",
        )
    if opts.polling_interval_s < 1 or opts.cooldown_period_s < 0:
        raise UserError("--polling-interval must be at least 1 s and --cooldown at least 0 s", fix="e.g. 15 and 300")
    if opts.activation_threshold is not None and opts.activation_threshold < 0:
        raise UserError("--activation-threshold must be 0 or more", fix="e.g. --activation-threshold 0")
    url = urlparse(opts.server_address)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise UserError(
            f"--prometheus {opts.server_address!r} is not an http(s) URL", fix=f"e.g. --prometheus {DEFAULT_PROMETHEUS}"
        )
    if opts.signal == "p99" and opts.min_replicas == 0:
        # At zero replicas nothing is served, so there is no latency to measure and nothing would scale it back up.
        raise UserError(
            "--signal p99 cannot scale from zero: a Deployment at zero replicas serves no requests, so its latency "
            "histogram is empty and never asks for a replica again",
            fix="use --min-replicas 1, or --signal queue with the queue depth exported by something that stays up "
            "(the router in front of the model)",
        )


def _promql_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def query(opts: KedaOptions) -> str:
    """The PromQL the trigger polls: one number for the whole Deployment."""
    matchers = [f"model={_promql_string(opts.model)}"]
    if opts.version:
        matchers.append(f"version={_promql_string(opts.version)}")
    selector = ", ".join(matchers)
    if opts.signal == "queue":
        return f"sum({names.INFERENCE_QUEUE_DEPTH}{{{selector}}})"
    bucket = f"{names.INFERENCE_REQUEST_DURATION}_bucket{{{selector}}}"
    return f"histogram_quantile(0.99, sum by (le) (rate({bucket}[{RATE_WINDOW}])))"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def scaled_object(opts: KedaOptions) -> dict[str, Any]:
    """The ScaledObject, checked (options, then the object against KEDA's schema)."""
    check_options(opts)
    metadata = {"serverAddress": opts.server_address, "query": query(opts), "threshold": _number(opts.target_value())}
    activation = opts.activation_threshold
    if activation is None and opts.min_replicas == 0:
        activation = 0.0  # wake from zero on the first waiting request
    if activation is not None:
        metadata["activationThreshold"] = _number(activation)
    trigger: dict[str, Any] = {
        "type": "prometheus",
        "name": "p99-latency" if opts.signal == "p99" else "queue-depth",
        "metricType": "Value" if opts.signal == "p99" else "AverageValue",
        "metadata": metadata,
    }
    if opts.authentication is not None:
        trigger["authenticationRef"] = {"name": opts.authentication, "kind": opts.authentication_kind}
    labels = {"app.kubernetes.io/managed-by": "gpufleet", "app.kubernetes.io/component": "autoscaling"}
    obj = {
        "apiVersion": API_VERSION,
        "kind": "ScaledObject",
        "metadata": {"name": opts.name or opts.deployment, "namespace": opts.namespace, "labels": labels},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": opts.deployment},
            "pollingInterval": opts.polling_interval_s,
            "cooldownPeriod": opts.cooldown_period_s,
            "minReplicaCount": opts.min_replicas,
            "maxReplicaCount": opts.max_replicas,
            "triggers": [trigger],
        },
    }
    check(obj)
    return obj


# --- checking against the CRD -----------------------------------------------------------------------------------
@cache
def crd_schema() -> dict[str, Any]:
    """The v1alpha1 openAPIV3Schema of the vendored CRD."""
    text = resources.files("gpufleet.deploy").joinpath("data", CRD_FILE).read_text(encoding="utf-8")
    crd = yaml.safe_load(text)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == API_VERSION.split("/")[1])
    return dict(version["schema"]["openAPIV3Schema"])


@cache
def _definitions() -> dict[str, Any]:
    """kubernetes-validate's strict definitions (ObjectMeta among them) for gpufleet's default Kubernetes version."""
    try:
        from gpufleet.doctor.schema import schema_version

        root = resources.files("kubernetes_validate")
    except (ImportError, ModuleNotFoundError):
        raise DependencyMissingError(
            "checking the ScaledObject needs kubernetes-validate", fix="pip install 'gpufleet[deploy]'"
        ) from None
    folder = f"kubernetes-json-schema/v{schema_version(None)}-local-strict"
    return dict(json.loads(root.joinpath(folder, "_definitions.json").read_text("utf-8")))


@cache
def _validator() -> Any:
    definitions = _definitions()  # first: says which package is missing
    import jsonschema
    import referencing

    schema = strict_schema(crd_schema())
    schema["properties"]["metadata"] = {"$ref": f"{definitions['$id']}#/$defs/{_OBJECT_META}"}
    registry = referencing.Resource.from_contents(definitions) @ referencing.Registry()
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _allowed_at(path: list[Any]) -> list[str]:
    node: Any = crd_schema()
    if path[:1] == ["metadata"]:
        node, path = _definitions()["$defs"][_OBJECT_META], path[1:]
    for part in path:
        node = node.get("items", {}) if isinstance(part, int) else node.get("properties", {}).get(part, {})
    return sorted(node.get("properties", {}))


def problems(obj: dict[str, Any]) -> list[str]:
    """Every way `obj` breaks KEDA's schema or the Prometheus scaler's metadata, each naming its field."""
    validator = _validator()
    out = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
        path = list(error.absolute_path)
        where = ".".join(str(p) for p in path) or "(object)"
        unexpected = re.findall(r"'([^']+)' (?:was|were) unexpected", error.message)
        if error.validator == "additionalProperties" and unexpected:
            for field in re.findall(r"'([^']+)'", unexpected[0]) or unexpected:
                close = difflib.get_close_matches(field, _allowed_at(path), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                out.append(f"unknown field {'.'.join([*map(str, path), field])!r}{hint}")
        else:
            out.append(f"{where}: {error.message}")
    for i, trigger in enumerate((obj.get("spec") or {}).get("triggers") or []):
        if isinstance(trigger, dict) and trigger.get("type") == "prometheus":
            for key in sorted(set(trigger.get("metadata") or {}) - PROMETHEUS_METADATA):
                close = difflib.get_close_matches(key, sorted(PROMETHEUS_METADATA), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                out.append(f"spec.triggers.{i}.metadata: the Prometheus scaler has no key {key!r}{hint}")
    return out


def check(obj: dict[str, Any]) -> None:
    """Raise a UserError naming the first problem `obj` has (and how many more)."""
    found = problems(obj)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        name = (obj.get("metadata") or {}).get("name", "?")
        raise UserError(
            f"ScaledObject {name} is invalid: {found[0]}{more}",
            fix=f"correct it against KEDA's ScaledObject schema ({API_VERSION}, KEDA v2.20.2)",
        )
