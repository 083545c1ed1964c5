from pathlib import Path

from gpufleet.parsers.infiniband.mlnx_qos import parse_mlnx_qos

CAPTURES = Path(__file__).parents[2] / "captures" / "infiniband"


def test_mlnx_ofed_42_dscp_trust() -> None:
    qos = parse_mlnx_qos((CAPTURES / "mlnx_qos_ofed42_dscp_trust.txt").read_text(), "eth2")
    assert qos.trust == "dscp" and qos.dcbx == "OS controlled"
    assert qos.pfc_priorities == [0, 2, 6, 7]
    assert len(qos.dscp2prio) == 64 and qos.dscp2prio[26] == 3 and qos.dscp2prio[46] == 5
    assert qos.priority_of_dscp(26) == 3
    assert qos.prio2tc == {1: 0, 0: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7}
    assert qos.tsa[6] == "strict" and qos.bandwidth[7] == 40
    assert qos.cable_len == 10 and qos.buffers is None


def test_priority_five_lossless_with_its_buffer() -> None:
    qos = parse_mlnx_qos((CAPTURES / "mlnx_qos_spiderpool_prio5.txt").read_text(), "eth0")
    assert qos.trust == "dscp" and qos.pfc_priorities == [5]
    assert qos.buffers == [0, 0, 0, 0, 0, 1, 0, 0]
    assert qos.dscp2prio == {} and qos.priority_of_dscp(40) == 5  # the default map: DSCP >> 3


def test_pcp_trust_and_the_lldpad_warning() -> None:
    text = (
        "****** WARNING: lldpad service is running and may overwrite your settings ******\n\n"
        "DCBX mode: Firmware controlled\nPriority trust state: pcp\nPFC configuration:\n"
        "\tpriority    0   1   2   3   4   5   6   7\n\tenabled     0   0   0   0   0   0   0   0   \n"
    )
    qos = parse_mlnx_qos(text)
    assert qos.trust == "pcp" and qos.pfc == [False] * 8 and qos.pfc_priorities == []
    assert qos.priority_of_dscp(26) is None
    assert qos.warnings and "lldpad" in qos.warnings[0]
