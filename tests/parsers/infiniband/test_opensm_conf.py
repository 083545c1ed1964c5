from pathlib import Path

from gpufleet.parsers.infiniband.opensm_conf import DEFAULTS, parse_opensm_conf, parse_partitions_conf

CAPTURES = Path(__file__).parents[2] / "captures" / "infiniband"


def test_the_real_default_dump_holds_every_default_the_judgement_assumes() -> None:
    config = parse_opensm_conf((CAPTURES / "opensm_3.3.23_create_config.conf").read_text())
    assert len(config.settings) > 150
    for key, value in DEFAULTS.items():
        assert config.settings[key].value == value, key
    assert config.routing_engines == []  # (null): Min Hop
    assert config.number("sm_priority") == 0
    assert config.flag("qos") is False
    assert config.settings["routing_engine"].line == 228


def test_an_override_file_keeps_defaults_for_what_it_does_not_name() -> None:
    config = parse_opensm_conf("# ours\nrouting_engine ftree,updn  # fallback\nsm_priority 14\nsweep_interval 0x0\n")
    assert config.routing_engines == ["ftree", "updn"]
    assert config.number("sm_priority") == 14
    assert config.number("sweep_interval") == 0
    assert config.get("max_op_vls").value == "5" and config.get("max_op_vls").line == 0
    assert config.given("sm_priority") and not config.given("qos")


# opensm(8) of OpenSM 3.3.23, PARTITION CONFIGURATION, its examples
MAN_EXAMPLES = """
 Default=0x7fff : ALL, SELF=full ;
 NewPartition , ipoib : 0x123456=full, 0x3456789034=limi, 0x2134af2306 ;
 ShareIO = 0x80 , defmember=full : 0x123451, 0x123452;
 # multicast groups added to default
 Default=0x7fff,ipoib:
        mgid=ff12:401b::0707,sl=1 # random IPv4 group
        mgid=ff12::1,sl=1,Q_Key=0xDEADBEEF,rate=3,mtu=2 # random group
        ALL=full;
Storage=0x8001,ipoib,mtu=5,rate=7 : ALL_CAS=full ;
"""


def test_partitions_of_the_man_page() -> None:
    parts = parse_partitions_conf(MAN_EXAMPLES)
    assert [p.name for p in parts] == ["Default", "NewPartition", "ShareIO", "Default", "Storage"]
    assert parts[0].pkey == 0x7FFF and not parts[0].ipoib
    assert parts[1].pkey is None and parts[1].ipoib and parts[1].mtu_bytes == 2048  # the default mtu=4
    assert parts[2].flags == {"defmember": "full"}
    assert parts[3].line == 6 and parts[3].ipoib and parts[3].members == ("ALL=full",)
    assert parts[4].mtu_code == 5 and parts[4].mtu_bytes == 4096 and parts[4].members == ("ALL_CAS=full",)
