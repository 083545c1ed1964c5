"""GF046-GF049 on real container runtime configurations (tests/doctor/data/runtime, with their sources): containerd's
version 1, 2 and 3 layouts with the toolkit's drop-in, CRI-O's crio.conf.d drop-in and Docker's daemon.json, given as
files or in a node's host facts; RuntimeClasses; the sandbox event of the runtime race; the legacy packages."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from gpufleet.doctor.catalog import rule_catalog
from gpufleet.model import Severity
from tests.doctor.helpers import DATA, doctor, gpu_pod, hits

RUNTIME = DATA / "runtime"
RULES = ("GF046", "GF047", "GF048", "GF049")


def copy(tmp_path: Path, name: str) -> Path:
    """A fixture folder copied under tmp_path (so a test can change it)."""
    target = tmp_path / name
    shutil.copytree(RUNTIME / name, target)
    return target


def text(name: str) -> str:
    return (RUNTIME / name).read_text()


def run(tmp_path: Path, *paths: Path | str, objects: list[dict[str, Any]] | None = None, **kwargs: Any) -> Any:
    from gpufleet.doctor.engine import run as run_doctor

    given = [str(p) for p in paths]
    if objects:
        path = tmp_path / "objects.yaml"
        path.write_text(yaml.safe_dump_all(objects))
        given.append(str(path))
    facts = kwargs.pop("facts", None)
    if facts is not None:
        facts_path = tmp_path / "facts.yaml"
        facts_path.write_text(yaml.safe_dump(facts))
        kwargs["cluster_facts"] = facts_path
    return run_doctor(given, check_schema=False, **kwargs)


def runtime_class(name: str, handler: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name, "resourceVersion": "1"},
        "handler": handler or name,
    }


def host_node(configs: dict[str, str], **fields: Any) -> dict[str, Any]:
    return {"driverVersion": "570.133.20", "runtimeConfigs": configs, **fields}


def test_the_rules_are_in_the_catalog_with_the_toolkit_source() -> None:
    catalog = rule_catalog()
    for rule in RULES:
        assert rule in catalog
    assert any("nvidia-container-toolkit/blob/d34b3046" in s for s in catalog["GF046"].sources)
    assert any("kubernetes.io/docs/concepts/containers/runtime-class" in s for s in catalog["GF047"].sources)


def test_the_toolkits_own_configs_pass_in_every_layout(tmp_path: Path) -> None:
    for folder in ("containerd-v1", "containerd-v2", "containerd-v3", "crio"):
        report = run(tmp_path, RUNTIME / folder)
        assert [f for f in report.findings if f.rule in RULES] == [], folder
        assert not [f for f in report.findings if f.rule in ("GF090", "GF092")], folder


def test_a_pasted_operator_config_with_the_toolkit_path_passes(tmp_path: Path) -> None:
    report = run(tmp_path, RUNTIME / "issue413" / "config.toml")
    assert [f for f in report.findings if f.rule in RULES] == []


def test_config_toml_without_its_drop_in_has_no_nvidia_handler(tmp_path: Path) -> None:
    report = run(tmp_path, RUNTIME / "containerd-v3" / "config.toml")
    [finding] = hits(report, "GF046")
    assert finding.severity is Severity.critical and finding.file.endswith("containerd-v3/config.toml")
    assert "no runtime handler that runs nvidia-container-runtime" in finding.message
    assert "runc (/usr/bin/runc)" in finding.message
    assert "nvidia-ctk runtime configure --runtime=containerd" in finding.fix


def test_a_drop_in_the_imports_do_not_name_is_not_read(tmp_path: Path) -> None:
    folder = copy(tmp_path, "containerd-v2")
    (folder / "conf.d").rename(folder / "nvidia.d")
    report = run(tmp_path, folder)
    found = hits(report, "GF046")
    assert any("is not read" in f.message and f.file.endswith("nvidia.d/99-nvidia.toml") for f in found)
    assert any("registers no runtime handler" in f.message for f in found)


def test_a_version_1_config_takes_no_imports(tmp_path: Path) -> None:
    folder = copy(tmp_path, "containerd-v2")
    top = folder / "config.toml"
    top.write_text(top.read_text().replace("version = 2\n", ""))
    report = run(tmp_path, folder)
    messages = [f.message for f in hits(report, "GF046")]
    assert any("version 1 config" in m and "take no imports" in m for m in messages)
    # and its version 2 plugin names are ignored by a version 1 reader
    assert any('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes] (version 2' in m for m in messages)


def test_a_version_3_drop_in_with_version_2_plugin_names_is_ignored(tmp_path: Path) -> None:
    folder = copy(tmp_path, "containerd-v3")
    drop_in = folder / "conf.d" / "99-nvidia.toml"
    drop_in.write_text(drop_in.read_text().replace("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri"))
    report = run(tmp_path, folder)
    found = hits(report, "GF046")
    assert any('reads the runtimes under [plugins."io.containerd.cri.v1.runtime"]' in f.message for f in found)
    assert any("registers no runtime handler" in f.message for f in found)


def test_a_handler_named_nvidia_that_runs_runc(tmp_path: Path) -> None:
    folder = copy(tmp_path, "issue413")
    config = folder / "config.toml"
    config.write_text(config.read_text().replace("/usr/local/nvidia/toolkit/nvidia-container-runtime", "/usr/bin/runc"))
    report = run(tmp_path, config)
    messages = [f.message for f in hits(report, "GF046")]
    assert any("runtime handler 'nvidia'" in m and "runs /usr/bin/runc" in m for m in messages)


def test_before_containerd_2_1_an_import_replaces_the_cri_section(tmp_path: Path) -> None:
    """The toolkit copies the whole CRI section into its drop-in for this reason; a hand-written drop-in that holds
    only some other setting wipes the nvidia handler the top-level config registers, on containerd 1.7."""
    config = tmp_path / "containerd" / "config.toml"
    config.parent.mkdir()
    config.write_text('imports = ["/etc/containerd/conf.d/*.toml"]\n' + text("issue413/config.toml"))
    drop_in = tmp_path / "containerd" / "conf.d" / "10-registry.toml"
    drop_in.parent.mkdir()
    drop_in.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\nconfig_path = "/etc/certs.d"\n')
    old = run(tmp_path, config, drop_in, facts={"containerRuntime": "containerd://1.7.27"})
    assert any("registers no runtime handler" in f.message for f in hits(old, "GF046"))
    new = run(tmp_path, config, drop_in, facts={"containerRuntime": "containerd://2.1.4"})
    assert hits(new, "GF046") == []


def policy(**cdi: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy", "resourceVersion": "1"},
        "spec": {"cdi": cdi} if cdi else {},
    }


def test_cdi_expected_by_the_operator_but_off_in_containerd_1_7(tmp_path: Path) -> None:
    folder = copy(tmp_path, "containerd-v2")
    drop_in = folder / "conf.d" / "99-nvidia.toml"
    drop_in.write_text(drop_in.read_text().replace("    enable_cdi = true\n", ""))
    report = run(tmp_path, folder, objects=[policy(enabled=True)], facts={"containerRuntime": "containerd://1.7.27"})
    [finding] = hits(report, "GF046")
    assert finding.severity is Severity.warning
    assert "spec.cdi.enabled: true" in finding.message and "enable_cdi is not set" in finding.message
    # containerd 2.0 turns it on by default
    report = run(tmp_path, folder, objects=[policy(enabled=True)], facts={"containerRuntime": "containerd://2.0.5"})
    assert hits(report, "GF046") == []
    # the toolkit's drop-in as written (enable_cdi = true) passes on 1.7
    report = run(tmp_path, RUNTIME / "containerd-v2", objects=[policy(enabled=True)])
    assert hits(report, "GF046") == []


def test_cdi_spec_dirs_without_the_operators_folder(tmp_path: Path) -> None:
    folder = copy(tmp_path, "containerd-v2")
    drop_in = folder / "conf.d" / "99-nvidia.toml"
    drop_in.write_text(
        drop_in.read_text().replace("enable_cdi = true\n", 'enable_cdi = true\n    cdi_spec_dirs = ["/etc/cdi"]\n')
    )
    report = run(tmp_path, folder, objects=[policy(enabled=True)])
    [finding] = hits(report, "GF046")
    assert "leaves out /var/run/cdi" in finding.message


def test_crio_without_its_drop_in(tmp_path: Path) -> None:
    report = run(tmp_path, RUNTIME / "crio" / "crio.conf")
    [finding] = hits(report, "GF046")
    assert "CRI-O registers no runtime handler" in finding.message and "crun (/usr/bin/crun)" in finding.message
    assert "--runtime=crio" in finding.fix


def test_docker_without_the_nvidia_runtime(tmp_path: Path) -> None:
    daemon = tmp_path / "docker" / "daemon.json"
    daemon.parent.mkdir()
    daemon.write_text('{"log-driver": "json-file", "runtimes": {}}\n')
    report = run(tmp_path, daemon)
    [finding] = hits(report, "GF046")
    assert finding.severity is Severity.warning and "unknown or invalid runtime name: nvidia" in finding.message
    assert hits(run(tmp_path, RUNTIME / "docker" / "daemon.json"), "GF046") == []


def test_pods_naming_a_runtime_class_the_cluster_lacks(tmp_path: Path) -> None:
    pod = gpu_pod("train", runtimeClassName="nvidia-cdi")
    report = run(tmp_path, objects=[runtime_class("nvidia"), pod])
    [finding] = hits(report, "GF047")
    assert finding.object == "Pod/ml/train" and "'nvidia-cdi', which the cluster lacks" in finding.message
    assert 'RuntimeClass "nvidia-cdi" not found' in finding.message
    ok = run(tmp_path, objects=[runtime_class("nvidia"), gpu_pod("train", runtimeClassName="nvidia")])
    assert hits(ok, "GF047") == []
    # the operator's ClusterPolicy makes the nvidia RuntimeClass
    assert hits(run(tmp_path, objects=[policy(), gpu_pod("train", runtimeClassName="nvidia")]), "GF047") == []
    # nothing says which RuntimeClasses exist: not judged
    assert hits(run(tmp_path, objects=[pod]), "GF047") == []


def test_a_runtime_class_whose_handler_the_node_lacks(tmp_path: Path) -> None:
    report = run(tmp_path, RUNTIME / "issue413" / "config.toml", objects=[runtime_class("nvidia-cdi")])
    [finding] = hits(report, "GF047")
    assert finding.object == "RuntimeClass/nvidia-cdi"
    assert "handler 'nvidia-cdi' is not a runtime containerd registers" in finding.message
    assert 'no runtime for "nvidia-cdi" is configured' in finding.message


def test_gpu_pods_without_a_runtime_class_under_a_runc_default(tmp_path: Path) -> None:
    report = run(tmp_path, RUNTIME / "containerd-v2", objects=[gpu_pod("train")])
    [finding] = hits(report, "GF047")
    assert finding.severity is Severity.warning and finding.object == "Pod/ml/train"
    assert "containerd default: runc" in finding.message
    named = run(tmp_path, RUNTIME / "containerd-v2", objects=[gpu_pod("train", runtimeClassName="nvidia")])
    assert hits(named, "GF047") == []
    default_nvidia = run(tmp_path, RUNTIME / "issue413" / "config.toml", objects=[gpu_pod("train")])
    assert hits(default_nvidia, "GF047") == []


def configs(folder: str, prefix: str = "/etc/containerd") -> dict[str, str]:
    base = RUNTIME / folder
    return {f"{prefix}/{p.relative_to(base).as_posix()}": p.read_text() for p in sorted(base.rglob("*")) if p.is_file()}


def test_host_facts_a_runtime_started_before_the_toolkit_wrote_its_drop_in(tmp_path: Path) -> None:
    written = {"/etc/containerd/config.toml": 1717400000.0, "/etc/containerd/conf.d/99-nvidia.toml": 1717411589.0}
    node = host_node(
        configs("containerd-v2"), runtimeConfigModified=written, runtimeStarted={"containerd": 1717400100.0}
    )
    report = run(tmp_path, facts={"containerRuntime": "containerd://1.7.27", "nodes": {"gpu-01": node}})
    [finding] = hits(report, "GF048")
    assert finding.severity is Severity.critical and finding.object == "Node/gpu-01"
    assert finding.file.endswith("facts.yaml")
    assert (
        "containerd started at 2024-06-03 07:35:00 UTC, before /etc/containerd/conf.d/99-nvidia.toml" in finding.message
    )
    assert "systemctl restart containerd" in finding.fix
    assert hits(report, "GF046") == []  # the files are right: only the running process is behind
    node["runtimeStarted"] = {"containerd": 1717411600.0}
    later = run(tmp_path, facts={"containerRuntime": "containerd://1.7.27", "nodes": {"gpu-01": node}})
    assert hits(later, "GF048") == []


def test_the_sandbox_event_of_the_race(tmp_path: Path) -> None:
    events = RUNTIME / "events" / "no-runtime-nvidia.yaml"
    report = run(tmp_path, events)
    [finding] = hits(report, "GF048")
    assert finding.object.startswith("Event/gpu-operator/")
    assert "Pod/gpu-operator/nvidia-device-plugin-daemonset-w72xb" in finding.message
    assert "(10 times)" in finding.message and finding.severity is Severity.warning
    node = "i-071a4e5a302e4025b"
    # the node's configuration has the handler now: the pod met the runtime before the toolkit configured it
    now = run(tmp_path, events, facts={"nodes": {node: host_node(configs("issue413"))}})
    [finding] = hits(now, "GF048")
    assert "registers 'nvidia' now" in finding.message and "kubectl delete pod -n gpu-operator" in finding.fix
    # it still lacks it
    lacking = {"/etc/containerd/config.toml": text("containerd-v3/config.toml")}
    still = run(tmp_path, events, facts={"nodes": {node: host_node(lacking)}})
    [finding] = [f for f in hits(still, "GF048")]
    assert finding.severity is Severity.critical and "has no 'nvidia' handler either" in finding.message


def test_legacy_packages_from_the_host_facts(tmp_path: Path) -> None:
    packages = {"nvidia-docker2": "2.13.0-1", "nvidia-container-toolkit": "1.13.5-1"}
    report = run(tmp_path, facts={"nodes": {"gpu-01": {"containerPackages": packages}}})
    [finding] = hits(report, "GF049")
    assert finding.object == "Node/gpu-01" and "nvidia-docker2 2.13.0-1" in finding.message
    assert "beside nvidia-container-toolkit 1.13.5-1" in finding.message and "1.15.0" in finding.message
    clean = run(tmp_path, facts={"nodes": {"gpu-01": {"containerPackages": {"nvidia-container-toolkit": "1.17.8-1"}}}})
    assert hits(clean, "GF049") == []


def test_a_repository_s_other_toml_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "repo" / "nginx.conf").write_text("server { listen 80; }\n")
    (tmp_path / "repo" / "pod.yaml").write_text(yaml.safe_dump(gpu_pod("train")))
    report = run(tmp_path, tmp_path / "repo")
    assert [f for f in report.findings if f.rule in (*RULES, "GF090", "GF092")] == []


def test_a_broken_containerd_config_is_named(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "containerd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"\n')
    report = run(tmp_path, config)
    [finding] = hits(report, "GF046")
    assert "containerd cannot read" in finding.message and "not valid TOML" in finding.message


def test_doctor_helper_reads_toml_given_inline(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("containerd/config.toml", text("issue413/config.toml")), ("pod.yaml", gpu_pod("train")))
    assert [f for f in report.findings if f.rule in RULES] == []


def test_a_version_3_config_on_containerd_1_7(tmp_path: Path) -> None:
    report = run(tmp_path, RUNTIME / "containerd-v3", facts={"containerRuntime": "containerd://1.7.27"})
    messages = [f.message for f in hits(report, "GF046")]
    assert any("containerd 1.7.27 does not read: 1.6.32, 1.7.17 and later refuse" in m for m in messages)
    assert (
        hits(run(tmp_path, RUNTIME / "containerd-v3", facts={"containerRuntime": "containerd://2.0.5"}), "GF046") == []
    )


def test_a_version_1_config_on_containerd_2(tmp_path: Path) -> None:
    report = run(tmp_path, RUNTIME / "containerd-v1", facts={"containerRuntime": "containerd://2.0.5"})
    messages = [f.message for f in hits(report, "GF046")]
    assert any("version 1 config (no `version` line), which containerd 2.0.5 no longer reads" in m for m in messages)
    assert (
        hits(run(tmp_path, RUNTIME / "containerd-v1", facts={"containerRuntime": "containerd://1.6.32"}), "GF046") == []
    )


def test_a_crio_drop_in_in_conf_d_is_not_read(tmp_path: Path) -> None:
    """Toolkit 1.18 and 1.19 wrote CRI-O's drop-in to /etc/crio/conf.d (gpu-operator issue 2236: 'failed to find
    runtime handler nvidia'); CRI-O reads /etc/crio/crio.conf.d."""
    folder = copy(tmp_path, "crio")
    (folder / "crio.conf.d").rename(folder / "conf.d")
    report = run(tmp_path, folder)
    messages = [f.message for f in hits(report, "GF046")]
    assert any(
        "conf.d/99-nvidia.toml is not read: CRI-O reads its drop-ins from /etc/crio/crio.conf.d" in m for m in messages
    )
    assert any("CRI-O registers no runtime handler" in m for m in messages)


