"""`/proc/<pid>/cgroup` read into a pod/container or a Slurm job for every runtime, cgroup driver and version in
the public captures (and the forms only the runtimes' sources and Slurm's docs show)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.parsers.cgroups import CgroupRef, parse_cgroup_path, parse_proc_cgroup
from tests.conftest import CAPTURES

DATA = CAPTURES / "cgroups"


def ref(**kw: str) -> CgroupRef:
    return CgroupRef(**kw)


def k8s(uid: str, cid: str, qos: str) -> CgroupRef:
    return CgroupRef(pod_uid=uid, container_id=cid, qos=qos)


NAMED = {
    "containerd_systemd_v1_besteffort_otel4507.txt": k8s(
        "0125ec2f-b64a-4868-8f5b-94b56cbab864", "ee4b20e90ac7f42a10bd004d05646b13d8ab5e2c5e7cbc01abf8006bac016459",
        "besteffort"),
    "containerd_systemd_v1_burstable_duckdb16608.txt": k8s(
        "b96a7488-3ee1-4bdc-9c98-155cc887b417", "6ef14b5a76df7b5d24285e3a04ccbc6fd323620272b3787b5dc440fc1b75d294",
        "burstable"),
    "containerd_systemd_v1_guaranteed_otel4730.txt": k8s(
        "87a18a64-b74a-454a-b10b-a4a36059d0a3", "05c48c82caff3be3d7f1e896981dd410e81487538936914f32b624d168de9db0",
        "guaranteed"),
    "cri_dockerd_systemd_v1_besteffort_otel4733.txt": k8s(
        "82f40de6-1226-4577-ab35-2f378b9f5e49", "ca0587256640e2964fb4656da0d99828966f90ba96a29a650860e0ca63e8eced",
        "besteffort"),
    "cri_dockerd_v2_cgroupns_relative_chaosblade1267.adapted.txt": k8s(
        "a91e6913-ec33-478f-a1b7-7e06fd239097", "66c9bbe20a402b7742ca1fed0ee197080326ccb06aa70b65e004c57e93651f94",
        "burstable"),
    "crio_conmon_v1_runc4620.txt": k8s("a5c1f8d5-1919-434d-add7-4afaafdaef89", "", "burstable"),
    "crio_systemd_v1_burstable_otel_js1677.txt": k8s(
        "ef16c429-a6ae-4674-a08e-848717fd4555", "00601ecc8806271163e6f8e8456d1614817bc5e6d7fa19025fea6fb0b373e7bb",
        "burstable"),
    "crio_systemd_v1_burstable_runc4620.txt": k8s(
        "a5c1f8d5-1919-434d-add7-4afaafdaef89", "5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c",
        "burstable"),
    "docker_cgroupfs_v1_burstable_duckdb16608.txt": k8s(
        "c101fead-5fa2-4525-97af-5894973b336e", "2b7a2f7fb72575bb50a46d68cceaf43a12a597184714cb33af2f6420f5314293",
        "burstable"),
    "docker_cgroupfs_v1_burstable_gke_betz.txt": k8s(
        "fbc202d3-da21-11e8-ab5e-42010a80014b", "0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574",
        "burstable"),
    "docker_plain_v1_ctrsploit280.txt": ref(
        container_id="2403ccfe427f1dc7b6120dccb9ac58c2f8456950380d587a9f33ea7f00dd303d"),
    "docker_systemd_v1_burstable_lxc3890.txt": k8s(
        "7d4424e6-bb13-42f4-a47a-45a4828bf54d", "d0b3604b67ac7930dd34ba3a796627e3e4717d12309e90a4afe3f38b6816ac98",
        "burstable"),
    "host_init_v1_mesos565.txt": CgroupRef(),
    "host_kubelet_v1_kontena440.txt": CgroupRef(),
    "kind_containerd_v2_besteffort_nri227.adapted.txt": k8s(
        "1e597579-417e-482f-bf65-5fe170c3aebd", "a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e",
        "besteffort"),
    "minikube_crio_in_docker_nested_minikube11280.adapted.txt": k8s(
        "2ca4a155-3599-498d-bb9d-4446693fa3ea", "358607a37e7ada357032e7f5729c9ae6a3efdb7962acbcbe47ff6a3c5506cb1c",
        "besteffort"),
    "slurm_v1_freezer_only_ex3_sonar.txt": ref(slurm_job="748468", slurm_step="0"),
    "slurm_v1_no_job_cgroup_galaxy4862.txt": CgroupRef(),
    "slurm_v1_step_interactive_sonar.txt": ref(slurm_job="280678", slurm_step="interactive"),
    "slurm_v2_step0_fox_sonar.txt": ref(slurm_job="1392969", slurm_step="0"),
}  # fmt: skip


def test_every_capture_is_tested_and_has_its_source() -> None:
    files = {p.name for p in DATA.iterdir() if not p.name.endswith(".source.txt")}
    assert files == set(NAMED)
    for name in files:
        assert (DATA / (name.removesuffix(".txt") + ".source.txt")).is_file(), name


@pytest.mark.parametrize("name", sorted(NAMED))
def test_each_capture_names_its_workload(name: str) -> None:
    assert parse_proc_cgroup((DATA / name).read_text()) == NAMED[name]


H = "0123456789abcdef" * 4
UID = "1e597579-417e-482f-bf65-5fe170c3aebd"
UID_ = UID.replace("-", "_")

# forms no public capture above shows, each written from the source that makes it
CONSTRUCTED = [
    # kubelet cgroupfs on cgroup v2 (k3s's default): kubepods/<qos>/pod<uid>/<id>
    (f"0::/kubepods/besteffort/pod{UID}/{H}\n", k8s(UID, H, "besteffort")),
    (f"0::/kubepods/pod{UID}/{H}\n", k8s(UID, H, "guaranteed")),
    # containerd, systemd driver, cgroup v2 (cri-containerd-<id>.scope)
    (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{H}.scope\n",
     k8s(UID, H, "burstable")),
    # CRI-O with its cgroupfs manager: <pod cgroup>/crio-<id>; its sandbox under systemd: crio-<id> (no .scope)
    (f"0::/kubepods/burstable/pod{UID}/crio-{H}\n", k8s(UID, H, "burstable")),
    (f"0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{H}.scope\n", k8s(UID, "", "guaranteed")),
    # a static pod: its UID is the config hash
    (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8daa50c3a64c9ff60bb9eab7b44b56fd.slice/"
     f"cri-containerd-{H}.scope\n", k8s("8daa50c3a64c9ff60bb9eab7b44b56fd", H, "burstable")),
    # k3s in Docker (k3d): the node's container above kubepods is not the workload's
    (f"0::/docker/{'f' * 64}/kubepods/burstable/pod{UID}/{H}\n", k8s(UID, H, "burstable")),
    # a level below the pod that is no container ID names the pod alone
    (f"0::/kubepods/pod{UID}/{'Z' * 64}\n", k8s(UID, "", "guaranteed")),
    # the pod's own cgroup (no container level)
    (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice\n", k8s(UID, "", "besteffort")),
    # a process in a sub-cgroup of its container
    (f"0::/kubepods/pod{UID}/{H}/init.scope\n", k8s(UID, H, "guaranteed")),
    # "pod<uid>" outside kubepods is no pod; podman's own scopes are containers of no pod
    (f"0::/machine.slice/pod{UID}.slice\n", CgroupRef()),
    (f"0::/machine.slice/libpod-{H}.scope\n", ref(container_id=H)),
    (f"0::/system.slice/docker-{H}.scope\n", ref(container_id=H)),
    (f"0::/user.slice/user-1000.slice/session-3.scope/{H}\n", CgroupRef()),
    # Slurm cgroup/v1 (src/plugins/cgroup/v1/xcgroup.c): slurm[_node]/uid_/job_/step_/task_
    ("4:memory:/slurm/uid_1000/job_17/step_batch/task_0\n", ref(slurm_job="17", slurm_step="batch")),
    ("4:memory:/slurm_node1/uid_1000/job_17/step_extern/task_0\n", ref(slurm_job="17", slurm_step="extern")),
    ("4:memory:/slurm/uid_1000/job_17\n", ref(slurm_job="17")),
    # Slurm cgroup/v2 (src/plugins/cgroup/v2/cgroup_v2.c, doc/html/cgroup_v2.shtml)
    ("0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n", ref(slurm_job="42", slurm_step="batch")),
    ("0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_special\n", ref(slurm_job="42", slurm_step="0")),
    ("0::/system.slice/slurmstepd.scope/job_42/step_extern/slurm\n", ref(slurm_job="42", slurm_step="extern")),
    ("0::/system.slice/gamba1_slurmstepd.scope/job_3385/step_interactive/user/task_0\n",
     ref(slurm_job="3385", slurm_step="interactive")),
    # a heterogeneous job's step component (log_build_step_id_str: "<step>+<component>")
    ("0::/system.slice/slurmstepd.scope/job_77/step_0+1/user/task_0\n", ref(slurm_job="77", slurm_step="0+1")),
    # Slurm 26.05's default: the job level named by its SLUID (the doc's own example tree)
    ("0::/system.slice/slurmstepd.scope/s5K1KKYAYG5D00/step_0/user/task_0\n",
     ref(slurm_sluid="s5K1KKYAYG5D00", slurm_step="0")),
    # the waiting area for new stepds, slurmd itself: no job
    ("0::/system.slice/slurmstepd.scope/system\n", CgroupRef()),
    ("0::/system.slice/slurmd.service\n", CgroupRef()),
    # Slurm on Kubernetes: slurmd in a pod, the job's cgroup below its container
    (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{H}.scope/"
     "system.slice/slurmstepd.scope/job_9/step_0/user/task_0\n",
     CgroupRef(pod_uid=UID, container_id=H, qos="burstable", slurm_job="9", slurm_step="0")),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), CONSTRUCTED)
def test_forms_from_the_runtimes_and_slurm_sources(text: str, expected: CgroupRef) -> None:
    assert parse_proc_cgroup(text) == expected


def test_on_a_hybrid_host_the_line_naming_most_wins_and_v2_breaks_ties() -> None:
    pod_line = f"3:memory:/kubepods/pod{UID}/{H}"
    assert parse_proc_cgroup(f"0::/system.slice/containerd.service\n{pod_line}\n") == k8s(UID, H, "guaranteed")
    v1_only = f"4:memory:/kubepods/pod{UID}/{'e' * 64}\n0::/kubepods/pod{UID}/{H}\n"
    assert parse_proc_cgroup(v1_only).container_id == H


def test_memcg_paths_the_kernel_prints_name_the_pod() -> None:
    assert parse_cgroup_path(f"/kubepods/burstable/pod{UID}/0123") == k8s(UID, "", "burstable")
    assert parse_cgroup_path("") == CgroupRef()
    assert CgroupRef().empty and not ref(slurm_sluid="s5K1KKYAYG5D00").empty


MALFORMED = [
    "", "\n\n", "garbage", "0:", "0::", "0::relative/path", "x::/kubepods/pod" + UID, ":::::",
    "12:memory", "\x00\x01\x02", "0::/" + "/".join(["kubepods"] * 10000), "0::/slurm/uid_1/job_/step_0",
    "0::/system.slice/slurmstepd.scope/job_abc/step_0", "0::/slurm/job_5",
    "0::/system.slice/slurmstepd.scope", "0::/kubepods/pod1234/" + H,
]  # fmt: skip


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_input_names_no_workload_and_never_raises(text: str) -> None:
    got = parse_proc_cgroup(text)
    assert (got.pod_uid, got.container_id, got.slurm_job) == ("", "", "")


@given(st.text(max_size=400))
def test_any_text_parses_without_raising(text: str) -> None:
    assert isinstance(parse_proc_cgroup(text), CgroupRef)


def test_random_mutations_of_real_captures_never_raise() -> None:
    rng = random.Random(17)
    texts = [(DATA / name).read_text() for name in NAMED]
    for _ in range(2000):
        chars = list(rng.choice(texts))
        for _ in range(rng.randint(1, 8)):
            chars[rng.randrange(len(chars))] = rng.choice(":/_-.\n0aZ\x00 ")
        assert isinstance(parse_proc_cgroup("".join(chars)), CgroupRef)
