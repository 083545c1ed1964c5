"""SLO rules: their PromQL, the partition of services into scopes, config errors, and promtool unit tests generated
here from steady traffic scenarios (a fast and a slow burn of every objective, too little traffic, a healthy
service) with every alert each rule must raise worked out by hand, run by the real promtool."""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.errors import ManifestError, UserError
from gpufleet.instrument import names
from gpufleet.telemetry.monitoring import slo_rules as slo
from gpufleet.telemetry.monitoring.alert_rules import RulesConfig, dump
from gpufleet.telemetry.monitoring.objectives import BURN_WINDOWS, SloConfig
from gpufleet.telemetry.monitoring.rule_tests import render_annotation
from tests.conftest import REPO_ROOT, require_tool

MONITORING = REPO_ROOT / "deploy" / "monitoring"
SERVICES = SloConfig.model_validate(
    {
        "services": [
            {"model": "llama-3-70b", "p99_s": 5.0, "error_ratio": 0.01},
            {"model": "embedder", "version": "v2", "p99_s": 0.3, "ttft_s": None, "min_requests_per_s": 1},
            {"model": "embedder", "availability": 0.99},
            {"model": "mistral.7b", "version": "2024-06", "p95_s": 0.75},
        ]
    }
)


def alerts(cfg: SloConfig) -> list[dict[str, Any]]:
    return [r for g in slo.rule_groups(cfg)["groups"] for r in g["rules"] if "alert" in r]


# --- the rules --------------------------------------------------------------------------------------------------
def test_burn_rate_alerts_follow_the_workbook() -> None:
    rules = alerts(SloConfig())
    page = next(r for r in rules if r["alert"] == "InferenceSloBurnRateFast" and r["labels"]["slo"] == "error-ratio")
    assert page["labels"]["severity"] == "critical" and page["for"] == "2m"
    assert "ratio_rate1h{" in page["expr"] and "ratio_rate5m{" in page["expr"]
    assert page["expr"].count("/ 0.001 > 14.4") == 2
    ticket = next(r for r in rules if r["alert"] == "InferenceSloBurnRateSlow" and r["labels"]["slo"] == "latency-p95")
    assert ticket["labels"]["severity"] == "warning"
    assert "ratio_rate6h{" in ticket["expr"] and "ratio_rate30m{" in ticket["expr"]
    assert ticket["expr"].count("/ 0.05 > 6") == 2
    # a 7-day budget: 2 % of it in an hour is a burn rate of 3.36, 5 % in six hours 1.4
    week = alerts(SloConfig.model_validate({"defaults": {"budget_window_days": 7}}))
    assert any("> 3.36" in r["expr"] for r in week if r["alert"] == "InferenceSloBurnRateFast")
    assert any("> 1.4" in r["expr"] for r in week if r["alert"] == "InferenceSloBurnRateSlow")


def test_objectives_become_ratios_of_bad_requests() -> None:
    group = slo.rule_groups()["groups"][0]
    ratios = {r["labels"]["slo"]: r["expr"] for r in group["rules"] if r.get("record", "").endswith("ratio_rate5m")}
    assert set(ratios) == {"error-ratio", "availability", "latency-p99", "latency-p95", "ttft"}
    # p99 <= 2 s: requests slower than 2 s, the bucket bound as prometheus_client ("2.0") and Go clients ("2") write it
    assert r'gpufleet_inference_request_duration_seconds_bucket{le=~"2\\.0|2"}[5m]' in ratios["latency-p99"]
    assert ratios["latency-p99"].startswith("(sum by (model) (rate(gpufleet_inference_request_duration_seconds_count")
    assert 'le="0.5"' in ratios["latency-p95"] and 'time_to_first_token_seconds_bucket{le="0.3"}' in ratios["ttft"]
    assert (
        'outcome="error"' in ratios["error-ratio"]
        and "gpufleet_inference_request_errors_total" in ratios["error-ratio"]
    )
    assert 'outcome="ok"' in ratios["availability"]
    windows = {r["record"].rsplit("rate", 1)[1] for r in group["rules"] if "record" in r}
    assert windows == {"5m", "30m", "1h", "6h"} == set(slo.WINDOWS)


