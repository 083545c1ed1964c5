"""Out of memory, told apart. A framework's GPU allocator failing (CUDA out of memory) is the GPU's own memory: it is
fixed in the model, its batch and the allocator's settings. The kernel's OOM killer is host memory: a process killed
at its cgroup's limit (a container's `resources.limits.memory`, a Slurm job's `--mem`) or when the node ran out; it
is fixed in the limit or in what the program keeps in RAM (data loader workers, pinned buffers, a leak). The two look
alike in a ticket and share nothing else.

Pure functions of text, in each tool's own wording: PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp,
1.x `(GPU 0; ... total capacity; ...)` and 2.x `GPU 0 has a total capacity of ...`), JAX/XLA, TensorFlow's BFC
allocator, NCCL's allocation checks, vLLM's KV-cache check, Slurm's cgroup plugin, and the kernel's mm/oom_kill.c and
mm/memcontrol.c reports."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.model.incident import RootCause
from gpufleet.parsers.cgroups import parse_cgroup_path
from gpufleet.triage.report import TriageReport

GPU_OOM = RootCause.gpu_oom.value  # "gpu-oom"
HOST_OOM = RootCause.host_oom.value  # "host-oom"
SIGKILL = "sigkill"

_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50,
          "EiB": 1 << 60}  # fmt: skip
SIZE = r"\d+(?:\.\d+)?\s?(?:bytes|[KMGTPE]iB)"
Size = tuple[str, int]  # as printed, in bytes


def to_bytes(text: str) -> int:
    number, unit = re.match(r"([\d.]+)\s?(\w+)", text.strip()).groups()  # type: ignore[union-attr]
    return int(float(number) * _UNITS.get(unit, 1))


def format_bytes(n: float) -> str:
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if n >= _UNITS[unit]:
            value = n / _UNITS[unit]
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n:.0f} bytes"


def _size(text: str | None) -> Size | None:
    return (text.strip(), to_bytes(text)) if text else None


# ---------------------------------------------------------------- GPU memory: a framework's allocator failed


@dataclass(slots=True)
class GpuOom:
    """One out-of-memory report of a GPU allocator, with what its wording gives."""

    framework: str  # PyTorch, JAX/XLA, TensorFlow, NCCL, vLLM, CUDA
    line: str
    gpu: int | None = None
    sizes: dict[str, Size] = field(default_factory=dict)  # requested, total, free, this process, allocated, ...
    others: list[tuple[int, Size]] = field(default_factory=list)  # other processes holding memory on the GPU
    detail: str = ""
    on_cpu: bool = False  # TensorFlow's allocator on device CPU: host memory, not the GPU's
    impossible: bool = False  # PyTorch: "more than 1EB"

    @property
    def richness(self) -> int:
        return len(self.sizes) + len(self.others) + (self.gpu is not None)


_TORCH2 = re.compile(
    rf"(?P<dev>CUDA|HIP|XPU) out of memory\. Tried to allocate (?P<requested>{SIZE})\. (?:GPU|Device) (?P<gpu>\d+) has "
    rf"a total capac(?:i)?ty of (?P<total>{SIZE})(?: of which (?P<free>{SIZE}) is free)?\.(?P<rest>.*)"
)
_TORCH1 = re.compile(
    rf"CUDA out of memory\. Tried to allocate (?P<requested>{SIZE}) \(GPU (?P<gpu>\d+); (?P<total>{SIZE}) total "
    rf"capacity; (?P<allocated>{SIZE}) already allocated; (?P<free>{SIZE}) free;(?: (?P<allowed>{SIZE}) allowed;)? "
    rf"(?P<reserved>{SIZE}) (?:reserved in total by PyTorch|cached)"
)
_TORCH_PROCESS = re.compile(rf"Process (\d+) has ({SIZE}) memory in use")
_TORCH_SELF = re.compile(rf"this process has ({SIZE}) memory in use")
_TORCH_ALLOWED = re.compile(rf"({SIZE}) allowed;")
_TORCH_SPLIT = re.compile(
    rf"Of the allocated memory (?P<allocated>{SIZE}) is allocated by PyTorch, (?:with (?P<private>{SIZE}) allocated in "
    rf"private pools \(e\.g\., CUDA Graphs\), )?and (?P<unallocated>{SIZE}) is reserved by PyTorch but unallocated"
)
_TORCH_HUGE = re.compile(r"(?:CUDA|HIP) out of memory\. Tried to allocate more than 1EB memory")
_XLA = re.compile(r"(?i:RESOURCE_EXHAUSTED|Resource exhausted): Out of memory (?:while trying to allocate|allocating) "
                  r"(?P<requested>\d+) bytes")  # fmt: skip
_TF = re.compile(
    r"OOM when allocating tensor (?:with|of) shape\s*\[(?P<shape>[^\]]*)\](?: and type (?P<dtype>\w+))?"
    r"(?: on (?P<device>\S+?)(?: by allocator (?P<allocator>\S+))?)?(?:\s|$)"
)
_NCCL = re.compile(r"Cuda failure (?:2 )?'out of memory'|Failed to CUDA [cm]alloc(?: async)? (?P<requested>\d+) bytes")
_VLLM = re.compile(
    r"No available memory for the cache blocks|(?P<needed>[\d.]+ GiB) KV cache is needed, which is larger than the "
    r"available KV cache memory \((?P<available>[\d.]+ GiB)\)|is larger than the maximum number of tokens that can "
    r"be stored in KV cache"
)
_CUDA_ERROR = re.compile(r"CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation")
_BARE = re.compile(r"(?:CUDA|HIP) out of memory")
# one search tells whether a line may hold any of them (most lines of a log hold none)
GPU_OOM_HINT = re.compile(
    r"out of memory|Out of memory (?:while|allocating)|OOM when allocating|Failed to CUDA|KV cache|cache blocks|"
    r"CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|Cuda failure 2 "
)


def parse_gpu_oom(line: str) -> GpuOom | None:
    """The GPU out-of-memory report a line holds, or None. A sentence that only mentions running out of memory (vLLM's
    "If out-of-memory error occurs during cudagraph capture ...") is not one."""
    if not GPU_OOM_HINT.search(line):
        return None
    if m := _TORCH2.search(line):
        oom = GpuOom("PyTorch", line, int(m["gpu"]))
        for key in ("requested", "total", "free"):
            if size := _size(m[key]):
                oom.sizes[key] = size
        rest = m["rest"]
        oom.others = [(int(pid), (s, to_bytes(s))) for pid, s in _TORCH_PROCESS.findall(rest)]
        if own := _TORCH_SELF.search(rest):
            oom.sizes["this process"] = (own[1], to_bytes(own[1]))
        if allowed := _TORCH_ALLOWED.search(rest):
            oom.sizes["allowed"] = (allowed[1], to_bytes(allowed[1]))
        if split := _TORCH_SPLIT.search(rest):
            for key, group in (("allocated", "allocated"), ("reserved, unallocated", "unallocated"),
                               ("private pools", "private")):  # fmt: skip
                if size := _size(split[group]):
                    oom.sizes[key] = size
        if m["dev"] != "CUDA":
            oom.detail = f"{m['dev']} device"
        return oom
    if m := _TORCH1.search(line):
        oom = GpuOom("PyTorch", line, int(m["gpu"]))
        for key in ("requested", "total", "allocated", "free", "allowed", "reserved"):
            if size := _size(m[key]):
                oom.sizes[key] = size
        # "cached" (1.0-1.3) is held but unallocated; "reserved in total" (1.4 on) includes the allocated
        if m[0].endswith("cached"):
            oom.sizes["reserved, unallocated"] = oom.sizes.pop("reserved")
        elif (unallocated := oom.sizes["reserved"][1] - oom.sizes["allocated"][1]) > 0:
            oom.sizes["reserved, unallocated"] = (format_bytes(unallocated), unallocated)
        return oom
    if _TORCH_HUGE.search(line):
        return GpuOom("PyTorch", line, impossible=True)
    if m := _XLA.search(line):
        requested = int(m["requested"])
        return GpuOom("JAX/XLA", line, sizes={"requested": (format_bytes(requested), requested)})
    if m := _TF.search(line):
        device = m["device"] or ""
        gpu = re.search(r"device:GPU:(\d+)", device, re.IGNORECASE)
        dtype = f" of {m['dtype']}" if m["dtype"] else ""
        return GpuOom("TensorFlow", line, int(gpu[1]) if gpu else None, detail=f"tensor [{m['shape']}]{dtype}",
                      on_cpu=bool(re.search(r"device:CPU:", device, re.IGNORECASE)))  # fmt: skip
    if m := _VLLM.search(line):
        detail = f"{m['needed']} of KV cache needed, {m['available']} available" if m["needed"] else ""
        return GpuOom("vLLM", line, detail=detail)
    if m := _NCCL.search(line):
        oom = GpuOom("NCCL", line)
        if m["requested"]:
            requested = int(m["requested"])
            oom.sizes["requested"] = (format_bytes(requested), requested)
        return oom
    if _CUDA_ERROR.search(line) or _BARE.search(line):
        return GpuOom("PyTorch" if "torch" in line or "CUDA out of memory" in line else "CUDA", line)
    return None


_FIXES = {
    "PyTorch": "cut GPU memory per step: a smaller (micro-)batch or sequence length, activation checkpointing, bf16, "
    "sharding (FSDP/ZeRO) or offloading optimizer state; `torch.cuda.memory_summary()` shows what holds it",
    "JAX/XLA": "cut GPU memory per step (batch, `jax.checkpoint` rematerialisation, sharding); JAX preallocates 75% of "
    "the GPU (XLA_PYTHON_CLIENT_MEM_FRACTION, XLA_PYTHON_CLIENT_PREALLOCATE=false), so check nothing else shares it",
    "TensorFlow": "cut GPU memory per step (batch size, input size); `tf.config.experimental.set_memory_growth` stops "
    "TensorFlow taking the whole GPU when it is shared; report_tensor_allocations_upon_oom lists what holds it",
    "NCCL": "NCCL could not allocate its buffers on the GPU: leave headroom (create communicators before the model "
    "fills the GPU) and shrink NCCL's share: NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS, NCCL_NVLS_ENABLE=0",
    "vLLM": "the KV cache does not fit: raise --gpu-memory-utilization, lower --max-model-len or --max-num-seqs, or "
    "shard over more GPUs (--tensor-parallel-size); make sure no other process holds memory on the GPU",
    "CUDA": "a CUDA call could not get GPU memory: often another process fills the GPU or too many processes share it "
    "(`nvidia-smi --query-compute-apps=pid,used_memory --format=csv`); otherwise cut the job's GPU memory use",
}
LARGE_UNALLOCATED = 1 << 30  # reserved but unallocated past this (or a quarter of the GPU): fragmentation to fix


def describe_gpu_oom(oom: GpuOom, context: str = "") -> tuple[str, str]:
    """What the report says in one sentence (`context`, such as the rank and time, follows the GPU), and the fix its
    numbers point to."""
    s = {key: text for key, (text, _) in oom.sizes.items()}
    n = {key: value for key, (_, value) in oom.sizes.items()}
    where = f"GPU {oom.gpu}" if oom.gpu is not None else "the GPU"
    if oom.on_cpu:
        return (f"TensorFlow ran out of host memory allocating a {oom.detail} on the CPU (host RAM, not GPU memory)",
                "cut the batch or input size, or give the job more host memory")  # fmt: skip
    if oom.impossible:
        summary = f"{oom.framework} was asked for more than 1 EB of GPU memory: not a real need but a corrupted size"
        return summary, "look for the earlier error (an NCCL timeout, a bad shape) that produced it; the GPU is fine"
    parts = []
    if "requested" in s:
        parts.append(f"tried to allocate {s['requested']}")
    if "free" in s and "total" in s:
        parts.append(f"{s['free']} free of {s['total']}")
    elif "total" in s:
        parts.append(f"of {s['total']}")
    if "this process" in s:
        parts.append(f"this process holds {s['this process']}")
    for pid, (text, _) in oom.others[:3]:
        parts.append(f"process {pid} holds {text}")
    if "reserved, unallocated" in s:
        parts.append(f"{s['reserved, unallocated']} reserved but unallocated")
    if oom.detail:
        parts.append(oom.detail)
    summary = f"{oom.framework} out of memory on {where}{context}" + (f": {', '.join(parts)}" if parts else "")
    fix = _FIXES.get(oom.framework, _FIXES["CUDA"])
    total = n.get("total", 0)
    others = sum(size for _, (_, size) in oom.others)
    if total and others >= total // 4:
        pids = ", ".join(str(pid) for pid, _ in oom.others[:3])
        fix = (f"other processes ({pids}) hold {format_bytes(others)} of this GPU: a leftover from an earlier run or a "
               "co-scheduled job; find and stop them (`nvidia-smi --query-compute-apps=pid,used_memory --format=csv`)"
               f"; then {fix}")  # fmt: skip
    elif total and n.get("requested", 0) > total:
        fix = f"the one allocation ({s['requested']}) is larger than the whole GPU ({s['total']}): check tensor shapes"
    unallocated = n.get("reserved, unallocated", 0)
    if unallocated >= LARGE_UNALLOCATED or (total and unallocated >= total // 4):
        told = (" as PyTorch's message says" if "expandable_segments" in oom.line
                else " (PyTorch 2.1 and later; before it, max_split_size_mb:128)")  # fmt: skip
        fix = (f"{s['reserved, unallocated']} is reserved by PyTorch but unallocated (fragmentation): set "
               f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True{told}; then {fix}")  # fmt: skip
    return summary, fix


# ---------------------------------------------------------------- host memory: the kernel killed a process


@dataclass(slots=True)
class OomKill:
    """One kill by the kernel's OOM killer, from the lines of its report."""

    scope: str = ""  # memcg (a cgroup's limit), node (the machine ran out), cpuset, mempolicy; "" when not said
    process: str = ""
    pid: int | None = None
    anon_rss_kb: int | None = None
    memcg: str = ""  # the cgroup whose limit was hit
    task_memcg: str = ""  # the victim's own cgroup
    limit_kb: int | None = None
    killed: bool = False  # its "Killed process" line was read
    chosen: bool = False  # "Kill process N ... or sacrifice child": the next "Killed process" (maybe a child) ends it
    lines: list[str] = field(default_factory=list)
    first_line: int = 0

    @property
    def pod_uid(self) -> str:
        """The Kubernetes pod whose cgroup this is (`kubepods/.../pod<uid>` or the systemd `...-pod<uid>.slice`)."""
        return parse_cgroup_path(self.memcg or self.task_memcg).pod_uid

    @property
    def qos(self) -> str:
        return parse_cgroup_path(self.memcg or self.task_memcg).qos


