"""Diagnose NCCL failures from NCCL_DEBUG output and PyTorch ProcessGroupNCCL logs (one file or one per rank).

Lines are normalised first (ANSI colour, launcher prefixes, NUL and other binary bytes), the launcher or
file name tells which rank wrote them. Each line then gets a class: from the hand-written refinements in
data/signatures.yaml if one matches, else from data/messages.yaml, the catalog of NCCL's and PyTorch's own
message texts. The class with the lowest priority found is the diagnosis; IB completion statuses are decoded
with data/ibv_wc_status.yaml, and a WR_FLUSH_ERR completion next to another error counts as its cascade.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from gpufleet.catalog.setup_errors import setup_error
from gpufleet.errors import ParseError
from gpufleet.nccl import refine
from gpufleet.nccl._files import load_yaml
from gpufleet.nccl.clock_skew import SkewSeen, StampedLine, find_skew
from gpufleet.nccl.line_match import Ordered

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
SEQ_NUM = re.compile(r"SeqNum=(\d+)")
OP_TYPE = re.compile(r"OpType=(\w+)")
LAST_ENQUEUED = re.compile(r"last enqueued (?:NCCL )?work: (\d+)", re.IGNORECASE)
PEER = re.compile(r"from peer ([\w.:-]+?)<\d+>")
FILE_RANK = re.compile(r"(?:rank|r)[_.-]?(\d+)(?!.*\d)", re.IGNORECASE)
# Only lines with one of these words can hold a catalogued message; the rest skip the catalog.
CANDIDATE = re.compile(
    r"WARN|error|fail|timed? ?out|timeout|refused|reset by|abort|mismatch|no device|not found|not supported|"
    r"unsupported|fall(?:ing)? ?back|invalid|exceed|insufficient|denied|closed|retry|unable|cannot|can't|"
    r"could not|couldn't|watchdog|heartbeat|monitoredBarrier|lagging|collective #|HINT|duplicate",
    re.IGNORECASE,
)
# PyTorch prints NCCL's last WARN text on the line after "Last error:", without NCCL's prefix.
LAST_ERROR = re.compile(r"Last error:\s*$")
# NCCL 2.12 prints "with error 12", 2.13-2.26 "status=12", 2.27+ "status=IBV_WC_RETRY_EXC_ERR(12)".
WC_STATUS = re.compile(r"\bstatus=\(?(?:IBV_WC_\w+)?\)?\(?(\d+)\)?|Got completion from peer \S+ with error (\d+)")
# Ranks PyTorch names outright: monitoredBarrier's missing ranks and the desync report's lagging ones.
NAMED_SUSPECTS = (
    re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier"),
    re.compile(r"ranks \[([\d, ]+)\] are the lagging ranks"),
    re.compile(r"- \[([\d, ]+)\] joined but didn't finish collective"),
)
# Classes a line may carry that never become the diagnosis.
NOT_A_CAUSE = ("benign", "unknown")
# Classes that are what another failure looks like from here: beside them a flushed IB completion is still the
# nearest evidence of the network failure, not a cascade of something else in the log.
SYMPTOMS = ("ib_transport_error", "collective_timeout", "comm_aborted", "peer_connection_lost")


@dataclass(frozen=True)
class Signature:
    name: str
    priority: int
    summary: str
    fix: str
    patterns: tuple[Ordered, ...]
    # Lower-case literal text each pattern requires ("" when none): most lines fail this cheap test.
    anchors: tuple[str, ...] = ()


def literal_runs(regex: str) -> list[str]:
    """The literal stretches a regular expression requires, in order (empty when it has a top-level `|`)."""
    runs: list[str] = []
    cur = ""
    depth = 0
    i = 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex):
            nxt = regex[i + 1]
            if depth == 0:
                if nxt.isalnum():  # \d, \s, \b...: a class, not a character
                    runs.append(cur)
                    cur = ""
                else:
                    cur += nxt
            i += 2
            continue
        if c == "(":
            depth += 1
            if depth == 1:
                runs.append(cur)
                cur = ""
        elif c == ")":
            depth -= 1
        elif depth == 0:
            if c == "|":
                return []
            if c in "?*{":
                cur = cur[:-1]  # the character before is optional
                runs.append(cur)
                cur = ""
            elif c in ".[^$+":
                runs.append(cur)
                cur = ""
                if c == "[":
                    i = regex.index("]", i + 2)
            else:
                cur += c
        i += 1
    runs.append(cur)
    return [r for r in runs if r]


@cache
def signatures() -> tuple[Signature, ...]:
    raw = load_yaml("signatures.yaml")["classes"]
    sigs = []
    for name, spec in raw.items():
        # a setup error's texts (a driver/library mismatch) are the setup-error catalog's, not a copy here
        patterns = [*(spec.get("patterns") or ()),
                    *(p for ref in spec.get("setup_errors") or () for p in setup_error(ref).patterns)]  # fmt: skip
        sigs.append(
            Signature(
                name,
                int(spec["priority"]),
                spec["summary"],
                spec["fix"],
                tuple(Ordered(p, re.IGNORECASE) for p in patterns),
                tuple(max(literal_runs(p) or [""], key=len).lower() for p in patterns),
            )
        )
    return tuple(sorted(sigs, key=lambda s: s.priority))


CLASSES = (*(s.name for s in signatures()), "unknown")


@dataclass(frozen=True)
class CatalogEntry:
    id: int
    cls: str
    regex: Ordered
    anchor: str  # literal text every match contains: a cheap test before the regex
    weight: int  # literal characters: of several matching entries the most specific wins
    source: str


@cache
def catalog() -> tuple[CatalogEntry, ...]:
    entries = []
    for raw in load_yaml("messages.yaml")["messages"]:
        runs = literal_runs(raw["regex"])
        entries.append(
            CatalogEntry(
                int(raw["id"]),
                raw["class"],
                Ordered(raw["regex"]),
                max(runs, key=len) if runs else "",
                sum(map(len, runs)),
                raw["source"],
            )
        )
    return tuple(entries)


WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _whole_words(anchor: str) -> list[str]:
    """Words of the anchor that are whole words in any matching line: its first and last word may be glued to
    the text a capture group stands for, so they count only when the anchor starts or ends with a non-word."""
    spans = [(m.start(), m.end(), m.group()) for m in WORD.finditer(anchor)]
    return [w for start, end, w in spans if start > 0 and end < len(anchor) and len(w) > 2]


@cache
def _catalog_index() -> tuple[dict[str, tuple[CatalogEntry, ...]], tuple[CatalogEntry, ...]]:
    """Entries keyed by one whole word of their anchor (the word fewest entries share), and those with none."""
    entries = catalog()
    freq: dict[str, int] = {}
    for entry in entries:
        for w in set(_whole_words(entry.anchor)):
            freq[w] = freq.get(w, 0) + 1
    index: dict[str, list[CatalogEntry]] = {}
    always: list[CatalogEntry] = []
    for entry in entries:
        words = _whole_words(entry.anchor)
        if words:
            index.setdefault(min(words, key=lambda w: (freq[w], w)), []).append(entry)
        else:
            always.append(entry)
    return {w: tuple(es) for w, es in index.items()}, tuple(always)


@cache
def wc_status() -> dict[int, dict[str, str]]:
    return {int(k): v for k, v in load_yaml("ibv_wc_status.yaml")["wc_status"].items()}


def classify_line(text: str) -> str | None:
    """The class one normalised line belongs to: a hand refinement first, else the catalog's most specific entry;
    an IB completion whose status means another cause takes that cause's class (data/ibv_wc_status.yaml)."""
    cls = _line_class(text)
    if cls == "ib_transport_error":
        status = wc_status_of(text)
        return wc_status().get(status, {}).get("class", cls) if status is not None else cls
    return cls


