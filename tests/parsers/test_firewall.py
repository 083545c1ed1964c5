"""The firewall's verdict on RoCEv2's UDP 4791 from real `iptables-save` and `nft list ruleset` captures, and
from those captures with one rule added the way an operator would."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.parsers.firewall import udp_port_iptables, udp_port_nft

CAPTURES = Path(__file__).parents[1] / "captures" / "firewall"
# the words both formats are made of, shuffled into rulesets no tool would print
TOKENS = ["table", "inet", "ip", "filter", "chain", "input", "INPUT", "{", "}", ";", "type", "hook", "priority", "0;",
          "policy", "drop;", "accept", "drop", "reject", "jump", "goto", "udp", "dport", "4791", "{ 4791, 1 }", "!=",
          "4000-5000", "*filter", ":INPUT", "DROP", "[0:0]", "-A", "-p", "--dport", "4000:5000", "-j", "-g", "!",
          "ACCEPT", "COMMIT", "ct", "state", "new", "iifname", '"lo"', "counter", "return", "RETURN", "x"]  # fmt: skip


def text(name: str) -> str:
    return (CAPTURES / name).read_text()


def test_iptables_drop_policy_without_an_accept_drops_4791() -> None:
    verdict = udp_port_iptables(text("iptables_save_algo_input_drop.txt"))
    assert verdict is not None
    assert (verdict.verdict, verdict.chain, verdict.tool) == ("drop", "filter/INPUT", "iptables-save")
    assert "policy" in verdict.rule
    # the UDP 500,4500 accept does not cover 4791; 53 to one address does not either
    assert udp_port_iptables(text("iptables_save_algo_input_drop.txt"), 4500).verdict == "accept"  # type: ignore[union-attr]


def test_iptables_accept_for_4791_a_range_or_a_narrowed_drop() -> None:
    base = text("iptables_save_algo_input_drop.txt")
    first = "-A INPUT -i lo -j ACCEPT\n"
    accepted = udp_port_iptables(base.replace(first, first + "-A INPUT -p udp -m udp --dport 4791 -j ACCEPT\n"))
    assert accepted is not None and accepted.verdict == "accept" and "4791" in accepted.rule
    ranged = udp_port_iptables(base.replace(first, first + "-A INPUT -p udp -m udp --dport 4000:5000 -j REJECT\n"))
    assert ranged is not None and ranged.verdict == "reject"
    # a drop from one source is not a block of RoCE; the DROP policy still decides
    narrowed = udp_port_iptables(base.replace(first, first + "-A INPUT -s 10.0.0.9/32 -p udp --dport 4791 -j DROP\n"))
    assert narrowed is not None and narrowed.rule.startswith(":INPUT DROP")
    # negations as iptables-save writes them
    others = udp_port_iptables(base.replace(first, first + "-A INPUT -p udp -m udp ! --dport 4791 -j ACCEPT\n"))
    assert others is not None and others.verdict == "drop"
    not_udp = udp_port_iptables(base.replace(first, first + "-A INPUT ! -p udp -j ACCEPT\n"))
    assert not_udp is not None and not_udp.verdict == "drop"
    # a user chain jumped to is followed
    jumped = base.replace(":OUTPUT ACCEPT [114:22693]\n", ":OUTPUT ACCEPT [114:22693]\n:ROCE - [0:0]\n")
    jumped = jumped.replace(first, first + "-A INPUT -p udp -j ROCE\n-A ROCE -p udp --dport 4791 -j ACCEPT\n")
    found = udp_port_iptables(jumped)
    assert found is not None and (found.verdict, found.chain) == ("accept", "filter/ROCE")
    # after a goto, the end of the chain gone to is the end of INPUT: its DROP policy, not the accept after it
    gone = base.replace(":OUTPUT ACCEPT [114:22693]\n", ":OUTPUT ACCEPT [114:22693]\n:EMPTY - [0:0]\n")
    gone = gone.replace(first, first + "-A INPUT -p udp -g EMPTY\n-A INPUT -p udp --dport 4791 -j ACCEPT\n")
    ended = udp_port_iptables(gone)
    assert ended is not None and ended.verdict == "drop" and "policy" in ended.rule


def test_iptables_without_a_filter_table() -> None:
    assert udp_port_iptables("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n") is None


def test_nft_unconditional_drop_before_any_udp_accept() -> None:
    verdict = udp_port_nft(text("nft_ruleset_pastebin_counter_drop.txt"))
    assert verdict is not None and verdict.verdict == "drop" and verdict.chain == "inet filter/input"
    assert verdict.rule.startswith("counter packets 1482")


def test_nft_policy_drop_chain_and_an_absent_jump_target() -> None:
    verdict = udp_port_nft(text("nft_ruleset_nixos_router_input_drop.txt"))
    assert verdict is not None and verdict.verdict == "drop" and verdict.chain == "inet firewall/input"
    assert verdict.rule.startswith("counter packets 1489")  # lo, established and invalid rules do not decide


def test_nft_accept_of_4791_a_set_and_a_negation() -> None:
    base = text("nft_ruleset_pastebin_counter_drop.txt")
    lo = '\t\tiif "lo" accept\n'
    for rule in ("udp dport 4791 accept", "udp dport { 4791, 4792 } counter accept", "udp dport 4000-5000 accept"):
        verdict = udp_port_nft(base.replace(lo, lo + f"\t\t{rule}\n"))
        assert verdict is not None and verdict.verdict == "accept", rule
    negated = udp_port_nft(base.replace(lo, lo + "\t\tudp dport != 4791 accept\n"))
    assert negated is not None and negated.verdict == "drop"
    # another table's input chain that drops wins over this one's accept
    other = "table ip other {\n\tchain in {\n\t\ttype filter hook input priority 10; policy drop;\n\t}\n}\n"
    both = udp_port_nft(base.replace(lo, lo + "\t\tudp dport 4791 accept\n") + other)
    assert both is not None and (both.verdict, both.chain) == ("drop", "ip other/in")


def test_nft_without_input_chains() -> None:
    assert (
        udp_port_nft(
            "table netdev x {\n\tchain y {\n\t\ttype filter hook ingress device lo priority 0; policy drop;\n\t}\n}\n"
        )
        is None
    )
    assert udp_port_nft("") is None


@given(st.lists(st.sampled_from(TOKENS), max_size=40).map(" ".join), st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_any_text_gives_a_verdict_or_none(words: str, noise: str) -> None:
    for text_in in (words.replace(" ; ", "\n"), noise, text("nft_ruleset_pastebin_counter_drop.txt") + words):
        for parse in (udp_port_nft, udp_port_iptables):
            found = parse(text_in)
            assert found is None or found.verdict in ("accept", "drop", "reject")