UNLIMITED_KB = 1 << 50  # the kernel prints a cgroup without a limit as 9007199254740988kB
MAX_KILLS = 5_000
_USAGE = re.compile(r"\bmemory: usage (?P<usage>\d+)kB, limit (?P<limit>\d+)kB")
_TASK_IN = re.compile(r"Task in (?P<task>\S+) killed as a result of limit of (?P<memcg>\S+)")
_STATS = re.compile(r"Memory cgroup stats for (?P<memcg>/\S*?):")  # the first names the cgroup at its limit
_CONSTRAINT = re.compile(r"oom-kill:(?P<fields>constraint=\S*)")
_PROCESS = r"(?P<pid>\d+)(?:, UID \d+,)? \((?P<name>.+?)\)(?=[\s,.;]|$)"
_CHOSEN = re.compile(rf"(?P<scope>Memory cgroup out of memory|Out of memory): Kill process {_PROCESS}")
_KILLED = re.compile(rf"Killed process {_PROCESS}(?P<rest>.*)")
# what may stand right before `Killed process` (mm/oom_kill.c: "%s: Killed process", the constraint's words, with
# " (oom_kill_allocating_task)" on that path), tested with endswith: a regex starting with these alternatives is tried
# at every offset of the line, one starting with the words jumps to them
_KILL_SCOPES = tuple(
    (f"{scope}{how}: ", scope)
    for scope in ("Memory cgroup out of memory", "Out of memory")
    for how in ("", " (oom_kill_allocating_task)")
)
_REAPED = re.compile(rf"oom_reaper: reaped process {_PROCESS}")
_ANON = re.compile(r"anon-rss:(\d+)kB")
_SCOPES = {"CONSTRAINT_MEMCG": "memcg", "CONSTRAINT_NONE": "node", "CONSTRAINT_CPUSET": "cpuset",
           "CONSTRAINT_MEMORY_POLICY": "mempolicy"}  # fmt: skip


