"""Reading a live `/sys/class/infiniband` tree: every HCA and port, a port that cannot be read kept as an error
beside the others. What each file means is `gpufleet.parsers.infiniband.sysfs`."""

from __future__ import annotations

from pathlib import Path

from gpufleet.errors import ParseError
from gpufleet.parsers.infiniband.sysfs import HcaSnapshot, PortReadError, PortSnapshot, set_port_value, sysfs_to_pma


def _read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _read_port(hca: str, port_dir: Path, names: dict[str, str]) -> PortSnapshot:
    port = PortSnapshot(hca=hca, port=int(port_dir.name))
    for rest in ("state", "phys_state", "rate", "link_layer"):
        file = port_dir / rest
        if file.is_file():
            set_port_value(port, rest, _read_text(file), f"{file}:1", names)
    for directory in ("counters", "hw_counters"):
        folder = port_dir / directory
        if not folder.is_dir():
            continue
        for file in sorted(folder.iterdir()):
            if file.is_file():
                set_port_value(port, f"{directory}/{file.name}", _read_text(file), f"{file}:1", names)
    return port


def read_sysfs(root: Path | str = "/sys/class/infiniband") -> list[HcaSnapshot]:
    """Read every HCA and port under `root`. A port that cannot be read (permissions, a vanished device, a
    corrupted counter file) becomes a `PortReadError` on its HCA; the other ports are still read."""
    root = Path(root)
    if not root.is_dir():
        raise ParseError(f"{root}: no InfiniBand sysfs directory", fix="is rdma-core loaded (ib_core, mlx5_ib)?")
    names = sysfs_to_pma()
    hcas: list[HcaSnapshot] = []
    for hca_dir in sorted(root.iterdir()):
        snapshot = HcaSnapshot(hca=hca_dir.name)
        for attribute in ("board_id", "fw_ver", "hca_type", "node_guid", "node_desc"):
            file = hca_dir / attribute
            try:
                if file.is_file():
                    snapshot.attributes[attribute] = _read_text(file).strip()
            except OSError:
                continue  # optional identity; the ports are what matter
        ports_dir = hca_dir / "ports"
        try:
            port_dirs = sorted((p for p in ports_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        except OSError as exc:
            snapshot.errors.append(PortReadError(hca_dir.name, "*", str(ports_dir), exc.strerror or str(exc)))
            port_dirs = []
        for port_dir in port_dirs:
            try:
                snapshot.ports.append(_read_port(hca_dir.name, port_dir, names))
            except OSError as exc:
                where = exc.filename or str(port_dir)
                snapshot.errors.append(
                    PortReadError(hca_dir.name, port_dir.name, str(where), f"cannot read: {exc.strerror or exc}")
                )
            except ParseError as exc:
                snapshot.errors.append(PortReadError(hca_dir.name, port_dir.name, str(port_dir), exc.message))
        hcas.append(snapshot)
    return hcas
