"""A MIG listing judged: instances missing are a configuration fault (warning) naming what to create; what is
configured is said either way."""

from __future__ import annotations

from gpufleet.health.mig import judge_mig
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.smi_mig import ComputeInstance, GpuInstance, MigListing

HALF = GpuInstance("3g.20gb", 9, 1, 4, 4)
OTHER = GpuInstance("3g.20gb", 9, 2, 0, 4)


def test_instances_each_with_a_compute_instance_are_fine_and_described() -> None:
    judged = judge_mig(MigListing({0: [HALF]}, [ComputeInstance(0, 1, "3g.20gb", 2, 0)]))
    assert not judged.issues and judged.judged
    assert judged.configured == ["GPU 0: 1 GPU instance(s): 3g.20gb (GI 1, 4:4)",
                                 "GPU 0: 1 compute instance(s): 3g.20gb (GI 1 CI 0)"]  # fmt: skip


def test_no_instances_is_a_warning() -> None:
    (issue,) = judge_mig(MigListing(gpu_instances={})).issues
    assert (issue.severity, issue.code) == (Severity.warning, "no GPU instances") and "-cgi" in issue.fix
    (issue,) = judge_mig(MigListing({0: [HALF]}, [])).issues
    assert issue.code == "no compute instances"


def test_a_gpu_instance_without_its_compute_instance_is_named() -> None:
    (issue,) = judge_mig(MigListing({0: [HALF, OTHER]}, [ComputeInstance(0, 2, "3g.20gb", 2, 0)])).issues
    assert (issue.code, issue.entity) == ("GPU instance without compute instance", "GPU 0 GI 1")


def test_mig_off_and_nothing_listed() -> None:
    off = judge_mig(MigListing(mig_off=True))
    assert not off.issues and off.judged and "MIG is off" in off.configured[0]
    assert not judge_mig(MigListing()).judged