def _line_class(text: str) -> str | None:
    hand = _hand_class(text)
    if hand:
        return hand
    if any(p.search(text) for p in _no_cause()):
        return "unknown"
    index, always = _catalog_index()
    candidates = list(always)
    for word in set(WORD.findall(text)):
        candidates.extend(index.get(word, ()))
    best: CatalogEntry | None = None
    for entry in candidates:
        if entry.anchor in text and (best is None or entry.weight > best.weight) and entry.regex.search(text):
            best = entry
    return best.cls if best else None


def wc_status_of(text: str) -> int | None:
    m = WC_STATUS.search(text)
    if not m:
        return None
    return int(m.group(1) or m.group(2))


def describe_wc_status(status: int) -> str:
    """'status 12 RETRY_EXC_ERR: the peer or the path is gone ...'"""
    known = wc_status().get(status)
    if not known:
        return f"status {status}: not an ibv_wc_status value"
    return f"status {status} {known['name']}: {known['nccl']}"


def _is_cascade(text: str) -> bool:
    status = wc_status_of(text)
    return status is not None and bool(wc_status().get(status, {}).get("cascade"))


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
    classes = _classify(per_file)
    matches: dict[str, list[LogLine]] = {}
    for ln in lines:
        cls = classes.get(id(ln))
        if cls and cls not in NOT_A_CAUSE:
            matches.setdefault(cls, []).append(ln)
    flush_only = _drop_cascades(matches)
    line_texts = [ln.text for ln in lines]
    notes: list[str] = []
    if "bootstrap_unreachable" in matches:
        retry_note = refine.retries_only(line_texts, [ln.text for ln in matches["bootstrap_unreachable"]])
        if retry_note is None:
            del matches["bootstrap_unreachable"]
        elif retry_note:
            notes.append(retry_note)
    versions = refine.versions_differ(line_texts)
    if versions is not None:
        matches.setdefault("version_mismatch", []).extend(lines[i] for i in versions[0])
        notes.append(versions[1])
    priority = {s.name: s.priority for s in signatures()}
    by_priority = sorted(matches, key=lambda n: priority[n])
    ifname_note = refine.socket_ifname(by_priority[0] if by_priority else "unknown", line_texts)
    if ifname_note:
        hits = [ln for ln in lines if refine.SOCKET_IFNAME.search(ln.text) or refine.SYSTEM_ERROR.search(ln.text)]
        matches = {"socket_ifname": hits + [h for hs in matches.values() for h in hs], **matches}
        by_priority = ["socket_ifname", *by_priority]
        notes.append(ifname_note)
    if by_priority and by_priority[0] == "ib_transport_error":
        gid_note = refine.roce_gid_index(line_texts, [ln.text for ln in matches["ib_transport_error"]])
        if gid_note:
            matches["roce_gid_index"] = matches["ib_transport_error"]
            by_priority = ["roce_gid_index", *by_priority]
            notes.append(gid_note)
    skew = find_skew(StampedLine(_after_launcher(ln.raw), ln.raw, ln.host) for ln in lines if ln.host)
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
        dx.evidence = _telling_lines(lines, classes)
        if dx.evidence:
            dx.summary = "NCCL reported errors, but none names a known cause; the WARN lines below are the first"
        dx.ranks, dx.hosts = _missing_or_failed_ranks(per_file, lines, multi, file_ranks)
        return _with_skew(dx, skew)
    best = by_priority[0]
    sig = next(s for s in signatures() if s.name == best)
    hits = matches[best]
    dx = Diagnosis(best, "; ".join([sig.summary, *notes]), sig.fix)
    if best == "ib_transport_error":
        # The completion that failed first tells the cause; flushes after it are its cascade.
        hits = sorted(hits, key=lambda ln: _is_cascade(ln.text))
        status = next((s for ln in hits if (s := wc_status_of(ln.text)) is not None), None)
        if status is not None:
            dx.summary += f"; {describe_wc_status(status)}"
        if flush_only:
            dx.summary += "; only flushed completions seen: the error that started it is not in these logs"
        hits = [h for h in hits if not _is_cascade(h.text)] or hits
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
    return _with_skew(dx, skew)