class OomKillTracker:
    """The kills of the OOM killer in a kernel log, line by line: a report spreads over many lines (who invoked it, the
    cgroup's usage and limit, `oom-kill:constraint=...`, `Killed process ...`, the reaper), so the lines before a kill
    set what it is told with. Older kernels print `Kill process A ... or sacrifice child` then `Killed process B`."""

    def __init__(self) -> None:
        self.kills: list[OomKill] = []
        self.unlisted = 0
        self._open: OomKill | None = None  # the kill whose "Killed process" line has not come yet
        self._context = OomKill()  # what the current report said before its kill

    def feed(self, number: int, line: str) -> None:
        if "invoked oom-killer:" in line:  # a new report: what came before told another kill
            self._open = None
            self._context = OomKill(lines=[line])
            return
        # each pattern is searched only on a line holding its words (a plain `in`): most lines hold one or none
        if "memory: usage" in line and (m := _USAGE.search(line)):
            limit = int(m["limit"])
            if limit < UNLIMITED_KB:
                self._context.limit_kb = limit
                self._context.lines.append(line)
                if self._open is not None and self._open.limit_kb is None:
                    self._open.limit_kb = limit
        elif "Memory cgroup stats for" in line and (m := _STATS.search(line)):
            for told in (self._context, self._open):
                if told is not None and not told.memcg:
                    told.scope, told.memcg = "memcg", m["memcg"]
        elif "killed as a result of limit" in line and (
            m := _TASK_IN.search(line)
        ):  # kernels before 4.19 name the cgroups first, then choose and kill
            kill = self._start(number, line, again=True)
            kill.scope, kill.task_memcg, kill.memcg = "memcg", m["task"], m["memcg"]
        elif "oom-kill:" in line and (m := _CONSTRAINT.search(line)):
            fields = dict(item.partition("=")[::2] for item in m["fields"].split(","))
            kill = self._start(number, line, again=True)  # each kill prints one constraint line, before its kill
            kill.scope = _SCOPES.get(fields.get("constraint", ""), kill.scope)
            kill.memcg = fields.get("oom_memcg", kill.memcg)
            kill.task_memcg = fields.get("task_memcg", kill.task_memcg)
            kill.process = fields.get("task", kill.process)
            kill.pid = int(fields["pid"]) if fields.get("pid", "").isdigit() else kill.pid
        elif "Kill process" in line and (m := _CHOSEN.search(line)):
            kill = self._start(number, line)
            kill.scope = kill.scope or ("memcg" if m["scope"].startswith("Memory cgroup") else "node")
            kill.process, kill.pid, kill.chosen = m["name"], int(m["pid"]), True
        elif "Killed process" in line and (m := _KILLED.search(line)):
            pid = int(m["pid"])
            open_kill = self._open
            scope = _scope_before(line, m.start())
            memcg = scope is not None and scope.startswith("Memory cgroup")
            if (
                open_kill is None
                or (open_kill.scope and scope and (open_kill.scope == "memcg") != memcg)  # another report's
                or not (open_kill.chosen or open_kill.pid in (None, pid))
            ):
                kill = self._start(number, line, again=True)
            else:
                kill = open_kill
                if line not in kill.lines:
                    kill.lines.append(line)
            if scope:
                kill.scope = kill.scope or ("memcg" if memcg else "node")
            kill.process, kill.pid, kill.killed = m["name"], pid, True
            if anon := _ANON.search(m["rest"]):
                kill.anon_rss_kb = int(anon[1])
            self._open = None
        elif "oom_reaper" in line and (m := _REAPED.search(line)):
            pid = int(m["pid"])
            earlier = next((k for k in reversed(self.kills[-8:]) if k.pid == pid), None)
            if earlier is not None:
                earlier.lines.append(line)
            else:  # the kill's own lines are not in the input: the reaper says one happened
                kill = self._start(number, line, again=True)
                kill.process, kill.pid, kill.killed = m["name"], pid, True
                self._open = None

    def _start(self, number: int, line: str, again: bool = False) -> OomKill:
        """The kill a line belongs to: the open one, or a new one told with the report's context so far."""
        if self._open is not None and not again:
            self._open.lines.append(line)
            return self._open
        ctx = self._context
        kill = OomKill(ctx.scope, memcg=ctx.memcg, task_memcg=ctx.task_memcg, limit_kb=ctx.limit_kb,
                       lines=[*ctx.lines, line], first_line=number)  # fmt: skip
        if ctx.lines:  # the next kill of the report is told with what it said, without its lines
            self._context = OomKill(ctx.scope, memcg=ctx.memcg, task_memcg=ctx.task_memcg, limit_kb=ctx.limit_kb)
        if len(self.kills) < MAX_KILLS:
            self.kills.append(kill)
        else:
            self.unlisted += 1
        self._open = kill
        return kill


