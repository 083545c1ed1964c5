"""CgroupOwners, the agent's PID-to-workload reader, end to end over a process tree under tmp_path."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.agent.attribution import OwnerReader
from gpufleet.errors import BackendError
from gpufleet.model.attribution import Attribution
from gpufleet.sources.workload.cgroups import CgroupOwners, start_time
from gpufleet.sources.workload.kubelet_pods import PodIndex
from tests.conftest import CAPTURES

PODS = CAPTURES / "kubelet_pods" / "podlist_gpu_node.constructed.json"


class Proc:
    """A /proc tree under tmp_path: <pid>/stat (start time in field 22), <pid>/cgroup, <pid>/environ."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, pid: int, cgroup: str, start: int = 1000, environ: bytes = b"") -> None:
        d = self.root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560"] + ["0"] * 12 + [str(start), "0", "0"]
        (d / "stat").write_text(f"{pid} (python3 (w) x) {' '.join(fields)}\n")  # a command with parens and spaces
        (d / "cgroup").write_text(cgroup)
        (d / "environ").write_bytes(environ)

    def remove(self, pid: int) -> None:
        for f in (self.root / str(pid)).iterdir():
            f.unlink()
        (self.root / str(pid)).rmdir()


class Pods:
    """The pod-list reader: the constructed PodList, to which a test can add a pod."""

    def __init__(self) -> None:
        self.doc = json.loads(PODS.read_text())
        self.calls = 0
        self.fail: Exception | None = None

    def __call__(self) -> PodIndex:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return PodIndex.from_pod_list(self.doc)

    def add(self, name: str, uid: str, cid: str) -> None:
        self.doc["items"].append({
            "metadata": {"name": name, "namespace": "ml", "uid": uid},
            "spec": {"containers": [{"name": "main"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "main", "containerID": f"containerd://{cid}"}]},
        })  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def scope(uid: str, cid: str, qos: str = "burstable") -> str:
    u = uid.replace("-", "_")
    return f"0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{u}.slice/cri-containerd-{cid}.scope\n"


SERVER = Attribution(pod="trainer-api-7d9f8c6b5d-x2x9q", namespace="ml", container="server", workload="trainer-api")


World = tuple[Proc, Pods, Clock, Callable[..., CgroupOwners]]


@pytest.fixture
def world(tmp_path: Path) -> World:
    proc, pods, clock = Proc(tmp_path / "proc"), Pods(), Clock()

    def make(**kw: object) -> CgroupOwners:
        args: dict[str, object] = {"pods": pods, "proc_root": proc.root, "clock": clock} | kw
        return CgroupOwners(**args)  # type: ignore[arg-type]

    return proc, pods, clock, make


def test_the_owners_of_pods_a_slurm_job_and_processes_of_no_workload(world: World) -> None:
    proc, pods, _, make = world
    owners: OwnerReader = make()
    proc.add(101, scope("0b6e4d2a-5c1f-4a8e-9d3b-7f2e1c0a9b81", "a" * 64))  # trainer-api's server
    proc.add(102, scope("0b6e4d2a-5c1f-4a8e-9d3b-7f2e1c0a9b81", "d" * 64))  # its ephemeral debug container
    proc.add(103, f"0::/kubepods/pod5f0c2e8a-1b3d-4c5e-8f7a-9b0c1d2e3f4a/crio-{'e' * 64}\n")  # inference-0 (cri-o)
    proc.add(104, scope("9c8b7a6f-5e4d-4c3b-8a29-1f0e9d8c7b6a", "f" * 64, "besteffort"))  # a JobSet worker
    proc.add(201, "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n")
    proc.add(301, "0::/system.slice/nvidia-persistenced.service\n")  # a host daemon
    proc.add(302, f"0::/system.slice/docker-{'9' * 64}.scope\n")  # a container outside Kubernetes
    got = owners.owners([101, 102, 103, 104, 201, 301, 302, 999])  # 999 ended before it was read
    assert got == {
        101: SERVER,
        102: Attribution("trainer-api-7d9f8c6b5d-x2x9q", "ml", "debugger-abcde", "trainer-api"),
        103: Attribution("inference-0", "serving", "vllm", "inference"),
        104: Attribution("llm-pretrain-workers-0-3-abcde", "research", "pytorch", "llm-pretrain"),
        201: Attribution(hpc_job="4242"),
    }
    assert pods.calls == 1


def test_a_pod_that_just_started_is_read_at_once_and_an_unknown_id_only_once(world: World) -> None:
    proc, pods, clock, make = world
    owners = make()
    proc.add(101, scope("0b6e4d2a-5c1f-4a8e-9d3b-7f2e1c0a9b81", "a" * 64))
    assert owners.owners([101]) == {101: SERVER} and pods.calls == 1
    clock.now += 2  # well inside refresh_s
    new_uid, new_cid = "12345678-1234-4234-8234-123456789abc", "8" * 64
    proc.add(150, scope(new_uid, new_cid))
    pods.add("fresh-pod", new_uid, new_cid)
    assert owners.owners([101, 150])[150] == Attribution("fresh-pod", "ml", "main", "")
    assert pods.calls == 2  # read again at once, not after refresh_s
    # a container the list does not have (yet) costs one more read, not one per collection
    proc.add(160, scope("0b6e4d2a-5c1f-4a8e-9d3b-7f2e1c0a9b81", "7" * 63 + "0"))
    for _ in range(3):
        clock.now += 1
        assert 160 not in owners.owners([101, 150, 160])  # a pod of several containers: which one is unknown
    assert pods.calls == 3
    clock.now += 10  # refresh_s passed: read again
    owners.owners([101, 160])
    assert pods.calls == 4


