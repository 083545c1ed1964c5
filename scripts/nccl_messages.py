#!/usr/bin/env python3
"""Regenerate src/gpufleet/nccl/data/messages.yaml from NCCL's own source.

    scripts/nccl_messages.py --nccl PATH/TO/nccl [--tags v2.12.12-1 v2.18.6-1 ...] [--out FILE]

PATH/TO/nccl is a git clone of NVIDIA/nccl (bare or not); each tag is read with `git show`, never checked out.
Every WARN(...) format string and the INFO(...) lines that name a cause are turned into regular expressions,
unioned across the tags and given a diagnosis class by the rules below (first match wins). PyTorch's and NCCL's
result-code messages are not WARN calls and are listed by hand further down with the release they were read from.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

DEFAULT_TAGS = ("v2.12.12-1", "v2.18.6-1", "v2.21.5-1", "v2.26.6-1", "v2.30.7-1")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src/gpufleet/nccl/data/messages.yaml"

# Source files that hold host-side messages: device code, NVTX and vendored headers print nothing we can read.
SKIP_PATHS = re.compile(r"^src/(?:device/|include/nvtx3/|include/nccl_device/|nccl\.h\.in)|/nvtx|\.cu$")
SOURCE_EXT = re.compile(r"\.(?:cc|cpp|c|h|hpp)$")
CALL = re.compile(r"(?<![\w.])(WARN|INFO)\s*\(")
# INFO lines are progress unless their text names a failure; only these become candidates.
INFO_CAUSE = re.compile(
    r"fail|error|unable|cannot|can't|could not|couldn't|timed? ?out|refused|reset by|abort|mismatch|"
    r"no device|not found|not supported|unsupported|fall(?:ing)? ?back|invalid|exceed|insufficient|denied|"
    r"closed|retry|retrying",
    re.IGNORECASE,
)
PRI_MACRO = re.compile(r"^PRI([diouxX])(?:8|16|32|64|PTR|MAX)$")
CONVERSION = re.compile(r"%([-+ #0']*)(\*|\d+)?(?:\.(\*|\d+))?(hh|h|ll|l|L|q|j|z|Z|t)?([diouxXeEfFgGaAcspn%])")
# A message needs this much literal text to be told apart from every other line.
MIN_LETTERS = 10
WILDCARD = "\x00"  # stands for a macro argument spliced into the format (`"Call to " name " failed"`)


@dataclass
class Message:
    level: str
    fmt: str
    regex: str
    example: str
    files: set[str] = field(default_factory=set)
    tags: set[str] = field(default_factory=set)


# ---------------------------------------------------------------------------------------------------------------
# Reading C source


def strip_comments(src: str) -> str:
    """Drop comments and join continued macro lines, leaving string and char literals intact."""
    out: list[str] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i : j + 1])
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            out.append(" ")
            i = n if j < 0 else j + 2
        elif src.startswith("\\\n", i):
            out.append(" ")
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def call_args(src: str, open_paren: int) -> list[str] | None:
    """The top-level comma-separated arguments of the call whose '(' is at open_paren."""
    depth, i, start, args = 0, open_paren, open_paren + 1, []
    while i < len(src):
        c = src[i]
        if c in "\"'":
            j = i + 1
            while j < len(src) and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            i = j
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(src[start:i].strip())
                return args
        elif c == "," and depth == 1:
            args.append(src[start:i].strip())
            start = i + 1
        i += 1
    return None


C_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "\r", "0": "", "%": "%"}
LITERAL_OR_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|#\s*(\w+)|(\w+)|(\S)')


def format_text(arg: str) -> str | None:
    """The printf format an argument spells, with macro pieces as WILDCARD; None when it is not a literal."""
    parts: list[str] = []
    literal = False
    for m in LITERAL_OR_TOKEN.finditer(arg):
        lit, stringified, ident, other = m.groups()
        if lit is not None:
            parts.append(re.sub(r"\\(.)", lambda e: C_ESCAPES.get(e.group(1), e.group(1)), lit))
            literal = True
        elif stringified is not None:
            parts.append(WILDCARD)
        elif ident is not None:
            pri = PRI_MACRO.match(ident)
            parts.append(("ll" + pri.group(1)) if pri else WILDCARD)
        elif other is not None:
            return None  # an expression (a variable format, a conditional): nothing fixed to match
    return "".join(parts) if literal else None


def calls(src: str) -> Iterator[tuple[str, str]]:
    """(level, format) for every WARN/INFO call with a literal format."""
    text = strip_comments(src)
    for m in CALL.finditer(text):
        args = call_args(text, m.end() - 1)
        if not args:
            continue
        level = m.group(1)
        fmt_arg = args[0] if level == "WARN" else (args[1] if len(args) > 1 else "")
        fmt = format_text(fmt_arg)
        if fmt is not None:
            yield level, fmt


# ---------------------------------------------------------------------------------------------------------------
# printf format -> regular expression and an example line


def first_line(fmt: str) -> str:
    """NCCL's prefix sits on the first line only; later lines of a multi-line message carry no marker."""
    return fmt.strip("\n").split("\n")[0].rstrip()