def _scope_before(line: str, end: int) -> str | None:
    """The constraint's words right before line[end:] (`Out of memory: `), or None."""
    for said, scope in _KILL_SCOPES:
        if line.endswith(said, 0, end):
            return scope
    return None


def describe_kills(kills: list[OomKill]) -> tuple[str, str]:
    """One sentence for kills of one scope and cgroup, and its fix."""
    first = kills[0]
    named = []
    for k in kills[:3]:
        said = [f"pid {k.pid}"] if k.pid is not None else []
        said += [f"anon-rss {format_bytes(k.anon_rss_kb * 1024)}"] if k.anon_rss_kb else []
        named.append(f"{k.process or 'a process'}" + (f" ({', '.join(said)})" if said else ""))
    victims = ", ".join(named) + (f" and {len(kills) - 3} more" if len(kills) > 3 else "")
    limit = f" at its {format_bytes(first.limit_kb * 1024)} limit" if first.limit_kb else ""
    if first.scope == "memcg":
        cgroup = first.memcg or first.task_memcg
        if first.pod_uid:
            where = f"in the memory cgroup of pod {first.pod_uid}" + (f" (QoS {first.qos})" if first.qos else "")
        else:
            where = f"in memory cgroup {cgroup}" if cgroup else "in a memory cgroup (a container's or a job's)"
        return (f"the kernel's OOM killer killed {victims} {where}{limit} (host memory, not GPU memory)",
                "raise the container's memory limit (resources.limits.memory, or the job's --mem) or cut what it "
                "keeps in host RAM: DataLoader workers (each a copy of the dataset's in-RAM state), pinned buffers, "
                "checkpoints loaded into RAM, a leak")  # fmt: skip
    if first.scope == "node":
        return (f"the node ran out of memory: the kernel's OOM killer killed {victims} (host memory, not GPU memory)",
                "give every pod memory requests and limits so the node is not overcommitted, reserve memory for the "
                "system (kubelet --system-reserved, eviction thresholds), and find the process that grew")  # fmt: skip
    scope = f" (constrained by {first.scope})" if first.scope else ""
    return (f"the kernel's OOM killer killed {victims}{scope} (host memory, not GPU memory)",
            "read the lines before the kill (`memory: usage ..., limit ...`, `oom-kill:constraint=...`) for the "
            "cgroup and limit it hit")  # fmt: skip


