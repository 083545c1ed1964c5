"""Setup errors users paste (a pod's log, a container that cannot start, a Slurm node's session), recognised by
`gpufleet triage` with their cause and fix: real captures from GitHub issues (tests/triage/data/setup_errors, each
with its .source.txt), through the CLI, through the readers directly, and the mentions that are not reports."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gpufleet.catalog.setup_errors import setup_error
from gpufleet.triage.readers.app_log import read_app_log
from gpufleet.triage.readers.pod_describe import read_kubectl_describe_pod, read_kubectl_events
from gpufleet.triage.run import triage_lines
from tests.clirun import gpufleet

DATA = Path(__file__).resolve().parents[1] / "data" / "setup_errors"

# capture -> (format, verdict, finding code, words its message must hold)
EXPECTED = {
    "torch_arch_warning_goae.log": (
        "app-log", "faulty", "no-kernel-image",
        ["cudaErrorNoKernelImageForDevice = 209", "NVIDIA RTX A6000 is compute capability sm_86",
         "the build carries sm_37 sm_50 sm_60 sm_70"],
    ),
    "no_kernel_image_traceback.log": ("app-log", "faulty", "no-kernel-image", ["compute capability"]),
    "device_query_insufficient_driver.log": (
        "app-log", "faulty", "insufficient-driver", ["cudaErrorInsufficientDriver = 35", "older than the CUDA runtime"],
    ),
    "caffe_insufficient_driver.log": ("app-log", "faulty", "insufficient-driver", ["older than the CUDA runtime"]),
    "docker_compose_requires_cuda128.log": (
        "app-log", "faulty", "cuda-requirement-unsatisfied",
        ["unsatisfied condition: cuda>=12.8,", "CUDA 12.8 needs driver 570.26 or newer", "NVIDIA_REQUIRE_CUDA"],
    ),
    "docker_requires_cuda10_2_go_quoted.log": (
        "app-log", "faulty", "cuda-requirement-unsatisfied", ["the image requires cuda>=10.2"],
    ),
    "describe_pod_toolkit_nvml_mismatch.txt": (
        "app-log", "faulty", "nvml-version-mismatch", ["NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18", "without a reboot"],
    ),
    "kubectl_exec_nvidia_smi_not_found.txt": (
        "app-log", "degraded", "nvidia-smi-missing", ["not run by the nvidia runtime"],
    ),
    # nvidia-smi's own failure lines stay nvidia-smi's format; their meaning is the same catalog entry's
    "slurm_node_nvml_mismatch_squeue.txt": (
        "nvidia-smi-table", "faulty", "driver/library version mismatch", [setup_error("nvml-version-mismatch").cause],
    ),
    "nvml_mismatch_library_version.txt": (
        "nvidia-smi-table", "faulty", "driver/library version mismatch", ["without a reboot"],
    ),
    "driver_not_loaded_after_kernel_update.txt": (
        "nvidia-smi-table", "faulty", "driver not loaded", [setup_error("driver-not-loaded").cause],
    ),
}  # fmt: skip


def test_every_capture_has_its_source() -> None:
    captures = {p.name for p in DATA.iterdir() if not p.name.endswith(".source.txt")}
    assert captures == set(EXPECTED)
    for name in captures:
        source = (DATA / name).with_suffix(".source.txt").read_text()
        assert "https://github.com/" in source, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_captures(name: str) -> None:
    report = triage_lines(io.StringIO((DATA / name).read_text()), name)
    fmt, verdict, code, words = EXPECTED[name]
    assert (report.format, report.verdict) == (fmt, verdict), report.as_dict()
    (finding,) = report.findings
    assert finding.code == code and finding.evidence and finding.fix
    for word in words:
        assert word in finding.message, (word, finding.message)


def test_the_cli_gives_cause_and_fix_as_json() -> None:
    res = gpufleet("triage", str(DATA / "docker_compose_requires_cuda128.log"), "-o", "json")
    assert res.returncode == 1, res.stderr  # faulty
    body = json.loads(res.stdout)
    assert (body["format"], body["verdict"]) == ("app-log", "faulty")
    (finding,) = body["findings"]
    assert finding["check"] == "setup" and finding["code"] == "cuda-requirement-unsatisfied"
    assert finding["fix"] == setup_error("cuda-requirement-unsatisfied").fix
    assert "unsatisfied condition: cuda>=12.8" in finding["evidence"][0]
    warned = gpufleet("triage", str(DATA / "kubectl_exec_nvidia_smi_not_found.txt"), "-o", "json")
    assert json.loads(warned.stdout)["findings"][0]["severity"] == "warning"


def test_an_application_log_read_directly_counts_ranks_once() -> None:
    lines = [
        "[rank0]: RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "[rank1]: RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "[rank1]: CUDA kernel errors might be asynchronously reported at some other API call",
    ]
    report = read_app_log(lines, "torchrun")
    (finding,) = report.findings
    assert (finding.code, finding.entity, report.verdict) == ("no-kernel-image", "rank 0, rank 1", "faulty")
    assert "(2 reports, lines 1-2)" in finding.message


def test_an_oom_and_a_setup_error_in_one_log_are_two_findings() -> None:
    lines = [
        "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 12020).",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.11 GiB of which 1.00 GiB is free.",
    ]
    report = read_app_log(lines, "log")
    assert [f.code for f in report.ordered()] == ["gpu-oom", "insufficient-driver"]
    assert "the driver supports CUDA 12.2 at most" in report.findings[1].message


# `kubectl describe pod` as kubectl prints it; the event's message is the one kubeflow/katib#1112 pasted
# (https://github.com/kubeflow/katib/issues/1112), the pod's other fields written around it
DESCRIBE = """\
Name:         pytorch-mnist-worker-0
Namespace:    kubeflow
Node:         minikube/192.168.99.100
Status:       Pending
Containers:
  pytorch:
    Image:          gcr.io/kubeflow-ci/pytorch-dist-mnist-test:v1.0
    State:          Waiting
      Reason:       RunContainerError
    Limits:
      nvidia.com/gpu:  1