def test_the_alerts_read_the_shared_burn_windows() -> None:
    # the windows the SLO detector judges burn rates over (monitoring/objectives.py), not a copy of them
    assert [(b.window.long_s, b.window.short_s) for b in (slo.PAGE, slo.TICKET)] == [
        (w.long_s, w.short_s) for w in BURN_WINDOWS
    ]
    assert (slo.PAGE.long, slo.PAGE.short, slo.TICKET.long, slo.TICKET.short) == ("1h", "5m", "6h", "30m")


def test_literal_threshold_alerts() -> None:
    rules = {r["alert"]: r for r in alerts(SloConfig())}
    p99 = rules["InferenceLatencyP99High"]["expr"]
    assert p99.startswith("histogram_quantile(0.99, sum by (model, le) (rate(")
    assert "[5m]))) > 2 and on(model, version)" in p99
    assert rules["InferenceLatencyP95High"]["expr"].startswith("histogram_quantile(0.95,")
    assert rules["InferenceTtftHigh"]["expr"].startswith("histogram_quantile(0.95, sum by (model, le) (rate(gpufleet_")
    assert "> 0.001 and on(model, version)" in rules["InferenceErrorRateHigh"]["expr"]
    assert "[1h])) < 0.999 and on(model, version)" in rules["InferenceAvailabilityLow"]["expr"]


def test_every_alert_waits_for_enough_traffic() -> None:
    rules = alerts(SloConfig())
    held = [r for r in rules if r["alert"] != "InferenceTrafficTooLowForSlo"]
    assert held and all(r["expr"].endswith(">= 0.1") for r in held)
    info = next(r for r in rules if r["alert"] == "InferenceTrafficTooLowForSlo")
    assert info["labels"] == {"severity": "info"} and info["expr"].endswith("< 0.1")
    assert "too little traffic" in info["annotations"]["summary"]
    unguarded = alerts(SloConfig.model_validate({"defaults": {"min_requests_per_s": 0}}))
    assert all(">=" not in r["expr"] for r in unguarded)
    assert "InferenceTrafficTooLowForSlo" not in {r["alert"] for r in unguarded}


def test_unset_objectives_have_no_rules() -> None:
    cfg = SloConfig.model_validate({"defaults": {"ttft_s": None, "availability": None}})
    names_ = {r["alert"] for r in alerts(cfg)}
    assert "InferenceTtftHigh" not in names_ and "InferenceAvailabilityLow" not in names_
    assert {r["labels"]["slo"] for r in alerts(cfg) if "slo" in r["labels"]} == {
        "error-ratio",
        "latency-p99",
        "latency-p95",
    }


def test_each_service_has_its_own_scope() -> None:
    scopes = {s.group: s for s in slo.scopes(SERVICES)}
    assert list(scopes) == [
        "gpufleet-slo-llama-3-70b",
        "gpufleet-slo-embedder-v2",
        "gpufleet-slo-embedder",
        "gpufleet-slo-mistral.7b-2024-06",
        "gpufleet-slo",
    ]
    assert scopes["gpufleet-slo-embedder-v2"].source == (('model="embedder"', 'version="v2"'),)
    assert scopes["gpufleet-slo-embedder-v2"].by == ("model", "version")
    # the model's own entry covers its versions that have none of their own
    assert scopes["gpufleet-slo-embedder"].source == (('model="embedder"', 'version!~"v2"'),)
    assert scopes["gpufleet-slo-embedder"].objectives.availability == 0.99
    assert scopes["gpufleet-slo-llama-3-70b"].objectives.p99_s == 5.0
    assert scopes["gpufleet-slo-llama-3-70b"].objectives.p95_s == 0.5  # the default
    default = scopes["gpufleet-slo"]
    assert default.source == (
        ('model!~"embedder|llama-3-70b|mistral\\\\.7b"',),
        ('model="mistral.7b"', 'version!~"2024-06"'),
    )
    assert default.recorded == ('model!~"embedder|llama-3-70b"', 'version=""')
    assert default.example_labels["model"] == "mistral.7b"  # an unlisted version of a listed model