def example_value(conv: str, before: str, flags: str) -> str:
    if conv in "di" and before.endswith(("status=", "with error ")):
        return "12"  # IBV_WC_RETRY_EXC_ERR, the completion error seen most
    if conv in "di":
        return "3"
    if conv == "u":
        return "4096"
    if conv in "xX":
        return ("0x" if "#" in flags else "") + "1b"
    if conv == "o":
        return "17"
    if conv == "p":
        return "0x7f3a2c000000"
    if conv in "eEfFgGaA":
        return "2.50"
    if conv == "c":
        return "R"
    # %s: guess what kind of text goes here from the words before it.
    tail = before.lower().rstrip(" '\"(:=")
    if tail.endswith(("error", "failed", "errno", "reason", "returned")):
        return "Input/output error"
    if tail.endswith(("device", "dev", "hca", "nic")):
        return "mlx5_0"
    if tail.endswith(("peer", "address", "addr", "to", "from", "host")):
        return "10.0.0.2<43122>"
    if tail.endswith(("interface", "ifname", "iface")):
        return "eth0"
    if tail.endswith(("file", "path", "segment")):
        return "/dev/shm/nccl-A1b2C3"
    return "value"


def to_regex(fmt: str) -> tuple[str, str]:
    """(regex, example): printf conversions become capture groups, everything else is escaped literally."""
    regex: list[str] = []
    example: list[str] = []
    pos = 0
    pieces = list(CONVERSION.finditer(fmt))
    for k, m in enumerate(pieces):
        lit = fmt[pos : m.start()]
        regex.append(_literal(lit))
        example.append(lit.replace(WILDCARD, "ibv_call"))
        flags, width, _prec, _len, conv = m.groups()
        last = k == len(pieces) - 1 and not fmt[m.end() :].strip()
        if conv == "%":
            regex.append("%")
            example.append("%")
        elif conv == "n":
            pass
        else:
            pad = r"\s*" if width or "-" in flags else ""
            regex.append(pad + _group(conv, last))
            example.append(example_value(conv, "".join(example), flags))
        pos = m.end()
    regex.append(_literal(fmt[pos:]))
    example.append(fmt[pos:].replace(WILDCARD, "ibv_call"))
    text = "".join(regex)
    # Adjacent %s%s cannot be told apart in the output: one group stands for the run.
    while "(.*?)(.*?)" in text or "(.*?)(.*)" in text:
        text = text.replace("(.*?)(.*?)", "(.*?)").replace("(.*?)(.*)", "(.*)")
    return text, "".join(example)


def _literal(text: str) -> str:
    escaped = WILDCARD.join(re.escape(p).replace("\\ ", " ") for p in text.split(WILDCARD))
    return escaped.replace(WILDCARD, r"(?:.+?)")


def _group(conv: str, last: bool) -> str:
    if conv in "diu":
        return r"(-?\d+)"
    if conv in "xXo":
        return r"((?:0x)?[0-9a-fA-F]+)"
    if conv == "p":
        return r"(0x[0-9a-fA-F]+|\(nil\))"
    if conv in "eEfFgGaA":
        return r"([-+0-9.eE]+|-?nan|-?inf)"
    if conv == "c":
        return "(.)"
    return "(.*)" if last else "(.*?)"


