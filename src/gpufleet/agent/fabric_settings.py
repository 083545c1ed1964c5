"""A node agent's read of its own host's fabric settings (HCA ports' MTU, RoCE netdevs' MTU and lossless QoS,
OpenSM's files, opensm and sharp_am running), sent in its inventory so that the control plane judges every host's
settings together (lossless priorities that disagree across hosts, an IB port below the others' MTU).

The read runs tools (`ibv_devinfo`, `mlnx_qos`), each under sources/infiniband/settings.py's timeout, so it runs
on its own thread: at start and every `every_s` after, never in the collection loop. The inventory carries the
latest read; a host without an HCA is not read at all."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from gpufleet.background import Background
from gpufleet.model.fabric_settings import HostFabricSettings
from gpufleet.sources.infiniband.settings import Run, read_host_settings, run_tool

log = logging.getLogger("gpufleet.agent")

SETTINGS_EVERY_S = 600.0  # fabric settings change by hand, rarely: a read every ten minutes keeps them current


def has_hca(ib_sysfs: Path) -> bool:
    """Whether the host has an RDMA device (InfiniBand or RoCE) in its sysfs tree."""
    try:
        return ib_sysfs.is_dir() and any(ib_sysfs.iterdir())
    except OSError:
        return False


def sysfs_root(ib_sysfs: Path) -> Path:
    """The root above <root>/sys/class/infiniband, where the reader finds sys/class/net, proc and etc/opensm too."""
    parts = ib_sysfs.parts
    if parts[-3:] == ("sys", "class", "infiniband"):
        return Path(*parts[:-3]) if len(parts) > 3 else Path("/")
    return Path("/")


class FabricSettingsWatch(Background):
    """Reads the host's fabric settings at start and every `every_s`; `latest` is the last read (None before the
    first one ends)."""

    thread_name = "fabric-settings"

    def __init__(
        self,
        host: str,
        every_s: float = SETTINGS_EVERY_S,
        read: Callable[[str], HostFabricSettings] | None = None,
    ) -> None:
        super().__init__()
        self.host = host
        self.every_s = every_s
        self.read = read or (lambda name: read_host_settings(host=name))
        self.reads = 0
        self.changed: Callable[[], None] = lambda: None  # told when a read differs from the one before
        self._latest: HostFabricSettings | None = None
        self._lock = threading.Lock()
        self._said: tuple[str, ...] = ()

    @property
    def latest(self) -> HostFabricSettings | None:
        with self._lock:
            return self._latest

    def read_now(self) -> HostFabricSettings:
        settings = self.read(self.host)
        errors = tuple(settings.errors)
        if errors and errors != self._said:  # said once, not every read
            log.warning("fabric settings of %s read in part: %s", self.host, "; ".join(errors))
        self._said = errors
        with self._lock:
            before, self._latest = self._latest, settings
            self.reads += 1
        if settings != before:
            self.changed()
        return settings

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.read_now()
            except Exception:  # a bug in one read must not end the watch; the last read stands
                log.exception("reading the fabric settings of %s failed", self.host)
            self.stopping.wait(self.every_s)


def settings_watch(host: str, ib_sysfs: Path, every_s: float | None, run: Run = run_tool) -> FabricSettingsWatch | None:
    """The watch for a host agent: None when reading is off (`every_s` None or 0) or the host has no HCA."""
    if not every_s or not has_hca(ib_sysfs):
        return None
    root = sysfs_root(ib_sysfs)
    return FabricSettingsWatch(host, every_s, lambda name: read_host_settings(root=root, run=run, host=name))