def test_repeated_or_shadowed_services_are_refused() -> None:
    twice = SloConfig.model_validate({"services": [{"model": "a"}, {"model": "a"}]})
    with pytest.raises(UserError, match=r"services\[1\] \(a\) repeats services\[0\]"):
        slo.rule_groups(twice)
    shadowed = SloConfig.model_validate({"services": [{"model": "a"}, {"model": "a", "version": "v1"}]})
    with pytest.raises(UserError, match=r"services\[1\] \(a v1\) is never used") as caught:
        slo.rule_groups(shadowed)
    assert "before" in (caught.value.fix or "")


def test_a_threshold_must_be_a_bucket_bound() -> None:
    with pytest.raises(UserError, match=r"services\[0\]\.p99_s = 1\.7 s is not a bucket bound") as caught:
        slo.rule_groups(SloConfig.model_validate({"services": [{"model": "a", "p99_s": 1.7}]}))
    assert "1.5, 2, 3" in (caught.value.fix or "")
    with pytest.raises(UserError, match=r"defaults\.ttft_s = 0\.25 s"):
        slo.rule_groups(SloConfig.model_validate({"defaults": {"ttft_s": 0.25}}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("defaults:\n  p99: 2\n", r"slo\.yaml: unknown field 'defaults\.p99' \(did you mean 'p99_s'\?\)"),
        (
            "services:\n  - model: a\n    p95_s: -1\n",
            r"slo\.yaml: services\[0\]\.p95_s: Input should be greater than 0",
        ),
        ("services:\n  - modle: a\n", r"slo\.yaml: unknown field 'services\[0\]\.modle' \(did you mean 'model'\?\)"),
        ("- 1\n", r"slo\.yaml: expected a mapping of settings, got list"),
        ("services:\n  - model: a\n    p99_s: 1.7\n", r"slo\.yaml: services\[0\]\.p99_s = 1\.7 s is not a bucket"),
    ],
)
def test_bad_config_is_one_error_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        slo.load_config(text, "slo.yaml")


def test_prometheus_rule_carries_the_monitor_labels() -> None:
    obj = slo.prometheus_rule(rules_cfg=RulesConfig(namespace="observability", monitor_labels={"release": "prom"}))
    assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "PrometheusRule"
    assert obj["metadata"]["namespace"] == "observability" and obj["metadata"]["labels"]["release"] == "prom"
    assert obj["spec"] == slo.rule_groups()


def test_committed_files_are_current() -> None:
    """deploy/monitoring/gpufleet-slo-rules.yml and slo-prometheus-rule.yaml are what `gpufleet deploy slo` makes
    from slo-config.yaml and rules-config.yaml (see deploy/monitoring/README.md)."""
    cfg = slo.load_config((MONITORING / "slo-config.yaml").read_text(), "slo-config.yaml")
    rules_cfg = RulesConfig.from_file(MONITORING / "rules-config.yaml")
    assert (MONITORING / slo.SLO_RULE_FILE).read_text() == dump(slo.rule_groups(cfg))
    assert yaml.safe_load((MONITORING / "slo-prometheus-rule.yaml").read_text()) == slo.prometheus_rule(cfg, rules_cfg)


# --- promtool unit tests from scenarios -------------------------------------------------------------------------
MINUTES = 30  # every scenario runs this long at a steady rate; alerts are judged at its end


@dataclass(frozen=True, slots=True)
class Scenario:
    """Steady traffic: `rate` requests/s, a share `errors` failing, and a share `share` of requests taking
    `latency` seconds on `histogram` (the rest fast)."""

    name: str
    rate: float
    errors: float = 0.0
    histogram: str = ""
    latency: float = 0.0
    share: float = 0.0
    error_counter: bool = False  # errors on the server's own error counter instead of the outcome label


def bounds_for(slis: list[slo.Sli], histogram: str) -> list[float]:
    """The bounds a test histogram needs: each threshold and the bound after it (where slow requests land)."""
    every = (
        names.TIME_TO_FIRST_TOKEN_BUCKETS
        if histogram == names.INFERENCE_TIME_TO_FIRST_TOKEN
        else names.REQUEST_DURATION_BUCKETS
    )
    chosen = {every[0]}
    for sli in slis:
        if sli.histogram == histogram and sli.threshold is not None:
            chosen.add(sli.threshold)
            chosen.update([b for b in every if b > sli.threshold][:1])
    return [*sorted(chosen), math.inf]


