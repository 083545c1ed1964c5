"""A live-style /sys/class/infiniband tree under tmp_path: a port that cannot be read is an error beside the good
ones, and a missing tree one clear error."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.sources.infiniband import sysfs as ib_sysfs
from gpufleet.sources.infiniband.sysfs import read_sysfs


def _make_port(root: Path, hca: str, port: int, counters: dict[str, str]) -> Path:
    port_dir = root / hca / "ports" / str(port)
    (port_dir / "counters").mkdir(parents=True)
    (port_dir / "state").write_text("4: ACTIVE\n")
    (port_dir / "phys_state").write_text("5: LinkUp\n")
    (port_dir / "rate").write_text("200 Gb/sec (4X HDR)\n")
    for name, value in counters.items():
        (port_dir / "counters" / name).write_text(value)
    return port_dir


def test_live_tree_keeps_good_ports_when_one_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_port(tmp_path, "mlx5_0", 1, {"symbol_error": "5\n", "link_downed": "0\n"})
    bad = _make_port(tmp_path, "mlx5_0", 2, {"symbol_error": "7\n"})
    corrupt = _make_port(tmp_path, "mlx5_1", 1, {"port_rcv_errors": "12abc\n"})
    (tmp_path / "mlx5_0" / "fw_ver").write_text("28.41.1000\n")
    real_read = ib_sysfs._read_text

    def flaky(path: Path) -> str:
        if path.parent.parent == bad:  # the port's device went away mid-read
            raise OSError(errno.ENODEV, "No such device", str(path))
        return real_read(path)

    monkeypatch.setattr(ib_sysfs, "_read_text", flaky)
    hcas = {h.hca: h for h in read_sysfs(tmp_path)}
    mlx0 = hcas["mlx5_0"]
    assert mlx0.attributes["fw_ver"] == "28.41.1000"
    assert [(p.port, p.counters) for p in mlx0.ports] == [(1, {"SymbolErrorCounter": 5, "LinkDownedCounter": 0})]
    [error] = mlx0.errors
    assert error.port == "2" and "No such device" in error.message and str(bad) in error.path
    [parse_error] = hcas["mlx5_1"].errors
    assert str(corrupt / "counters" / "port_rcv_errors") in parse_error.message
    assert hcas["mlx5_1"].ports == []


def test_missing_sysfs_root_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="no InfiniBand sysfs"):
        read_sysfs(tmp_path / "nope")
