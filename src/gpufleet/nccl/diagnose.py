"""Diagnose NCCL failures from NCCL_DEBUG output and PyTorch ProcessGroupNCCL logs (one file or one per rank).

Lines are normalised first (ANSI colour, launcher prefixes, NUL and other binary bytes), the launcher or
file name tells which rank wrote them, then the signatures in data/signatures.yaml are tried in priority
order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from gpufleet.errors import ParseError
from gpufleet.nccl._files import load_yaml

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Launcher prefixes, each capturing the rank: torchrun, srun -l, mpirun --tag-output.
PREFIXES = (
    re.compile(r"^\[(?:rank|default)(\d+)\]:\s?"),
    re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr)>:\s?"),
    re.compile(r"^\s{0,6}(\d+):\s(?=\S)"),
)
TIMESTAMP = re.compile(r"^(?:\[?\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\]?\s*)")
NCCL_PREFIX = re.compile(r"^(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+)\s+\[(?P<dev>\d+)\]")
# [Rank 3], [PG 0 Rank 3], [PG ID 0 PG GUID 0(default_pg) Rank 3]
TORCH_RANK = re.compile(r"\bRank (\d+)\]")
COMM_RANK = re.compile(r"\brank (\d+) nranks (\d+)", re.IGNORECASE)
WORLD = re.compile(r"(?:nranks|world_size|WORLD_SIZE)[ =:]+(\d+)")
NCCL_MARK = re.compile(r"\bNCCL (?:INFO|WARN)\b")
INIT_DONE = re.compile(r"Init COMPLETE|ncclCommInitRank.*(?:COMPLETE|Init COMPLETE)", re.IGNORECASE)
LAST_ENQUEUED = re.compile(r"last enqueued (?:NCCL )?work: (\d+)", re.IGNORECASE)
PEER = re.compile(r"from peer ([\w.:-]+?)<\d+>")
FILE_RANK = re.compile(r"(?:rank|r)[_.-]?(\d+)(?!.*\d)", re.IGNORECASE)


@dataclass(frozen=True)
class Signature:
    name: str
    priority: int
    summary: str
    fix: str
    patterns: tuple[re.Pattern[str], ...]


@cache
def signatures() -> tuple[Signature, ...]:
    raw = load_yaml("signatures.yaml")["classes"]
    sigs = [
        Signature(
            name,
            int(spec["priority"]),
            spec["summary"],
            spec["fix"],
            tuple(re.compile(p, re.IGNORECASE) for p in spec["patterns"]),
        )
        for name, spec in raw.items()
    ]
    return tuple(sorted(sigs, key=lambda s: s.priority))


CLASSES = (*(s.name for s in signatures()), "unknown")


@dataclass(frozen=True)
class LogLine:
    text: str  # normalised
    raw: str  # as read (decoded), for evidence
    source: str
    lineno: int
    rank: int | None
    host: str | None


@dataclass
class Diagnosis:
    cls: str
    summary: str
    fix: str
    ranks: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    also_seen: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "class": self.cls,
            "summary": self.summary,
            "fix": self.fix,
            "ranks": self.ranks,
            "hosts": self.hosts,
            "evidence": self.evidence,
            "also_seen": self.also_seen,
        }


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def normalise(raw: str) -> tuple[str, int | None]:
    """Strip colour, control bytes, timestamps and launcher prefixes; return (text, launcher rank)."""
    text = ANSI.sub("", raw)
    text = CONTROL.sub("", text).replace("\ufffd", "")
    rank = None
    for _ in range(3):
        changed = False
        stripped = TIMESTAMP.sub("", text)
        if stripped != text:
            text, changed = stripped, True
        for pat in PREFIXES:
            m = pat.match(text)
            if m:
                rank = int(m.group(1)) if rank is None else rank
                text = text[m.end() :]
                changed = True
                break
        if not changed:
            break
    return text.strip(), rank


def read_lines(text: str, source: str, file_rank: int | None = None) -> list[LogLine]:
    normalised = [(raw, *normalise(raw)) for raw in text.splitlines()]
    # NCCL prefixes lines with host:pid:tid [cudaDev]; INIT lines "rank R nranks N" map a process to its rank.
    pid_rank: dict[tuple[str, str], int] = {}
    for _, norm, _ in normalised:
        m, c = NCCL_PREFIX.match(norm), COMM_RANK.search(norm)
        if m and c:
            pid_rank.setdefault((m.group("host"), m.group("pid")), int(c.group(1)))
    lines = []
    for i, (raw, norm, rank) in enumerate(normalised, start=1):
        if not norm:
            continue
        host = None
        m = NCCL_PREFIX.match(norm)
        if m:
            host = m.group("host")
        if rank is None:
            tm = TORCH_RANK.search(norm)
            if tm:
                rank = int(tm.group(1))
        if rank is None and m:
            rank = pid_rank.get((m.group("host"), m.group("pid")))
        if rank is None:
            rank = file_rank
        if rank is None and m:
            rank = int(m.group("dev"))  # one process per GPU on one node: the device index is the local rank
        lines.append(LogLine(norm, raw.rstrip("\r\n"), source, i, rank, host))
    return lines


def _content_rank(text: str) -> int | None:
    """The rank a per-rank file belongs to, from NCCL's init line or a launcher prefix."""
    for raw in text.splitlines()[:2000]:
        norm, rank = normalise(raw)
        if rank is not None:
            return rank
        c = COMM_RANK.search(norm)
        if c:
            return int(c.group(1))
    return None


