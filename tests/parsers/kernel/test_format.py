"""What the twin writes, the parser reads back: format -> parse round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.errors import UserError
from gpufleet.parsers.kernel.format import dmesg_line, format_fallen_off_bus, format_sxid, format_xid
from gpufleet.parsers.kernel.kmsg import parse_kmsg

_message = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=60).filter(
    lambda m: m.strip() == m and "caused by previous Xid" not in m and not m.startswith("pid=")
)


@settings(max_examples=200, deadline=None)
@given(
    bus=st.integers(0, 255),
    xid=st.integers(1, 999),
    message=_message,
    pid=st.none() | st.integers(1, 4_000_000),
    process=st.none() | st.from_regex(r"[A-Za-z][A-Za-z0-9_.:-]{0,14}", fullmatch=True),
    gi=st.none() | st.integers(0, 14),
    ci=st.none() | st.integers(0, 7),
    root=st.none() | st.integers(1, 172),
    uptime=st.floats(0, 1e7, allow_nan=False),
)
def test_xid_round_trip(
    bus: int,
    xid: int,
    message: str,
    pid: int | None,
    process: str | None,
    gi: int | None,
    ci: int | None,
    root: int | None,
    uptime: float,
) -> None:
    pci = f"0000:{bus:02x}:00"
    line = format_xid(pci, xid, message, pid=pid, process=process, gpu_instance=gi, compute_instance=ci, root_xid=root)
    [event] = parse_kmsg(dmesg_line(line, uptime))
    assert (event.xid, event.pci, event.message, event.root_xid) == (xid, pci, message, root)
    assert (event.pid, event.process) == (pid, process)
    assert event.gpu_instance == gi and event.compute_instance == (ci if gi is not None else None)
    assert event.uptime_s == pytest.approx(uptime, abs=1e-6)


def test_sxid_and_fallen_off_bus_round_trip() -> None:
    [sxid] = parse_kmsg(format_sxid(1, "0000:06:00", 20034, "Link 48 LTSSM Fault Up", fatal=True))
    assert (sxid.sxid, sxid.pci, sxid.sxid_detail.fatal, sxid.sxid_detail.link) == (  # type: ignore[union-attr]
        20034,
        "0000:06:00",
        True,
        48,
    )
    [fallen] = parse_kmsg("\n".join(format_fallen_off_bus("0000:b3:00", "10de:26b5")))
    assert (fallen.kind, fallen.pci, fallen.pci_device_id) == ("fallen_off_bus", "0000:b3:00", "10de:26b5")


def test_bad_pci_is_a_user_error() -> None:
    with pytest.raises(UserError, match="not a PCI address"):
        format_xid("nope", 79, "GPU has fallen off the bus.")