Events:
  Type     Reason   Age                    From               Message
  ----     ------   ----                   ----               -------
""" + (
    '  Warning  Failed   2m24s (x3 over 2m43s)  kubelet, minikube  Error: failed to start container "pytorch": Error '
    "response from daemon: OCI runtime create failed: container_linux.go:346: starting container process caused "
    '"process_linux.go:449: container init caused \\"process_linux.go:432: running prestart hook 0 caused '
    '\\\\\\"error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: initialization error: cuda '
    'error: no cuda-capable device is detected\\\\\\\\n\\\\\\"\\"": unknown\n'
)


def test_a_pod_whose_container_cannot_start_names_the_setup_error() -> None:
    report = read_kubectl_describe_pod(DESCRIBE.splitlines(), "describe")
    setup = [f for f in report.findings if f.check == "setup"]
    assert [(f.code, f.entity) for f in setup] == [("no-cuda-device", "pod pytorch-mnist-worker-0")]
    assert report.verdict == "faulty"
    assert triage_lines(io.StringIO(DESCRIBE), "describe").format == "kubectl-describe-pod"


def test_a_start_error_on_a_line_of_its_own_is_read_in_a_described_pod() -> None:
    """kubectl prints a message's second line at column 0 (NVIDIA/gpu-operator#898): it is still the pod's."""
    text = (
        DESCRIBE.split("Events:")[0].replace("Waiting\n      Reason:       RunContainerError", "Waiting")
        + (DATA / "describe_pod_toolkit_nvml_mismatch.txt").read_text().split("  toolkit-validation:\n")[1]
    )
    report = read_kubectl_describe_pod(text.splitlines(), "describe")
    assert [(f.code, f.entity) for f in report.findings if f.check == "setup"] == [
        ("nvml-version-mismatch", "pod pytorch-mnist-worker-0")
    ]


def test_kubectl_events_name_the_setup_error() -> None:
    lines = [
        "LAST SEEN   TYPE      REASON    OBJECT          MESSAGE",
        "12s         Warning   Failed    pod/vllm-0      Error: failed to create containerd task: failed to create "
        "shim task: OCI runtime create failed: runc create failed: unable to start container process: error during "
        "container init: error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected mode as "
        "'legacy'",
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.9, please update your driver to a "
        "newer version, or use an earlier cuda container: unknown",
    ]
    report = read_kubectl_events(lines, "events")
    (finding,) = [f for f in report.findings if f.check == "setup"]
    assert finding.code == "cuda-requirement-unsatisfied" and "CUDA 12.9 needs driver 575.51.03" in finding.message


PROSE = """\
## Troubleshooting