def _file_rank(path: Path) -> int | None:
    m = FILE_RANK.search(path.stem)
    return int(m.group(1)) if m else None


def diagnose_texts(texts: list[tuple[str, str]]) -> Diagnosis:
    """Diagnose (source name, text) pairs: one per rank, or a single combined log."""
    per_file: dict[str, list[LogLine]] = {}
    file_ranks: dict[str, int] = {}
    multi = len(texts) > 1
    for i, (name, text) in enumerate(texts):
        rank = None
        if multi:
            rank = _content_rank(text)
            rank = _file_rank(Path(name)) if rank is None else rank
            rank = i if rank is None else rank
            file_ranks[name] = rank
        per_file[name] = read_lines(text, name, rank)
    lines = [ln for group in per_file.values() for ln in group]
    matches: dict[str, list[LogLine]] = {}
    for sig in signatures():
        hit = [ln for ln in lines if any(p.search(ln.text) for p in sig.patterns)]
        if hit:
            matches[sig.name] = hit
    if not matches:
        dx = Diagnosis(
            "unknown",
            "no known NCCL failure signature found",
            (
                "collect NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV with "
                "NCCL_DEBUG_FILE=nccl.%h.%p from every "
                "rank and run diagnose on all files"
            ),
        )
        dx.evidence = [ln.raw for ln in lines if "WARN" in ln.text or "error" in ln.text.lower()][:5]
        dx.ranks, dx.hosts = _missing_or_failed_ranks(per_file, lines, multi, file_ranks)
        return dx
    by_priority = sorted(matches, key=lambda n: next(s.priority for s in signatures() if s.name == n))
    best = by_priority[0]
    sig = next(s for s in signatures() if s.name == best)
    hits = matches[best]
    dx = Diagnosis(best, sig.summary, sig.fix)
    dx.evidence = _dedupe([ln.raw for ln in hits])[:6]
    dx.also_seen = by_priority[1:]
    if best == "collective_timeout":
        dx.ranks, dx.hosts, detail = _timeout_suspects(per_file, lines, hits)
        dx.summary = f"{sig.summary}; {detail}"
    else:
        first = min(hits, key=lambda ln: (ln.source, ln.lineno))
        ranks = sorted({ln.rank for ln in hits if ln.rank is not None})
        dx.ranks = ranks if ranks else ([first.rank] if first.rank is not None else [])
        dx.hosts = _dedupe([ln.host for ln in hits if ln.host])
        peers = _dedupe([m.group(1) for ln in hits if (m := PEER.search(ln.text))])
        if peers:
            dx.summary += f"; remote peer {', '.join(peers)}"
            dx.hosts = _dedupe(dx.hosts + peers)
        failed, _ = _missing_or_failed_ranks(per_file, lines, multi, file_ranks)
        if multi and failed:
            dx.summary += f"; rank(s) {', '.join(map(str, failed))} did not finish initialising"
            dx.ranks = _dedupe_int(dx.ranks + failed)
    return dx