def slow_latency(sli: slo.Sli, bounds: list[float]) -> float:
    """A latency inside the bucket just above the objective's threshold."""
    assert sli.threshold is not None
    after = next(b for b in bounds if b > sli.threshold)
    return sli.threshold * 2 if math.isinf(after) else (sli.threshold + after) / 2


def scenarios(scope: slo.Scope) -> list[Scenario]:
    slis = slo.slis(scope)
    floor = scope.objectives.min_requests_per_s
    busy = max(1.0, 10 * floor)
    days = scope.objectives.budget_window_days
    page, ticket = slo.PAGE.factor(days), slo.TICKET.factor(days)
    out = [Scenario("healthy", busy)]
    for sli in slis:
        # a fast burn past the page's rate; a slow one between the ticket's and the page's
        for kind, burn in (("fast", page * 1.5), ("slow", (page + ticket) / 2)):
            share = burn * sli.budget
            if kind == "slow" and share >= 1:
                continue  # a burn the ticket needs is more than every request failing
            name = f"{kind} burn of {sli.slo}"
            if sli.histogram is None:
                out.append(Scenario(name, busy, errors=min(share, 1.0)))
            else:
                latency = slow_latency(sli, bounds_for(slis, sli.histogram))
                out.append(Scenario(name, busy, histogram=sli.histogram, latency=latency, share=min(share, 1.0)))
    errors = next((s for s in slis if s.slo == "error-ratio"), None)
    if errors is not None:
        share = min(1.0, page * 1.5 * errors.budget)
        out.append(Scenario("fast burn on the error counter", busy, errors=share, error_counter=True))
    if floor > 0:
        duration = [s for s in slis if s.histogram == names.INFERENCE_REQUEST_DURATION]
        bounds = bounds_for(slis, names.INFERENCE_REQUEST_DURATION)
        latency = max((slow_latency(s, bounds) for s in duration), default=0.0)
        histogram = names.INFERENCE_REQUEST_DURATION if duration else ""
        out.append(Scenario("too little traffic, every request bad", floor / 2, 1.0, histogram, latency, 1.0))
    return out


def cumulative(scenario: Scenario, histogram: str, bounds: list[float]) -> list[float]:
    fast = bounds[0] / 2
    points = [(fast, 1.0)]
    if scenario.histogram == histogram:
        points = [(fast, 1 - scenario.share), (scenario.latency, scenario.share)]
    return [sum(share for latency, share in points if latency <= bound) for bound in bounds]


def histogram_quantile(q: float, bounds: list[float], counts: list[float]) -> float:
    """Prometheus' histogram_quantile over classic buckets (+Inf last)."""
    rank = q * counts[-1]
    b = next((i for i in range(len(bounds) - 1) if counts[i] >= rank), len(bounds) - 1)
    if b == len(bounds) - 1:
        return bounds[-2]
    start, below = (0.0, 0.0) if b == 0 else (bounds[b - 1], counts[b - 1])
    return start + (bounds[b] - start) * (rank - below) / (counts[b] - below)


def input_series(scope: slo.Scope, scenario: Scenario) -> list[dict[str, str]]:
    slis = slo.slis(scope)
    per_minute = scenario.rate * 60

    def counter(metric: str, share: float, **extra: str) -> dict[str, str]:
        labels = ",".join(f'{k}="{v}"' for k, v in {**scope.example_labels, **extra}.items())
        return {"series": f"{metric}{{{labels}}}", "values": f"0+{per_minute * share!r}x{MINUTES}"}

    if scenario.error_counter:
        out = [counter(names.INFERENCE_REQUESTS, 1.0), counter(names.INFERENCE_ERRORS, scenario.errors)]
    else:
        out = [
            counter(names.INFERENCE_REQUESTS, 1 - scenario.errors, outcome="ok"),
            counter(names.INFERENCE_REQUESTS, scenario.errors, outcome="error"),
        ]
    for histogram in (names.INFERENCE_REQUEST_DURATION, names.INFERENCE_TIME_TO_FIRST_TOKEN):
        bounds = bounds_for(slis, histogram)
        for bound, share in zip(bounds, cumulative(scenario, histogram, bounds), strict=True):
            out.append(counter(f"{histogram}_bucket", share, le="+Inf" if math.isinf(bound) else repr(bound)))
        out.append(counter(f"{histogram}_count", 1.0))
    return out


