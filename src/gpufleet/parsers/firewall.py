"""What a host's packet filter does with an incoming UDP packet to one port (RoCEv2's 4791), read from
`iptables-save` or `nft list ruleset` text.

Only the filter chains on the INPUT hook decide whether a packet for this host arrives: iptables-save's `*filter`
table, chain INPUT (its policy is the `:INPUT DROP [..]` line); nft's base chains `type filter hook input` of the
ip, ip6 and inet families (`policy drop;`). Each rule is tried in order; a jump/goto is followed into the named
chain of the same table (after a jump the caller's next rule is tried; after a goto the caller ends too). A jump
to a chain the text does not hold decides nothing. A rule counts only when it matches every such packet or may match it:
- a drop/reject counts only when nothing but the protocol and port narrows it (a rule limited to a source, an
  interface, a conntrack state or a rate does not drop every RoCE packet, so it is not called a block);
- an accept limited to a source or an interface counts as an accept (RoCE may arrive that way); an accept limited
  to conntrack ESTABLISHED/RELATED does not (RoCEv2 peers send to 4791 from varying source ports, so each direction
  is its own flow) and neither does one for the loopback interface.
nft: a drop in any input base chain drops the packet, whatever another chain (another table) accepts
(wiki.nftables.org, "Configuring chains": an accept ends only its own base chain).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ROCE_V2_PORT = 4791  # IANA; RoCEv2's UDP destination port
MAX_DEPTH = 16  # jumps followed before giving up (a loop)


@dataclass(frozen=True)
class PortVerdict:
    verdict: str  # accept, drop, reject
    rule: str  # the rule that decides, or "policy drop" of the chain
    chain: str  # table/chain it is in
    tool: str  # iptables-save, nft


# --- iptables-save ---------------------------------------------------------------------------------------------

_IPT_CHAIN = re.compile(r"^:(?P<name>\S+)\s+(?P<policy>\S+)")
_NARROWING_IPT = ("-s", "--source", "-m conntrack", "-m state", "-m limit", "-m hashlimit", "-m recent", "-m set")


@dataclass
class _IptRule:
    text: str
    args: list[str]


def udp_port_iptables(text: str, port: int = ROCE_V2_PORT) -> PortVerdict | None:
    """The verdict of the filter table's INPUT chain on a UDP packet to `port`; None without a filter table."""
    chains: dict[str, list[_IptRule]] = {}
    policies: dict[str, str] = {}
    table = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*"):
            table = line[1:]
        elif table != "filter" or not line or line.startswith("#"):
            continue
        elif (m := _IPT_CHAIN.match(line)) is not None:
            chains.setdefault(m["name"], [])
            if m["policy"] != "-":
                policies[m["name"]] = m["policy"]
        elif line.startswith("-A "):
            args = line.split()
            chains.setdefault(args[1], []).append(_IptRule(line, args[2:]))
    if "INPUT" not in chains:
        return None
    found = _ipt_chain(chains, "INPUT", port, 0)
    if found is not None:
        return found
    policy = "drop" if policies.get("INPUT", "ACCEPT").upper() == "DROP" else "accept"  # the only two policies
    return PortVerdict(policy, f":INPUT {policy.upper()} (the chain's policy)", "filter/INPUT", "iptables-save")


def _ipt_chain(chains: dict[str, list[_IptRule]], name: str, port: int, depth: int) -> PortVerdict | None:
    if depth > MAX_DEPTH:
        return None
    for rule in chains.get(name, []):
        goto = _opt(rule.args, "-g", "--goto")
        target = _opt(rule.args, "-j", "--jump") or goto
        if target is None or not _ipt_may_match(rule.args, port):
            continue
        if target in chains:
            found = _ipt_chain(chains, target, port, depth + 1)
            if found is not None or goto:
                return found  # the end of a chain gone to (not jumped to) ends this one too
            continue
        verdict = target.lower()
        if verdict == "return":
            return None
        if verdict == "accept" and _ipt_accepts(rule.args):
            return PortVerdict("accept", rule.text, f"filter/{name}", "iptables-save")
        if verdict in ("drop", "reject") and not _ipt_narrowed(rule.text):
            return PortVerdict(verdict, rule.text, f"filter/{name}", "iptables-save")
    return None


def _opt(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args[:-1]):
        if arg in names:
            return args[i + 1]
    return None


def _ipt_may_match(args: list[str], port: int) -> bool:
    # iptables-save writes a negation before its option: `! -p udp`, `-m udp ! --dport 4791`
    negated = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "!"}
    proto = _opt(args, "-p", "--protocol")
    if proto is not None:
        is_udp = proto.lower() in ("udp", "all", "17")
        if is_udp == bool(negated & {"-p", "--protocol"}):
            return False
    flags = ("--dport", "--destination-port", "--dports", "--destination-ports")
    ports = _opt(args, *flags)
    if ports is not None:
        inside = any(_in_range(p, port, ":") for p in ports.split(","))
        return inside != bool(negated & set(flags))
    return True


def _ipt_accepts(args: list[str]) -> bool:
    state = _opt(args, "--ctstate", "--state") or ""
    if state and "NEW" not in state.split(","):
        return False  # ESTABLISHED/RELATED only: not a first RoCE packet
    return _opt(args, "-i", "--in-interface") != "lo"


def _ipt_narrowed(text: str) -> bool:
    return any(f" {flag} " in f" {text} " for flag in (*_NARROWING_IPT, "-i", "--in-interface"))


def _in_range(spec: str, port: int, sep: str) -> bool:
    low, _, high = spec.strip().partition(sep)
    try:
        return int(low) <= port <= int(high or low)
    except ValueError:
        return False  # a service name: not 4791's (roce has no /etc/services name)