def letters(fmt: str) -> int:
    return sum(ch.isalpha() for ch in CONVERSION.sub("", fmt).replace(WILDCARD, ""))


# ---------------------------------------------------------------------------------------------------------------
# Walking a tag


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, errors="replace"
    ).stdout


def scan(repo: Path, tags: list[str]) -> tuple[dict[str, Message], dict[str, int]]:
    found: dict[str, Message] = {}
    dropped = {"no_literal_text": 0, "progress_info": 0}  # e.g. "%s:%d -> %d" traces; INFO progress lines
    for tag in tags:
        paths = [
            p
            for p in git(repo, "ls-tree", "-r", "--name-only", tag, "src").splitlines()
            if SOURCE_EXT.search(p) and not SKIP_PATHS.search(p)
        ]
        for path in paths:
            src = git(repo, "show", f"{tag}:{path}")
            for level, raw in calls(src):
                fmt = first_line(raw)
                if letters(fmt) < MIN_LETTERS:
                    dropped["no_literal_text"] += 1
                    continue
                if level == "INFO" and not INFO_CAUSE.search(fmt):
                    dropped["progress_info"] += 1
                    continue
                regex, example = to_regex(fmt)
                msg = found.setdefault(regex, Message(level, fmt.replace(WILDCARD, "<arg>"), regex, example))
                # A text printed both as WARN and INFO counts as WARN: that is the level users notice.
                if level == "WARN":
                    msg.level = "WARN"
                msg.files.add(path.removeprefix("src/"))
                msg.tags.add(tag)
    return found, dropped


# ---------------------------------------------------------------------------------------------------------------
# Classes. Each rule is (pattern searched in "file: format", class, comment); the first match wins. Class
# `benign` marks messages that are not failures (a setting adjusted, a feature skipped): they are catalogued so a
# line is recognised and never reported as the cause. Class `unknown` marks failures too generic or too internal to
# name a cause: diagnose shows them as evidence but does not pick a class from them.