def expected_alerts(scope: slo.Scope, scenario: Scenario, rules: list[dict[str, Any]]) -> dict[str, list[dict]]:
    """Every alert each rule must raise at the end of the scenario, worked out from the objectives by hand."""
    slis = slo.slis(scope)
    labels = {k: v for k, v in scope.example_labels.items() if k in scope.by}
    judged = scenario.rate >= scope.objectives.min_requests_per_s
    days = scope.objectives.budget_window_days
    out: dict[str, list[dict]] = {r["alert"]: [] for r in rules}

    def fire(alert: str, slo_label: str | None, value: float) -> None:
        rule = next(r for r in rules if r["alert"] == alert and r["labels"].get("slo") == slo_label)
        full = {**labels, **rule["labels"]}
        notes = {k: render_annotation(v, full, value) for k, v in rule["annotations"].items()}
        out[alert].append({"exp_labels": full, "exp_annotations": notes})

    for sli in slis:
        bad = scenario.errors
        if sli.histogram is not None and sli.quantile is not None and sli.threshold is not None:
            bounds = bounds_for(slis, sli.histogram)
            counts = cumulative(scenario, sli.histogram, bounds)
            bad = 1 - counts[bounds.index(sli.threshold)]
            value = histogram_quantile(sli.quantile, bounds, counts)
            if judged and value > sli.threshold:
                alert = "InferenceTtftHigh" if sli.slo == "ttft" else slo.QUANTILE_ALERTS[sli.slo]
                fire(alert, sli.slo, value)
        for burn in (slo.PAGE, slo.TICKET):
            if judged and bad / sli.budget > burn.factor(days):
                fire(burn.alert, sli.slo, bad / sli.budget)
        if judged and sli.slo == "error-ratio" and scenario.errors > sli.budget:
            fire("InferenceErrorRateHigh", sli.slo, scenario.errors)
        if judged and sli.slo == "availability" and 1 - scenario.errors < 1 - sli.budget:
            fire("InferenceAvailabilityLow", sli.slo, 1 - scenario.errors)
    if not judged:
        fire("InferenceTrafficTooLowForSlo", None, scenario.rate)
    return out


def promtool_tests(cfg: SloConfig, rule_file: str = slo.SLO_RULE_FILE) -> dict[str, Any]:
    groups = {g["name"]: g["rules"] for g in slo.rule_groups(cfg)["groups"]}
    tests = []
    for scope in slo.scopes(cfg):
        rules = [r for r in groups[scope.group] if "alert" in r]
        for scenario in scenarios(scope):
            checks = [
                {"eval_time": f"{MINUTES}m", "alertname": alert, "exp_alerts": exp}
                for alert, exp in sorted(expected_alerts(scope, scenario, rules).items())
            ]
            series = input_series(scope, scenario)
            tests.append({"name": f"{scope.group}: {scenario.name}", "interval": "1m", "input_series": series,
                          "alert_rule_test": checks})  # fmt: skip
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": tests}


def together(tests: dict[str, Any]) -> dict[str, Any]:
    """The same scenario of every scope in one promtool test: each scope's traffic carries its own labels, so every
    group's rules see every scope's traffic at once (one scope's group must stay quiet on another's) and promtool
    evaluates the rules once per scenario instead of once per scope and scenario."""
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for test in tests["tests"]:
        by_scenario.setdefault(test["name"].split(": ", 1)[1], []).append(test)
    merged = []
    for scenario, same in by_scenario.items():
        series = [s for test in same for s in test["input_series"]]
        assert len({s["series"] for s in series}) == len(series), f"two scopes write the same series in {scenario}"
        checks: dict[str, list[dict[str, Any]]] = {}
        for test in same:
            for check in test["alert_rule_test"]:
                checks.setdefault(check["alertname"], []).extend(check["exp_alerts"])
        scopes = ", ".join(test["name"].split(": ", 1)[0] for test in same)
        merged.append({"name": f"{scopes}: {scenario}", "interval": "1m", "input_series": series,
                       "alert_rule_test": [{"eval_time": f"{MINUTES}m", "alertname": alert, "exp_alerts": exp}
                                           for alert, exp in sorted(checks.items())]})  # fmt: skip
    return {**tests, "tests": merged}