def _dedupe(items: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for it in items:
        seen.setdefault(it, None)
    return list(seen)


def _dedupe_int(items: list[int]) -> list[int]:
    return sorted(set(items))


def _world_size(lines: list[LogLine]) -> int | None:
    best = None
    for ln in lines:
        for m in (COMM_RANK.search(ln.text), WORLD.search(ln.text)):
            if m:
                n = int(m.group(2) if m.re is COMM_RANK else m.group(1))
                best = max(best or 0, n)
    return best


def _timeout_suspects(
    per_file: dict[str, list[LogLine]], lines: list[LogLine], hits: list[LogLine]
) -> tuple[list[int], list[str], str]:
    reporting = sorted({ln.rank for ln in hits if ln.rank is not None})
    world = _world_size(lines)
    if world is None and len(per_file) > 1:
        world = len(per_file)
    if world is None and reporting:
        # Ranks are numbered from 0; without a world size assume the highest reporter is the last rank.
        world = max(reporting) + 1
    silent_files = [ln[0].rank for ln in per_file.values() if ln and not any(h in ln for h in hits)]
    missing = sorted(set(range(world or 0)) - set(reporting))
    missing = _dedupe_int(missing + [r for r in silent_files if r is not None])
    # Newer PyTorch prints each rank's last enqueued collective: a rank behind the others never called the op.
    enqueued: dict[int, int] = {}
    for ln in lines:
        m = LAST_ENQUEUED.search(ln.text)
        if m and ln.rank is not None:
            enqueued[ln.rank] = max(enqueued.get(ln.rank, -1), int(m.group(1)))
    if enqueued and not missing and len(set(enqueued.values())) > 1:
        top = max(enqueued.values())
        missing = sorted(r for r, v in enqueued.items() if v < top)
    hosts = _dedupe([ln.host for ln in lines if ln.host and ln.rank in missing])
    seq = re.search(r"SeqNum=(\d+).*?OpType=(\w+)", hits[0].text)
    what = f" {seq.group(2)} SeqNum={seq.group(1)}" if seq else ""
    if missing:
        detail = (
            f"ranks {', '.join(map(str, reporting))} timed out in{what or ' a collective'}; "
            f"rank(s) {', '.join(map(str, missing))} never arrived and are the suspects"
        )
    else:
        detail = f"every rank timed out in{what or ' a collective'}: look for a fabric or GPU fault"
    return missing, hosts, detail


def _missing_or_failed_ranks(
    per_file: dict[str, list[LogLine]],
    lines: list[LogLine],
    multi: bool,
    file_ranks: dict[str, int] | None = None,
) -> tuple[list[int], list[str]]:
    """Per-rank files: ranks that never reached 'Init COMPLETE' while others did, never printed an NCCL line
    while others did, or left an empty file."""
    if not multi:
        return [], []
    done = {name for name, group in per_file.items() if any(INIT_DONE.search(ln.text) for ln in group)}
    nccl = {name for name, group in per_file.items() if any(NCCL_MARK.search(ln.text) for ln in group)}
    failed: list[int] = []
    for name, group in per_file.items():
        if (done and name not in done) or (nccl and name not in nccl) or not group:
            rank = (file_ranks or {}).get(name, group[0].rank if group else _file_rank(Path(name)))
            if rank is not None:
                failed.append(rank)
    hosts = _dedupe([ln.host for ln in lines if ln.host and ln.rank in failed])
    return sorted(set(failed)), hosts


def diagnose_files(paths: list[Path]) -> Diagnosis:
    if not paths:
        raise ParseError("no log files given", fix="pass one log, or one file per rank")
    texts = []
    for p in paths:
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise ParseError(f"cannot read {p}: {exc.strerror}", fix="check the path") from exc
        texts.append((str(p), _decode(data)))
    return diagnose_texts(texts)