AMBIGUOUS_ERRNO = "the cause is in the errno text; the hand patterns in signatures.yaml name it where it is known"
RULES: list[tuple[str, str, str]] = [
    # Settings NCCL adjusted or features it skipped: WARN level, but the job goes on.
    (
        r"setting it to|setting to %d|setting NCCL_|limiting to|Limiting value|cap it to|set both to"
        r"|is being ignored|, ignoring|defaulting to"
        r"|Ignoring SHM locality|Unsetting POLICY|falling back to graphStreamOrdering|Set NCCL_IB_WARN_RAIL_LOCAL"
        r"|NCCL_ALGO=COLLNET|disabling CollNet|using point-to-point network instead|Warning: remote FLID"
        r"|falling back to simple order|Skipping nvlink detection|not dumping topology|Duplicate registration"
        r"|Ignoring due to NCCL_IGNORE|, disabling\.|using internal tuner|Continuing in spite",
        "benign",
        "",
    ),
    (r"^ras/.*version mismatch", "version_mismatch", "found by RAS, NCCL's reliability monitor, between two ranks"),
    (r"^ras/", "benign", "RAS (the reliability monitor's own thread): its errors do not stop the job"),
    (r"HINT: .*ACS", "p2p_acs", "printed after IBV_WC_LOC_PROT_ERR: ACS on the GPU-NIC path breaks GPUDirect RDMA"),
    (r"HINT: .*GID index", "roce_gid_index", "printed after ibv_modify_qp fails with EINVAL"),
    (
        r"HINT: .*cross-rail|HINT: .*NIC on the same instance",
        "ib_setup_error",
        "printed after ibv_modify_qp ETIMEDOUT or a flush error: NICs that cannot reach each other",
    ),
    (r"HINT: ", "ib_transport_error", "printed after a completion with error"),
    # Out of memory.
    (
        r"Failed to CUDA (?:c|m)alloc|Failed to CUDA host alloc|Failed to CUDA calloc async"
        r"|No suitable space found to accommodate",
        "cuda_oom",
        "",
    ),
    (
        r"Failed to malloc|malloc\(size=|returned null|Allocation failed$|Thread creation failed"
        r"|unable to allocate (?:requests|subtasks)|Failed to allocate",
        "host_resource_limit",
        "",
    ),
    # CUDA and driver.
    (r"Cuda failure", "cuda_error", "'out of memory' here is cuda_oom (hand pattern); any other text is a CUDA error"),
    (
        r"CUDA error|CUDA context|set CUDA device|CUDA library|Failed to load CUDA|cuDriverGetVersion|PFN functions"
        r"|^misc/cudawrap|^misc/nvmlwrap|libnvidia-ml|nvml\.dll|installed CUDA driver is older|requires CUDA driver"
        r"|old driver|CUDA version for CUDA graph",
        "cuda_error",
        "",
    ),
    (r"CUMEM (?:Host )?(?:is )?not supported prior to CUDA", "cuda_error", "the CUDA runtime or driver is too old"),
    (r"Duplicate GPU detected|same GPU/Partition|multiple ranks using the same NVML device", "duplicate_gpu", ""),
    # Shared memory and local IPC.
    (
        r"shared memory segment|failed to extend|Could not map|shared memory file|create shared memory mapping"
        r"|open shared memory mapping|map view of file",
        "shm_too_small",
        "/dev/shm full or too small is the usual cause; the errno text says",
    ),
    (
        r"munmap of shared memory|unlink shared memory|CloseHandle for shared memory|UnmapViewOfFile"
        r"|shm (?:close|unlink)",
        "unknown",
        "cleanup of a segment after another failure",
    ),
    (
        r"UDS: |IPC: |cudaIpcGetMemHandle|failed to peer with device|invalid IPC"
        r"|ncclProxyClient(?:GetFd|QueryFd|Convert)|ncclProxyCallBlockingUDS|Legacy IPC cleanup",
        "p2p_ipc",
        "",
    ),
    # Interfaces and bootstrap.
    (
        r"no socket interface found|No usable listening interface|NET/Socket : no interface found"
        r"|verify NCCL_OOB_NET_IFNAME|No interface found in the same subnet|NET/IB : No IP interface found",
        "socket_ifname",
        "",
    ),
    (
        r"Invalid NCCL_COMM_ID|No valid <IPv4|No valid \[IPv6\]|ncclCommGetUniqueId should not be called"
        r"|mismatch in rank count|mismatch in info from procs|has already checked in|localId %d is out of range",
        "invalid_usage",
        "ranks launched with different sizes, or two jobs sharing one NCCL_COMM_ID/port",
    ),
    (
        r"Message truncated : received|message truncated : receiving",
        "version_mismatch",
        "messages of another size than the receiver posted: different NCCL builds on the ranks, or NCCL_* settings "
        "(NCCL_PROTO, NCCL_ALGO, NCCL_BUFFSIZE) on some ranks only (NVIDIA/nccl#1328)",
    ),
    (
        r"is neither AF_INET",
        "socket_ifname",
        "an address that was never filled in: no interface matched NCCL_SOCKET_IFNAME (NVIDIA/nccl#1837)",
    ),
    (
        r"connect returned .*exceeded|[Cc]onnect to %s failed|Connect to %s returned|exceeded (?:retries|timeouts)"
        r"|socketPollConnect|getting address info|SocketPollConnect",
        "bootstrap_unreachable",
        "the errno says which: refused (nothing listening, port blocked), timed out (firewall, unroutable address)",
    ),
    (r"Accept failed|exceeded error retry count", "bootstrap_unreachable", "accept failing on the listening side"),
    (
        r"Connection closed by remote peer|Call to recv from|socketProgressOpt: Call to|SocketProgressOpt: Call to"
        r"|socket progress error|Socket recv failed while polling|Proxy Call to rank|Error encountered progressing"
        r"|Could not receive type from localRank|Failed to execute operation",
        "peer_connection_lost",
        "a symptom: the peer process died or its host dropped off the network; look for its own first error",
    ),
    (
        r"message truncated|collective mismatch error|posted incorrect receive info",
        "invalid_usage",
        "ranks disagree on a transfer's size: different collectives or NCCL_PROTO/NCCL_ALGO settings across ranks",
    ),
    (r"wrong magic|wrong type %d", "unknown", "a connection from something that is not this job's NCCL"),
    # Versions and plugins.
    (
        r"version mismatch|Mismatched NCCL version|not backwards compatible|library is too old"
        r"|too old version of NCCL|symbols v4 and lower are not supported",
        "version_mismatch",
        "",
    ),
    (
        r"mixed local (?:Coll)?Net device counts|different number of devices|incompatible devices"
        r"|device is incompatible|different link_layer|Couldn't find net with name|Only matched %d devices"
        r"|requires NIC %d but that NIC is not available",
        "nic_mismatch",
        "",
    ),
    # Topology.
    (r"XML|xml|Attribute %s of node|KV Convert|too long \(max|NCCL_TOPO", "topology_file", ""),
    (r"NVLINK connected GPUs|MNNVL|IMEX|NVLink SHARP|NVLS|Multicast support requested|multimem", "nvlink_error", ""),
    (
        r"^graph/(?:tuning)\.cc: (?:Invalid|Unrecognized|All entries)",
        "invalid_usage",
        "an NCCL_ALGO/NCCL_PROTO or tuning string NCCL could not parse",
    ),
    (
        r"(?i)no algorithm/protocol available",
        "invalid_usage",
        "usually NCCL_ALGO/NCCL_PROTO restricted to choices that cannot run this collective",
    ),
    (
        r"^graph/|real path of|^os/.*(?:PCI|affinity)|Set CPU affinity|No transport found for rank",
        "topology_detection",
        "NCCL could not place a GPU, NIC or CPU in its topology; inconsistent topologies across ranks also end here",
    ),
    # InfiniBand.
    (r"GID table changed|RoceGetVersionNum|Ip address '%s' is invalid|Ip address mask", "roce_gid_index", ""),
    (
        r"Got completion from peer|completion with error|CQE with error",
        "ib_transport_error",
        "the status number is an ibv_wc_status (data/ibv_wc_status.yaml); 5 WR_FLUSH_ERR follows an earlier error",
    ),
    (
        r"async fatal event|Got async (?:error )?event|non-fatal async event|encountered a fatal error"
        r"|The error is fatal|Fatal error\. Detected|marked as failed|Unsupported completion status",
        "ib_transport_error",
        "",
    ),
    (
        r"ibv_poll_cq|ibv_post_send|ibv_post_recv",
        "ib_transport_error",
        "posting fails once a QP went to the error state: a cascade of a completion error",
    ),
    (r"Peermem is not supported|GDRCOPY|gdr_\w+|^misc/gdrwrap|GDR Flush", "gdr_dma_broken", ""),
    (r"NET/IB : No device found|Failed to open libibverbs|Unable to open device", "ib_unavailable_fallback", ""),
    (
        r"Call to <arg> failed with error|Call to <arg> failed$",
        "ib_setup_error",
        "ibv_reg_mr ENOMEM is memlock_limit, EFAULT is gdr_dma_broken, ibv_modify_qp ETIMEDOUT/EINVAL is "
        "roce_gid_index, ibv_open_device is ib_unavailable_fallback (hand patterns); other calls land here",
    ),
    (
        r"Call to ibv_modify_qp failed with",
        "roce_gid_index",
        "ETIMEDOUT can also mean NICs on different rails that cannot reach each other (see the HINT lines)",
    ),
    (
        r"^misc/(?:ibv|mlx5dv)|^transport/net_ib.*(?:Unable to query|Listencomm|virtual|vNic|plane|mlx5dv|OOO RQ"
        r"|SUBNET_PREFIX|lib wrapper|dlvsym)",
        "ib_setup_error",
        "",
    ),
    # Misuse of the API or configuration.
    (
        r"^misc/argcheck|Invalid config|Invalid rank|Invalid device|invalid device count|exceeds ndev|improper usage"
        r"|not initialized via|without a matching|not in a group call|mixing different streams|Streams given to"
        r"|Blocking and nonblocking|ncclRedOp|already been destroyed|must be 0|is too small\. Minimum"
        r"|graph mode while others|can be CUDA graph captured|FP8 reduction|invalid arguments|argument must be"
        r"|Invalig config|ncclCommGrow|splitShare|Child comms|parent comm netName|is not a valid value"
        r"|should be a diviser|NCCL_NET_MERGE|NCCL_NET_FORCE_MERGE|merge too many NICs|too many devices \(%d\)"
        r"|NCCL cannot be captured|User requested|Cannot create|Cannot get communicator properties|must be initialized",
        "invalid_usage",
        "",
    ),
    (
        r"Attempt to use communicator before",
        "invalid_usage",
        "also printed when the application keeps using a communicator after an earlier error",
    ),
    (r"^include/checks\.h: Call to <arg> failed", "unknown", AMBIGUOUS_ERRNO),
    # Aborts: consequences of another failure or of the watchdog.
    (
        r"communicator was revoked|is in abort state|ncclCommSetAsyncError|in abort, error|Abort START"
        r"|Socket progress: abort called|abort called",
        "comm_aborted",
        "",
    ),
    (
        r"^proxy\.cc: |^transport/(?:net|coll_net|p2p|shm)\.cc",
        "unknown",
        "internal proxy/transport state; it follows another error",
    ),
]