def test_scenarios_cover_every_objective_both_burns_and_quiet_cases() -> None:
    tests = promtool_tests(SloConfig())["tests"]
    by_name = {t["name"]: t for t in tests}

    def firing(test: str, alert: str) -> set[str]:
        check = next(c for c in by_name[f"gpufleet-slo: {test}"]["alert_rule_test"] if c["alertname"] == alert)
        return {a["exp_labels"].get("slo", "") for a in check["exp_alerts"]}

    for objective in ("error-ratio", "availability", "latency-p99", "latency-p95", "ttft"):
        assert objective in firing(f"fast burn of {objective}", "InferenceSloBurnRateFast")
        assert objective in firing(f"slow burn of {objective}", "InferenceSloBurnRateSlow")
        assert objective not in firing(f"slow burn of {objective}", "InferenceSloBurnRateFast")
    quiet = by_name["gpufleet-slo: healthy"]["alert_rule_test"]
    assert all(c["exp_alerts"] == [] for c in quiet)
    low = by_name["gpufleet-slo: too little traffic, every request bad"]["alert_rule_test"]
    assert {c["alertname"] for c in low if c["exp_alerts"]} == {"InferenceTrafficTooLowForSlo"}
    # every test judges every alert of its group, so an alert that fires unexpectedly fails it
    assert all(len(t["alert_rule_test"]) == 8 for t in tests)


def run_promtool(tmp_path: Path, rules: dict[str, Any], tests: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    (tmp_path / slo.SLO_RULE_FILE).write_text(dump(rules))
    (tmp_path / "tests.yml").write_text(dump(tests))
    check = subprocess.run(
        ["promtool", "check", "rules", slo.SLO_RULE_FILE], cwd=tmp_path, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    return subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)


CONFIGS = {
    "defaults": SloConfig(),
    "services": SERVICES,
    "week-budget": SloConfig.model_validate({"defaults": {"budget_window_days": 7, "ttft_quantile": 0.9}}),
    "no-traffic-floor": SloConfig.model_validate({"defaults": {"min_requests_per_s": 0, "p95_s": None}}),
}


@pytest.mark.real
@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_promtool_passes_every_scenario(tmp_path: Path, cfg: SloConfig) -> None:
    require_tool("promtool")
    run = run_promtool(tmp_path, slo.rule_groups(cfg), together(promtool_tests(cfg)))
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.real
def test_promtool_fails_rules_that_page_on_too_little_traffic(tmp_path: Path) -> None:
    require_tool("promtool")
    rules = slo.rule_groups()
    for rule in rules["groups"][0]["rules"]:
        if rule.get("alert") == "InferenceSloBurnRateFast":
            rule["expr"] = rule["expr"].split(" and on(model, version)")[0]
    run = run_promtool(tmp_path, rules, promtool_tests(SloConfig()))
    assert run.returncode != 0
    report = run.stdout + run.stderr
    assert "too little traffic, every request bad" in report and "InferenceSloBurnRateFast" in report


@pytest.mark.real
def test_go_clients_bucket_bounds_count_too(tmp_path: Path) -> None:
    """A Go client writes le="2" where prometheus_client writes le="2.0": the p99 objective reads both."""
    require_tool("promtool")
    tests = promtool_tests(SloConfig())
    test = next(t for t in tests["tests"] if t["name"] == "gpufleet-slo: fast burn of latency-p99")
    for series in test["input_series"]:
        series["series"] = re.sub(r'le="(\d+)\.0"', r'le="\1"', series["series"])
    assert any('le="2"' in s["series"] for s in test["input_series"])
    run = run_promtool(tmp_path, slo.rule_groups(), {**tests, "tests": [test]})
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.real
def test_committed_rules_pass_promtool(tmp_path: Path) -> None:
    require_tool("promtool")
    cfg = slo.load_config((MONITORING / "slo-config.yaml").read_text(), "slo-config.yaml")
    committed = yaml.safe_load((MONITORING / slo.SLO_RULE_FILE).read_text())
    run = run_promtool(tmp_path, committed, promtool_tests(cfg))
    assert run.returncode == 0, run.stdout + run.stderr
