"""What a MIG listing (`nvidia-smi mig -lgi` / `-lci`) says about whether the GPUs can take work, and what is
configured. The one judgement of a listing, for every door that reads one.

NVIDIA's MIG User Guide: with MIG mode on, a GPU runs CUDA work only inside a compute instance of a GPU instance; a
MIG-enabled GPU with no GPU instance (`No GPU instances found`), or a GPU instance with no compute instance, offers no
device to CUDA or to Kubernetes (the device plugin advertises MIG devices, that is compute instances). That is a
configuration fault, not a hardware one: a warning, fixed by creating the instances (`nvidia-smi mig -cgi ... -C`,
or the MIG manager's config), or by turning MIG off. `No MIG-enabled devices found` means MIG is off on every GPU:
nothing to judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.model import Severity
from gpufleet.parsers.nvidia.smi_mig import MigListing

CREATE_FIX = (
    "create the instances (`nvidia-smi mig -cgi <profiles> -C`, or apply the node's MIG config with nvidia-mig-parted "
    "or the GPU operator's MIG manager), or turn MIG off (`nvidia-smi -i <id> -mig 0`) if the GPU should run whole"
)


@dataclass(frozen=True, slots=True)
class MigIssue:
    severity: Severity
    code: str
    message: str
    entity: str
    fix: str


@dataclass
class MigJudgement:
    issues: list[MigIssue] = field(default_factory=list)
    configured: list[str] = field(default_factory=list)  # what is configured, one line per GPU
    judged: bool = True


def judge_mig(listing: MigListing) -> MigJudgement:
    out = MigJudgement()
    gis, cis = listing.gpu_instances, listing.compute_instances
    if listing.mig_off and not gis and not cis:
        out.configured.append("MIG is off on every GPU (nvidia-smi lists no MIG-enabled GPU)")
        return out
    if gis is not None and not gis:
        out.issues.append(MigIssue(Severity.warning, "no GPU instances",
                                   "MIG is on but no GPU instance exists: the GPU offers no device to CUDA or "
                                   "Kubernetes", "", CREATE_FIX))  # fmt: skip
    if cis is not None and not cis:
        out.issues.append(MigIssue(Severity.warning, "no compute instances",
                                   "no compute instance exists: the GPU instances offer no device to CUDA or "
                                   "Kubernetes", "", CREATE_FIX))  # fmt: skip
    for gpu, instances in sorted((gis or {}).items()):
        names = [f"{m.profile} (GI {m.gi_id}, {m.start}:{m.size})" for m in instances]
        out.configured.append(f"GPU {gpu}: {len(instances)} GPU instance(s): {', '.join(names)}")
        if cis:
            with_ci = {(c.gpu, c.gi_id) for c in cis}
            for m in instances:
                if (gpu, m.gi_id) not in with_ci:
                    out.issues.append(MigIssue(Severity.warning, "GPU instance without compute instance",
                                               f"GPU instance {m.gi_id} ({m.profile}) has no compute instance: it "
                                               "offers no device", f"GPU {gpu} GI {m.gi_id}",
                                               f"`nvidia-smi mig -i {gpu} -gi {m.gi_id} -cci`"))  # fmt: skip
    for gpu in sorted({c.gpu for c in cis or []}):
        names = [f"{c.profile} (GI {c.gi_id} CI {c.ci_id})" for c in cis or [] if c.gpu == gpu]
        out.configured.append(f"GPU {gpu}: {len(names)} compute instance(s): {', '.join(names)}")
    if gis is None and cis is None:
        out.judged = False
    return out