INFO_CLASSES = {
    "ib_transport_error",
    "p2p_acs",
    "roce_gid_index",
    "ib_setup_error",
    "ib_unavailable_fallback",
    "version_mismatch",
}
INFO_NOT_A_CAUSE = re.compile(r"retrying|not supported$|libmlx5|mlx5dv|MLX5|already marked")


def classify(msg: Message) -> tuple[str, str] | None:
    text = f"{sorted(msg.files)[0]}: {msg.fmt}"
    fallback = ("unknown", "no cause class: internal or rarely seen")
    cls, comment = next(((c, note) for pattern, c, note in RULES if re.search(pattern, text)), fallback)
    # An INFO line is kept only when it names a cause; the rest is progress, a retry or a fallback that works.
    if msg.level == "INFO" and (cls not in INFO_CLASSES or INFO_NOT_A_CAUSE.search(msg.fmt)):
        return None
    return cls, comment


# ---------------------------------------------------------------------------------------------------------------
# Messages that are not WARN calls: NCCL's result codes and PyTorch's. Read from the sources named with each.

NCCL_RESULT = "NVIDIA/nccl src/init.cc ncclGetErrorString"
RESULT_VERSIONS = "v2.12.12-1..v2.30.7-1 (the '(run with NCCL_DEBUG=...)' suffixes since v2.18.1-1)"
TORCH_NCCL = "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
TORCH_UTILS = "pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp (NCCLUtils.hpp before 2.1)"
TORCH_TRACE = "pytorch/pytorch torch/csrc/distributed/c10d/TraceUtils.h (desync report)"
TORCH_GLOO = "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (monitoredBarrier)"
Curated = tuple[str, str, str, str, str, str]  # (regex, example, class, source, versions, comment)
CURATED: list[Curated] = [
    (
        r"unhandled cuda error",
        "NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
        "NCCL version 2.18.6",
        "cuda_error",
        NCCL_RESULT,
        RESULT_VERSIONS,
        "",
    ),
    (
        r"unhandled system error",
        "NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.12.12",
        "unknown",
        NCCL_RESULT,
        RESULT_VERSIONS,
        "any failed system or library call, and before 2.13 also a peer that exited: the NCCL WARN lines say which",
    ),
    (
        r"NCCL error.*?[:,] internal error",
        "NCCL error: internal error - please report this issue to the NCCL developers, NCCL version 2.21.5",
        "unknown",
        NCCL_RESULT,
        RESULT_VERSIONS,
        "the WARN line before it names the check that failed",
    ),
    (
        r"NCCL error.*?[:,] invalid (?:argument|usage)",
        "NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5",
        "invalid_usage",
        NCCL_RESULT,
        RESULT_VERSIONS,
        "",
    ),
    (
        r"remote process exited or there was a network error",
        "NCCL error: remote process exited or there was a network error, NCCL version 2.20.5",
        "peer_connection_lost",
        NCCL_RESULT,
        "v2.13.4-1..v2.30.7-1 (ncclRemoteError)",
        "",
    ),
    (
        r"ncclUnhandledCudaError: Call to CUDA function failed",
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "cuda_error",
        TORCH_UTILS,
        "torch 1.11 .. 2.x",
        "",
    ),
    (
        r"ncclInvalidUsage: This usually reflects invalid usage of NCCL library",
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
        "invalid_usage",
        TORCH_UTILS,
        "torch 1.11 .. 2.x",
        "",
    ),
    (
        r"ncclInvalidArgument: Invalid value for an argument",
        "ncclInvalidArgument: Invalid value for an argument.",
        "invalid_usage",
        TORCH_UTILS,
        "torch 1.11 .. 2.x",
        "",
    ),
    (
        r"ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "peer_connection_lost",
        TORCH_UTILS,
        "torch 1.13 .. 2.x",
        "",
    ),
    (
        r"ncclSystemError: System call \(e\.g\. socket, malloc\) or external library call failed or device error",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. "
        "It can be also caused by unexpected exit of a remote peer.",
        "unknown",
        TORCH_UTILS,
        "torch 1.11 .. 2.x",
        "the 'Last error:' line that follows carries NCCL's WARN text",
    ),
    (
        r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+).*?\) ran for (\d+) "
        r"milliseconds before timing out",
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600004 milliseconds before timing out.",
        "collective_timeout",
        TORCH_NCCL,
        "torch 1.10 .. 2.x (NumelIn/NumelOut since 1.13)",
        "",
    ),
    (
        r"Some NCCL operations have failed or timed out\. Due to the asynchronous nature of CUDA kernels",
        "[Rank 1] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
        "subsequent GPU operations might run on corrupted/incomplete data.",
        "collective_timeout",
        TORCH_NCCL,
        "torch 1.8 .. 2.x",
        "also printed after a NCCL error that was not a timeout: an earlier error outranks it",
    ),
    (
        r"failure detected by watchdog at work sequence id: (\d+) PG status: last enqueued work: (\d+), "
        r"last completed work: (\d+)",
        "[PG ID 0 PG GUID 0(default_pg) Rank 2] failure detected by watchdog at work sequence id: 97 PG status: "
        "last enqueued work: 97, last completed work: 96",
        "collective_timeout",
        TORCH_NCCL,
        "torch 2.4 .. 2.x",
        "",
    ),
    (
        r"Heartbeat monitor timed out! Process will be terminated after dumping debug info",
        "[PG ID 0 PG GUID 0(default_pg) Rank 0] Heartbeat monitor timed out! Process will be terminated after dumping "
        "debug info. workMetaList_.size()=2",
        "collective_timeout",
        TORCH_NCCL,
        "torch 2.2 .. 2.x",
        "the watchdog itself is stuck inside a CUDA/NCCL call: a GPU or driver hang is as likely as a straggler",
    ),
    (
        r"ProcessGroupNCCL's watchdog got stuck for (\d+) seconds without making progress",
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
        "collectives.",
        "collective_timeout",
        TORCH_NCCL,
        "torch 2.2 .. 2.x",
        "",
    ),
    (
        r"NCCL communicator was aborted on rank (\d+)\.",
        "RuntimeError: NCCL communicator was aborted on rank 2. Original reason for failure was: Watchdog caught "
        "collective operation timeout",
        "collective_timeout",
        TORCH_UTILS,
        "torch 1.9 .. 2.x",
        "the reason that follows may name a NCCL error instead; that error's own line outranks this one",
    ),
    (
        r"To our best knowledge, ranks \[([\d, ]+)\] are the lagging ranks that caused this timeout",
        "\t - To our best knowledge, ranks [1] are the lagging ranks that caused this timeout. They never joined any "
        "collectives",
        "collective_timeout",
        TORCH_TRACE,
        "torch 1.13 .. 2.x (TORCH_NCCL_DESYNC_DEBUG=1)",
        "",
    ),
    (
        r"- \[([\d, ]+)\] joined but didn't finish collective #(\d+)",
        "\t   - [2] joined but didn't finish collective #41207 (count from 1)",
        "collective_timeout",
        TORCH_TRACE,
        "torch 1.13 .. 2.x (TORCH_NCCL_DESYNC_DEBUG=1)",
        "",
    ),
    (
        r"\[([\d, ]+)\] finished collective #(\d+), but didn't join collective #(\d+)",
        "\t     [0, 1, 3] finished collective #41207, but didn't join collective #41208 (count from 1)",
        "collective_timeout",
        TORCH_TRACE,
        "torch 1.13 .. 2.x (TORCH_NCCL_DESYNC_DEBUG=1)",
        "",
    ),
    (
        r"Ranks? ([\d, ]+) failed to pass monitoredBarrier in (\d+) ms",
        "RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms",
        "collective_timeout",
        TORCH_GLOO,
        "torch 1.10 .. 2.x",
        "the listed ranks are the ones that never arrived",
    ),
    (
        r"successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0",
        "[Rank 2]: Rank 2 successfully reached monitoredBarrier, but received errors while waiting for send/recv from "
        "rank 0. Please check rank 0 logs for faulty rank.",
        "collective_timeout",
        TORCH_GLOO,
        "torch 1.10 .. 2.x",
        "printed by ranks that did arrive; rank 0's line names the missing ones",
    ),
]