def _after_launcher(raw: str) -> str:
    """A line without colour, control bytes and launcher prefixes, its own timestamp kept (clock_skew reads it)."""
    text = CONTROL.sub("", ANSI.sub("", raw)).replace("\ufffd", "")
    for _ in range(3):
        m = next((m for pat in PREFIXES if (m := pat.match(text))), None)
        if m is None:
            break
        text = text[m.end() :]
    return text.strip()


def _with_skew(dx: Diagnosis, skew: SkewSeen | None) -> Diagnosis:
    """The diagnosis with the hosts' clock disagreement said beside it (it is never the failure itself)."""
    if skew is None:
        return dx
    dx.summary += f"; {skew.note}"
    dx.also_seen = _dedupe([*dx.also_seen, "time_zones_differ" if skew.zones else "clock_skew"])
    dx.evidence = _dedupe([*dx.evidence, *skew.evidence])
    dx.hosts = _dedupe([*dx.hosts, *skew.hosts])
    return dx


def _classify(per_file: dict[str, list[LogLine]]) -> dict[int, str]:
    """Class of every line that has one, keyed by id(line)."""
    out: dict[int, str] = {}
    for group in per_file.values():
        after_last_error = False
        for ln in group:
            candidate = after_last_error or CANDIDATE.search(ln.text) is not None
            after_last_error = LAST_ERROR.search(ln.text) is not None
            cls = classify_line(ln.text) if candidate else _hand_class(ln.text)
            if cls:
                out[id(ln)] = cls
    return out