def test_the_sandbox_error_in_crio_and_dockershim_wording(tmp_path: Path) -> None:
    event = yaml.safe_load((RUNTIME / "events" / "no-runtime-nvidia.yaml").read_text())["items"][0]
    # NVSentinel issue 442 (CRI-O) and gpu-operator issue 236 (dockershim), as the kubelet recorded them
    for message, said in (
        (
            "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to find runtime handler nvidia from"
            " runtime list map[crun:0xc00047e300 runc:0xc00047ef00]",
            "failed to find runtime handler nvidia from runtime list",
        ),
        (
            'Failed to create pod sandbox: RuntimeHandler "nvidia" not supported',
            'RuntimeHandler "nvidia" not supported',
        ),
    ):
        event["message"] = message
        [finding] = hits(run(tmp_path, objects=[event]), "GF048")
        assert f"'{said}'" in finding.message and "no handler named 'nvidia'" in finding.message
    event["message"] = "Failed to pull image: not found"
    assert hits(run(tmp_path, objects=[event]), "GF048") == []


def test_crio_in_the_toolkits_hook_mode_needs_no_handler(tmp_path: Path) -> None:
    """The GPU Operator on OpenShift configures CRI-O with an OCI hook (gpu-operator issue 1298: the nvidia handler
    does not apply there): every container gets the hook, so GPU pods need no RuntimeClass."""
    report = run(tmp_path, RUNTIME / "crio-hook", objects=[gpu_pod("train")])
    assert [f for f in report.findings if f.rule in RULES] == []
    without = run(tmp_path, RUNTIME / "crio-hook" / "crio.conf")
    assert any("CRI-O registers no runtime handler" in f.message for f in hits(without, "GF046"))


def test_several_hosts_configs_in_one_run_are_judged_host_by_host(tmp_path: Path) -> None:
    """Every fixture folder is one host's configuration: together they pass, and a host whose drop-in is missing is
    named by its folder."""
    assert [f for f in run(tmp_path, RUNTIME).findings if f.rule in RULES and f.rule != "GF048"] == []
    hosts = tmp_path / "hosts"
    shutil.copytree(RUNTIME / "containerd-v2", hosts / "gpu-01" / "etc" / "containerd")
    shutil.copytree(RUNTIME / "crio", hosts / "gpu-01" / "etc" / "crio")
    shutil.copytree(RUNTIME / "containerd-v2", hosts / "gpu-02" / "etc" / "containerd")
    (hosts / "gpu-02" / "etc" / "containerd" / "conf.d" / "99-nvidia.toml").unlink()
    [finding] = hits(run(tmp_path, hosts), "GF046")
    assert finding.message.startswith(f"the runtime configuration in {hosts / 'gpu-02'}: containerd registers no")