# ---------------------------------------------------------------------------------------------------------------
# Writing


def build(msgs: dict[str, Message], tags: list[str], dropped: dict[str, int]) -> dict[str, object]:
    entries: list[dict[str, object]] = []
    not_failures = 0
    for msg in sorted(msgs.values(), key=lambda m: (sorted(m.files)[0], m.fmt)):
        got = classify(msg)
        if got is None:
            not_failures += 1
            continue
        cls, comment = got
        entry: dict[str, object] = {
            "id": len(entries) + 1,
            "level": msg.level,
            "format": msg.fmt,
            "regex": msg.regex,
            "class": cls,
            **({"comment": comment} if comment else {}),
            "source": "NVIDIA/nccl " + ", ".join(f"src/{f}" for f in sorted(msg.files)),
            "versions": [t for t in tags if t in msg.tags],
            "example": msg.example,
        }
        entries.append(entry)
    for regex, example, cls, source, versions, comment in CURATED:
        entries.append(
            {
                "id": len(entries) + 1,
                "level": "TEXT",
                "regex": regex,
                "class": cls,
                **({"comment": comment} if comment else {}),
                "source": source,
                "versions": versions,
                "example": example,
            }
        )
    by_class: dict[str, int] = {}
    for entry in entries:
        by_class[str(entry["class"])] = by_class.get(str(entry["class"]), 0) + 1
    return {
        "nccl": {
            "repository": "NVIDIA/nccl",
            "tags": tags,
            "scanned": "every .cc/.h under src/ except device code (src/device, include/nccl_device) and NVTX",
            "files": sorted({f"src/{f}" for m in msgs.values() for f in m.files}),
            # Calls counted once per tag they appear in; unique messages are what `messages` lists.
            "calls_left_out": {**dropped},
            "info_messages_without_cause": not_failures,
        },
        "counts": dict(sorted(by_class.items())),
        "messages": entries,
    }