# --- nft list ruleset ------------------------------------------------------------------------------------------

_NFT_TABLE = re.compile(r"^table\s+(?P<family>\S+)\s+(?P<name>\S+)\s*\{")
_NFT_CHAIN = re.compile(r"^chain\s+(?P<name>\S+)\s*\{")
_NFT_BASE = re.compile(r"type\s+filter\s+hook\s+input\b.*?(?:policy\s+(?P<policy>\w+))?\s*;?\s*$")
_NFT_VERDICT = re.compile(r"\b(?P<verdict>accept|drop|reject|return|(?:jump|goto)\s+\S+)(?:\s+with\s+.*)?\s*$")
_NFT_PORTS = re.compile(r"\b(?:udp|th)\s+dport\s+(?P<neg>!=\s*)?(?P<spec>\{[^}]*\}|\S+)")
_NFT_COMMENT = re.compile(r'\s*comment\s+"[^"]*"\s*$')
_NFT_NEUTRAL = {"counter", "packets", "bytes", "log", "prefix", "level", "meta", "l4proto", "udp", "ip", "ip6"}


@dataclass
class _NftChain:
    base: bool = False
    policy: str = "accept"
    rules: list[str] | None = None


def udp_port_nft(text: str, port: int = ROCE_V2_PORT) -> PortVerdict | None:
    """The verdict of the ip/ip6/inet filter chains on the input hook on a UDP packet to `port`: the first drop or
    reject among them, else an accept; None when there is no input filter chain."""
    tables: dict[str, dict[str, _NftChain]] = {}
    table = chain = ""
    for raw in text.splitlines():
        line = raw.strip()
        if (m := _NFT_TABLE.match(line)) is not None:
            # arp, bridge and netdev tables do not see packets on the IP input hook
            table = f"{m['family']} {m['name']}" if m["family"] in ("ip", "ip6", "inet") else ""
            chain = ""
            if table:
                tables[table] = {}
        elif not table or not line:
            continue
        elif (m := _NFT_CHAIN.match(line)) is not None:
            chain = m["name"]
            tables[table][chain] = _NftChain(rules=[])
        elif line == "}":
            chain = ""
        elif chain and line.startswith("type "):
            if (b := _NFT_BASE.search(line)) is not None:
                tables[table][chain].base = True
                tables[table][chain].policy = "drop" if (b["policy"] or "").lower() == "drop" else "accept"
        elif chain and not line.startswith(("hook ", "devices ", "policy ")):
            rules = tables[table][chain].rules
            assert rules is not None
            rules.append(line)
    verdicts: list[PortVerdict] = []
    for name, chains in tables.items():
        for chain_name, entry in chains.items():
            if not entry.base:
                continue
            found = _nft_chain(chains, name, chain_name, port, 0)
            verdicts.append(found or PortVerdict(entry.policy, f"policy {entry.policy}", f"{name}/{chain_name}", "nft"))
    blocked = [v for v in verdicts if v.verdict in ("drop", "reject")]
    decided = blocked or verdicts
    return decided[0] if decided else None


def _nft_chain(chains: dict[str, _NftChain], table: str, name: str, port: int, depth: int) -> PortVerdict | None:
    if depth > MAX_DEPTH or name not in chains:
        return None
    for rule in chains[name].rules or []:
        body = _NFT_COMMENT.sub("", rule)
        m = _NFT_VERDICT.search(body)
        if m is None or not _nft_may_match(body, port):
            continue
        verdict = m["verdict"]
        if verdict.startswith(("jump", "goto")):
            found = _nft_chain(chains, table, verdict.split()[1], port, depth + 1)
            if found is not None or verdict.startswith("goto"):
                return found  # the end of a chain gone to (not jumped to) ends this one too
            continue
        if verdict == "return":
            return None
        conditions = body[: m.start()]
        if verdict == "accept" and _nft_accepts(conditions):
            return PortVerdict("accept", rule, f"{table}/{name}", "nft")
        if verdict in ("drop", "reject") and not _nft_narrowed(conditions):
            return PortVerdict(verdict, rule, f"{table}/{name}", "nft")
    return None


def _nft_may_match(body: str, port: int) -> bool:
    if re.search(r"\b(tcp|icmp|icmpv6|sctp)\b", body) and not re.search(r"\budp\b", body):
        return False
    proto = re.search(r"\b(?:ip protocol|meta l4proto|ip6 nexthdr)\s+(?P<neg>!=\s*)?(?P<spec>\{[^}]*\}|\S+)", body)
    if proto is not None:
        names = {p.strip() for p in proto["spec"].strip("{}").split(",")}
        if ("udp" in names or "17" in names) == bool(proto["neg"]):
            return False
    ports = _NFT_PORTS.search(body)
    if ports is not None:
        inside = any(_in_range(p, port, "-") for p in ports["spec"].strip("{}").split(","))
        return inside != bool(ports["neg"])
    return True


def _nft_accepts(conditions: str) -> bool:
    state = re.search(r"\bct state\s+(?P<spec>\{[^}]*\}|\S+)", conditions)
    if state is not None and "new" not in state["spec"]:
        return False
    return not re.search(r'\biif(?:name)?\s+"?lo"?(\s|$)', conditions)


def _nft_narrowed(conditions: str) -> bool:
    """Anything beyond the protocol, the port, counters and logging."""
    left = _NFT_PORTS.sub("", conditions)
    left = re.sub(r"\b(?:ip protocol|meta l4proto|ip6 nexthdr)\s+(?:\{[^}]*\}|\S+)", "", left)
    left = re.sub(r'prefix\s+"[^"]*"|packets\s+\d+|bytes\s+\d+', "", left)
    return any(token not in _NFT_NEUTRAL for token in left.split())
