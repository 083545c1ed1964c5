"""What the rest of a log says about the class its failure lines gave: the rules that need more than one line.

Each rule takes the class the lines' own signatures gave and the log's normalised lines, and returns the class the
whole log supports with a note saying why, or None to leave it. They only narrow a symptom to its cause where the
log itself names that cause; where it does not, the symptom's class stands.

- Bootstrap retries (misc/socket.cc socketPollConnect, NVIDIA/nccl v2.19.3-1 .. v2.27; os/linux.cc in v2.30.7-1:
  "connect returned No route to host, retrying (26/34) after sleep for 2600 msec") are the failure in progress when
  the excerpt ends before the WARN that ends them; a later `Init COMPLETE` means they recovered.
- "unhandled system error" (ncclSystemError, init.cc ncclGetErrorString) or a lost connection, in a log that sets
  NCCL_SOCKET_IFNAME and never completed init: the socket interface chosen by hand is the cause (NVIDIA/nccl#286,
  nccl-tests#219: a name other nodes lack, or `lo`).
- Ranks that print different `NCCL version X.Y.Z` lines (init.cc's banner, with the host:pid prefix of each rank, or
  one file per rank) run different builds: NCCL's wire formats are not kept compatible across versions
  (NVIDIA/nccl#286: "The NCCL version needs to match").
- A retry-exceeded completion (IBV_WC_RETRY_EXC_ERR, status 12) in a log that sets NCCL_IB_GID_INDEX: the GID the
  index selects does not route between the nodes (NVIDIA/nccl#426: "an error 12 ... right away means the NICs
  can't talk to each other using RoCE"; the fix was the RoCEv2 GID index).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

RETRY = re.compile(r"connect (?:to \S+ )?returned [\w ]+, retrying", re.IGNORECASE)
INIT_DONE = re.compile(r"Init COMPLETE", re.IGNORECASE)
SOCKET_IFNAME = re.compile(r"NCCL_SOCKET_IFNAME(?:\s+set by environment to|\s*=|\s+set to)?\s*([\w^,.*:-]*)",
                           re.IGNORECASE)  # fmt: skip
SYSTEM_ERROR = re.compile(r"unhandled system error|ncclSystemError", re.IGNORECASE)
GID_INDEX = re.compile(r"NCCL_IB_GID_INDEX(?:\s+set by environment to|\s*=)?\s*(\d*)", re.IGNORECASE)
NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)")
RETRY_EXCEEDED = re.compile(r"(?:with error|status=)\s*(?:IBV_WC_RETRY_EXC_ERR)?\(?12\b|RETRY_EXC_ERR", re.IGNORECASE)


def retries_only(texts: Sequence[str], hits: Sequence[str]) -> str | None:
    """For bootstrap_unreachable found only in retry lines: None when the log shows init completing after them
    (they recovered), else a note that the failure that ends them is not in the excerpt."""
    if not hits or not all(RETRY.search(h) for h in hits):
        return ""
    last = max((i for i, t in enumerate(texts) if RETRY.search(t)), default=-1)
    if any(INIT_DONE.search(t) for t in texts[last + 1 :]):
        return None
    return "only connection retries seen: the log ends before the failure that ends them"


def socket_ifname(cls: str, texts: Sequence[str]) -> str | None:
    """socket_ifname, with its note, for a system error or lost connection in a log that picks the interface by
    hand and never finished init; None otherwise."""
    if cls not in ("peer_connection_lost", "unknown"):
        return None
    named = [m for t in texts if (m := SOCKET_IFNAME.search(t))]
    if not named or any(INIT_DONE.search(t) for t in texts):
        return None
    if cls == "unknown" and not any(SYSTEM_ERROR.search(t) for t in texts):
        return None
    value = next((m.group(1) for m in named if m.group(1)), "")
    shown = f" ({value})" if value else ""
    return (
        f"NCCL_SOCKET_IFNAME is set{shown} and init never completed: a socket error then means the interface it picks "
        "does not reach the other nodes (loopback, or a name other nodes lack)"
    )


def roce_gid_index(texts: Sequence[str], hits: Sequence[str]) -> str | None:
    """roce_gid_index's note for retry-exceeded completions in a log that sets NCCL_IB_GID_INDEX; None otherwise."""
    if not any(RETRY_EXCEEDED.search(h) for h in hits):
        return None
    named = [m for t in texts if (m := GID_INDEX.search(t))]
    if not named:
        return None
    value = next((m.group(1) for m in named if m.group(1)), "")
    shown = f" {value}" if value else ""
    return (
        f"retry-exceeded completions (status 12) with NCCL_IB_GID_INDEX{shown} named in the log: the GID it selects "
        "does not carry RoCE traffic between the nodes (the connection is set up over TCP, the first RDMA transfer "
        "times out)"
    )


def versions_differ(texts: Sequence[str]) -> tuple[list[int], str] | None:
    """The lines that show two or more NCCL versions (their indexes) and a note naming them; None for one version."""
    first: dict[str, int] = {}
    for i, text in enumerate(texts):
        if (m := NCCL_VERSION.search(text)) and m.group(1) not in first:
            first[m.group(1)] = i
    if len(first) < 2:
        return None
    return list(first.values()), f"the ranks print NCCL versions {', '.join(sorted(first))}"