HEADER = """\
# NCCL and PyTorch failure messages, as regular expressions, with the diagnosis class each one means.
# Generated by scripts/nccl_messages.py from NVIDIA/nccl at the tags below: every WARN(...) format string in src/
# and the INFO(...) lines that name a cause, printf conversions turned into capture groups, literal text exact.
# Entries with level TEXT are not WARN calls: NCCL's result-code strings and PyTorch's ProcessGroupNCCL, desync
# report and monitoredBarrier messages, transcribed with the file and releases they come from.
# Class `benign`: a WARN that is not a failure (a setting adjusted); `unknown`: a failure that names no cause.
# Do not edit by hand: change the rules in the script and regenerate.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nccl", type=Path, required=True, help="a git clone of NVIDIA/nccl")
    ap.add_argument("--tags", nargs="+", default=list(DEFAULT_TAGS))
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--dump", action="store_true", help="print the raw extraction instead of writing the catalog")
    ns = ap.parse_args()
    msgs, dropped = scan(ns.nccl, ns.tags)
    if ns.dump:
        for m in sorted(msgs.values(), key=lambda m: (sorted(m.files)[0], m.fmt)):
            got = classify(m)
            print(f"{got[0] if got else '-'}\t{m.level}\t{','.join(sorted(m.files))}\t{m.fmt}")
        return
    catalog = build(msgs, ns.tags, dropped)
    text = yaml.safe_dump(catalog, sort_keys=False, width=1000, allow_unicode=True)
    ns.out.write_text(HEADER + text, encoding="utf-8")
    print(f"{len(catalog['messages'])} messages -> {ns.out}", file=sys.stderr)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