1. "CUDA driver version is insufficient for CUDA runtime version": This indicates you didn't start the docker
   container with the `--runtime-nvidia --gpus all`
2. "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.9, please update your driver to a newer
   version, or use an earlier cuda container: unknown." during the start of the `docker run`, might indicate that you
   have a NVIDIA Driver on your host machine that doesn't support cuda-12.9.
Older cu118 builds fail at runtime with no kernel image is available for execution on the device.
Run nvidia-smi to see which driver the node has; `nvidia-smi -q` says more.
"""


def test_a_text_that_discusses_the_errors_has_no_finding() -> None:
    report = triage_lines(io.StringIO(PROSE), "README")
    assert report.findings == [] and report.verdict in ("healthy", "unknown")


def test_a_log_that_runs_nvidia_smi_is_not_a_finding() -> None:
    log = [
        "+ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader",
        "NVIDIA H100 80GB HBM3, 550.54.15",
        "[rank0]: step 10 loss 2.31",
        "echo 'nvidia-smi: not found' would mean the runtime gave no GPU",
    ]
    report = read_app_log(log, "job.out")
    assert report.findings == [] and report.verdict == "healthy"


def _pod_json(message: str) -> str:
    """A Pod as `kubectl get pod -o json` prints it, its container stuck with `message` (as containerd reports a
    prestart hook's failure: RunContainerError, the hook's stderr after a newline)."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "llm-0", "namespace": "serve"},
        "spec": {"nodeName": "gpu-7", "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                                                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Pending", "containerStatuses": [{
            "name": "vllm", "ready": False, "restartCount": 3, "image": "vllm/vllm-openai:v0.11.0", "imageID": "",
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
            "lastState": {"terminated": {"reason": "StartError", "exitCode": 128, "message": message}},
        }]},
    }, indent=2)  # fmt: skip


def test_a_pods_json_names_the_setup_error_of_its_container() -> None:
    # the message's text as NVIDIA/gpu-operator#898 shows containerd reporting the hook's failure
    message = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        "failed: unable to start container process: error during container init: error running hook #0: error "
        "running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.9, please update your driver to a "
        "newer version, or use an earlier cuda container: unknown"
    )
    report = triage_lines(io.StringIO(_pod_json(message)), "pod.json")
    assert report.format == "kubectl-pod-json" and report.verdict == "faulty"
    setup = [f for f in report.findings if f.check == "setup"]
    assert [(f.code, f.entity) for f in setup] == [("cuda-requirement-unsatisfied", "pod llm-0 container vllm")]
    assert "CUDA 12.9 needs driver 575.51.03 or newer" in setup[0].message
    plain = triage_lines(io.StringIO(_pod_json("exit status 1")), "pod.json")
    assert not [f for f in plain.findings if f.check == "setup"]


def test_a_pods_yaml_names_it_too() -> None:
    import yaml

    message = "stderr: nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown"
    text = yaml.safe_dump(json.loads(_pod_json(message)), sort_keys=False)
    report = triage_lines(io.StringIO(text), "pod.yaml")
    assert report.format == "kubectl-pod-yaml"
    assert [(f.code, f.entity) for f in report.findings if f.check == "setup"] == [
        ("nvml-version-mismatch", "pod llm-0 container vllm")
    ]


def test_each_capture_pasted_with_a_hazard_keeps_its_verdict() -> None:
    """Prompts, quoting, indentation, fences, list markers: the paste cleaner's hazards leave the finding as it is."""
    from tests.triage.test_paste import HAZARDS

    changed = []
    for name in sorted(EXPECTED):
        text = (DATA / name).read_text()
        bare = triage_lines(io.StringIO(text), name)
        for hazard, paste in HAZARDS.items():
            pasted = triage_lines(io.StringIO(paste(text)), name)
            if [f.code for f in pasted.findings] != [f.code for f in bare.findings] or pasted.verdict != bare.verdict:
                changed.append(f"{name} {hazard}: {[f.code for f in pasted.findings]} {pasted.verdict}")
    assert not changed, "\n".join(changed)