# ---------------------------------------------------------------- side by side


_LIMIT = re.compile(r"at its (\d[\d.]*(?: ?[KMGTPE]i?B?)?) (?:memory )?limit")
_WHEN = re.compile(r" ((?:at|by|after) \d[\d:.TZ -]*\d)\b")


def side_by_side(reports: list[TriageReport]) -> tuple[str, list[TriageReport]] | None:
    """When one input shows a kill by the kernel (host memory) and another a GPU out of memory, the one line that
    says they are two failures, and the two reports it speaks of; None otherwise."""
    host = [(r, f) for r in reports for f in r.ordered() if f.code == HOST_OOM]
    gpu = [(r, f) for r in reports for f in r.ordered() if f.code in (GPU_OOM, "cuda_oom")]
    pairs = [(h, g) for h in host for g in gpu if h[0] is not g[0]]
    if not pairs:
        return None
    (host_report, host_finding), (gpu_report, gpu_finding) = pairs[0]
    limit = _LIMIT.search(host_finding.message)
    at = _WHEN.search(gpu_finding.message)
    host_what = f"killed by the kernel's OOM killer (host memory{f', {limit[1]} limit' if limit else ''})"
    when = f" {at[1]}" if at else ""
    line = (f"{host_finding.entity or host_report.source}: {host_what}; {gpu_report.source}: running out of GPU "
            f"memory{when} on {gpu_finding.entity or 'the GPU'} is a separate failure. Fix each on its own: the "
            "memory limit for the first, GPU memory per step for the second")  # fmt: skip
    return line, [host_report, gpu_report]
