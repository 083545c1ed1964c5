"""Runtime configurations read as the runtimes read them, on the toolkit's own outputs (tests/doctor/data/runtime)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.doctor.load import RUNTIME_CONFIG, load
from gpufleet.doctor.runtime_config import CONTAINERD, CRIO, DOCKER, containerd_view, crio_view, engine_of, views

DATA = Path(__file__).parent / "data" / "runtime"


def files(folder: str, prefix: str) -> dict[str, str]:
    base = DATA / folder
    return {f"{prefix}/{p.relative_to(base).as_posix()}": p.read_text() for p in sorted(base.rglob("*")) if p.is_file()}


def test_each_containerd_layout_registers_the_toolkits_three_handlers() -> None:
    for folder in ("containerd-v1", "containerd-v2", "containerd-v3"):
        view = containerd_view(files(folder, "/etc/containerd"))
        assert view.problems == [], folder
        assert view.handlers["nvidia"].binary == "/usr/bin/nvidia-container-runtime"
        assert sorted(h.name for h in view.nvidia) == ["nvidia", "nvidia-cdi", "nvidia-legacy"]
        assert not view.handlers["runc"].is_nvidia
    v2 = containerd_view(files("containerd-v2", "/etc/containerd"))
    assert v2.files == ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]
    assert v2.handlers["nvidia"].file == "/etc/containerd/conf.d/99-nvidia.toml"
    assert (v2.default, v2.cdi_enabled) == ("runc", True)
    v1 = containerd_view(files("containerd-v1", "/etc/containerd"))
    assert v1.cdi_enabled is True  # the toolkit's version 1 writer puts enable_cdi under containerd


def test_a_deep_merge_from_containerd_2_1_and_a_section_replaced_before() -> None:
    top = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n' + (DATA / "issue413/config.toml").read_text()
    top = top.replace("version = 2\n\n[plugins]", "\n[plugins]", 1)
    extra = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'
    given = {"/etc/containerd/config.toml": top, "/etc/containerd/conf.d/50-cdi.toml": extra}
    merged = containerd_view(given, (2, 1, 0))
    assert merged.cdi_enabled is True and merged.handlers["nvidia"].is_nvidia and merged.default == "nvidia"
    replaced = containerd_view(given, (1, 7, 27))
    assert replaced.cdi_enabled is True and replaced.handlers == {} and replaced.default == ""


def test_crio_reads_its_drop_ins_after_crio_conf() -> None:
    view = crio_view(files("crio", "/etc/crio"))
    assert view.files == ["/etc/crio/crio.conf", "/etc/crio/crio.conf.d/99-nvidia.toml"]
    assert view.default == "crun" and view.handlers["nvidia"].file == "/etc/crio/crio.conf.d/99-nvidia.toml"
    override = {"/etc/crio/crio.conf.d/99-zz.conf": '[crio.runtime]\ndefault_runtime = "nvidia"\n'}
    assert crio_view({**files("crio", "/etc/crio"), **override}).default == "nvidia"


def test_which_runtime_a_file_configures() -> None:
    assert engine_of("/etc/containerd/config.toml", "version = 3\n") == CONTAINERD
    assert engine_of("/etc/crio/crio.conf", (DATA / "crio/crio.conf").read_text()) == CRIO
    assert engine_of("/etc/docker/daemon.json", "{}") == DOCKER
    assert engine_of("pyproject.toml", '[project]\nname = "x"\n') is None
    assert engine_of("site/nginx.conf", "server { listen 80; }") is None
    assert engine_of("/etc/containerd/config.toml", "[plugins") == CONTAINERD  # broken, but named as one
    assert set(views(files("containerd-v2", "/etc/containerd") | {"/etc/docker/daemon.json": "{}"})) == {
        CONTAINERD,
        DOCKER,
    }


def test_the_loader_keeps_a_runtime_configs_text(tmp_path: Path) -> None:
    loaded = load([str(DATA / "containerd-v3"), str(DATA / "docker")])
    assert loaded.findings == []
    [top, drop_in, daemon] = loaded.documents
    assert top.file.endswith("containerd-v3/conf.d/99-nvidia.toml") or top.file.endswith("config.toml")
    assert {d.data[RUNTIME_CONFIG]["engine"] for d in (top, drop_in)} == {CONTAINERD}
    assert daemon.data[RUNTIME_CONFIG] == {"engine": DOCKER, "text": (DATA / "docker/daemon.json").read_text()}


def test_crio_with_the_nvidia_oci_hook() -> None:
    given = files("crio-hook", "/etc/crio")
    hook = given.pop("/etc/crio/hooks.d/oci-nvidia-hook.json")
    given["/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"] = hook
    view = views(given)[CRIO]
    assert view.nvidia == [] and view.nvidia_hook == "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"
    other = hook.replace("/usr/bin/nvidia-container-runtime-hook", "/usr/libexec/oci/hooks.d/oci-umount")
    given["/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"] = other
    assert views(given)[CRIO].nvidia_hook == ""