def test_a_pod_of_one_container_answers_by_pod_uid_when_the_container_id_is_unknown(world: World) -> None:
    proc, _, _, make = world
    proc.add(170, f"0::/kubepods/pod5f0c2e8a-1b3d-4c5e-8f7a-9b0c1d2e3f4a/{'0' * 64}\n")
    assert make().owners([170]) == {170: Attribution("inference-0", "serving", "vllm", "inference")}


def test_a_reused_pid_is_read_again_and_an_ended_one_forgotten(world: World) -> None:
    proc, _, clock, make = world
    owners = make()
    proc.add(400, scope("0b6e4d2a-5c1f-4a8e-9d3b-7f2e1c0a9b81", "a" * 64), start=5000)
    assert owners.owners([400]) == {400: SERVER}
    proc.add(400, "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n", start=9000)  # a new process
    assert owners.owners([400]) == {400: SERVER}  # a PID NVML lists again is taken as the same until checked
    clock.now += owners.verify_s
    assert owners.owners([400]) == {400: Attribution(hpc_job="7")}
    # the same process keeps its answer without its cgroup being read again
    (proc.root / "400" / "cgroup").write_text("0::/system.slice/other.service\n")
    assert owners.owners([400]) == {400: Attribution(hpc_job="7")}
    proc.remove(400)
    clock.now += owners.verify_s  # NVML stops listing an ended process at once; asked anyway, it is checked
    assert owners.owners([400]) == {}


def test_a_slurm_node_needs_no_pod_list(world: World) -> None:
    proc, pods, _, make = world
    owners = make(pods=None)
    proc.add(1, scope("0b6e4d2a-5c1f-4a8e-9d3b-7f2e1c0a9b81", "a" * 64))
    proc.add(2, "13:freezer:/slurm/uid_7319/job_748468/step_0\n2:memory:/system.slice/slurmd.service\n")
    sluid = "0::/system.slice/slurmstepd.scope/s5K1KKYAYG5D00/step_0/user/task_0\n"
    proc.add(3, sluid, environ=b"HOME=/home/a\x00SLURM_JOB_ID=3385\x00SLURM_STEP_ID=0\x00")
    proc.add(4, sluid)  # its environment unreadable or without the id: the SLUID is the best name there is
    assert owners.owners([1, 2, 3, 4]) == {
        2: Attribution(hpc_job="748468"),
        3: Attribution(hpc_job="3385"),
        4: Attribution(hpc_job="s5K1KKYAYG5D00"),
    }
    assert pods.calls == 0


def test_a_failing_pod_list_is_an_error_unless_a_recent_one_can_answer(world: World) -> None:
    proc, pods, clock, make = world
    proc.add(101, scope("0b6e4d2a-5c1f-4a8e-9d3b-7f2e1c0a9b81", "a" * 64))
    proc.add(201, "0::/system.slice/slurmstepd.scope/job_1/step_0/user/task_0\n")
    pods.fail = BackendError("the kubelet refused", fix="RBAC")
    owners = make()
    with pytest.raises(BackendError, match="kubelet refused"):
        owners.owners([101, 201])
    pods.fail = None
    assert owners.owners([101]) == {101: SERVER}
    pods.fail = BackendError("the kubelet refused", fix="RBAC")
    clock.now += 15
    assert owners.owners([101]) == {101: SERVER}  # answered from the list read 15 s ago
    clock.now += 60
    with pytest.raises(BackendError):
        owners.owners([101])


def test_no_gpu_process_under_proc_three_times_says_hostpid(world: World) -> None:
    proc, _, _, make = world
    proc.root.mkdir(parents=True)
    owners = make()
    assert owners.owners([]) == {}
    for _ in range(2):
        assert owners.owners([12345, 12346]) == {}
    with pytest.raises(BackendError) as caught:
        owners.owners([12345, 12346])
    assert caught.value.fix is not None and "hostPID" in caught.value.fix


def test_start_time_reads_field_22_past_a_command_with_parentheses(tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    proc.add(42, "0::/\n", start=123456)
    assert start_time(tmp_path, 42) == 123456
    assert start_time(tmp_path, 43) is None
    (tmp_path / "42" / "stat").write_text("42 (x) S 1")
    assert start_time(tmp_path, 42) is None


def test_junk_pids_are_passed_over(world: World) -> None:
    proc, _, _, make = world
    proc.add(101, scope("0b6e4d2a-5c1f-4a8e-9d3b-7f2e1c0a9b81", "a" * 64))
    assert make().owners([0, -1, True, 101, 101]) == {101: SERVER}