@cache
def _no_cause() -> tuple[re.Pattern[str], ...]:
    """Lines that say something failed but name no cause (data/signatures.yaml `names_no_cause`)."""
    return tuple(re.compile(p, re.IGNORECASE) for p in load_yaml("signatures.yaml").get("names_no_cause") or ())


@cache
def _hand_patterns() -> tuple[tuple[str, Ordered, str], ...]:
    """(anchor, pattern, class) in priority order, flat: this runs on every line."""
    return tuple((a, p, sig.name) for sig in signatures() for p, a in zip(sig.patterns, sig.anchors, strict=True))


def _hand_class(text: str) -> str | None:
    low = text.lower()
    for anchor, pattern, name in _hand_patterns():
        if anchor in low and pattern.search(text):
            return name
    return None


def _drop_cascades(matches: dict[str, list[LogLine]]) -> bool:
    """Flushed completions (WR_FLUSH_ERR) follow an earlier error: with another cause in the logs they are its
    cascade and leave the IB class out. True when flushes are all the IB evidence there is."""
    ib = matches.get("ib_transport_error")
    if not ib or not all(_is_cascade(ln.text) for ln in ib):
        return False
    others = [c for c in matches if c not in SYMPTOMS]
    if others:
        del matches["ib_transport_error"]
        return False
    return True


def _telling_lines(lines: list[LogLine], classes: dict[int, str]) -> list[str]:
    """For an unknown diagnosis: catalogued failure messages first (one per distinct text), then other WARN
    lines, then anything saying error; never the lines the catalog knows are not failures."""
    ranked: list[tuple[int, int, str]] = []
    for i, ln in enumerate(lines):
        cls = classes.get(id(ln))
        if cls == "benign":
            continue
        if cls == "unknown":
            ranked.append((0, i, ln.raw))
        elif "WARN" in ln.text:
            ranked.append((1, i, ln.raw))
        elif "error" in ln.text.lower():
            ranked.append((2, i, ln.raw))
    return _dedupe([raw for _, _, raw in sorted(ranked)])[:5]


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
    named = _named_suspects(lines)
    if named:
        missing = named
    hosts = _dedupe([ln.host for ln in lines if ln.host and ln.rank in missing])
    seq = next((found for ln in hits if (found := _seq_and_op(ln.text))), None)
    what = f" {seq[1]} SeqNum={seq[0]}" if seq else ""
    if missing:
        detail = (
            f"ranks {', '.join(map(str, reporting))} timed out in{what or ' a collective'}; "
            f"rank(s) {', '.join(map(str, missing))} never arrived and are the suspects"
        )
    else:
        detail = f"every rank timed out in{what or ' a collective'}: look for a fabric or GPU fault"
    return missing, hosts, detail


def _seq_and_op(text: str) -> tuple[str, str] | None:
    """(SeqNum, OpType) of a watchdog line: the first SeqNum with an OpType after it, as
    `SeqNum=(\\d+).*?OpType=(\\w+)` finds them, without retrying from every later SeqNum (quadratic in a long line)."""
    seq = SEQ_NUM.search(text)
    op = OP_TYPE.search(text, seq.end()) if seq else None
    return (seq.group(1), op.group(1)) if seq and op else None


def _named_suspects(lines: list[LogLine]) -> list[int]:
    named: set[int] = set()
    for ln in lines:
        for pat in NAMED_SUSPECTS:
            m = pat.search(ln.text)
            if m:
                named.update(int(r) for r in re.findall(r"\d+", m.group(1)))
    return sorted(named)


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
