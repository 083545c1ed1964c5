"""Per-port fabric state: link state, traffic and the PMA error counters, as numpy arrays over every port end.

Counters follow the InfiniBand PortCounters semantics the real tools read: data counters in octets (the twin keeps
bytes; readers divide by 4 where a tool expects PortXmitData units), error counters that only grow. When a link
goes down both ends stop carrying traffic, the port that saw the failure counts LinkDowned, and packets routed at a
dead port are counted as transmit discards on the switch side.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpufleet.model import Cluster

MTU_BYTES = 4096

COUNTERS = (
    "xmit_bytes",
    "rcv_bytes",
    "xmit_pkts",
    "rcv_pkts",
    "symbol_errors",
    "link_error_recovery",
    "link_downed",
    "rcv_errors",
    "rcv_remote_phys_errors",
    "xmit_discards",
    "xmit_wait",
    "vl15_dropped",
)


@dataclass(slots=True)
class PortArrays:
    n: int
    owner: list[str]  # "dgx-003/mlx5_2" for an HCA port, a switch name otherwise
    number: np.ndarray
    peer: np.ndarray  # index of the port at the other end of the cable
    speed_gbps: np.ndarray
    is_hca: np.ndarray
    up: np.ndarray  # bool
    symbol_rate_per_s: np.ndarray
    down_since: np.ndarray  # time the port went down; NaN while up
    counters: dict[str, np.ndarray] = field(default_factory=dict)
    nic_port: dict[tuple[int, int], int] = field(default_factory=dict)  # (node index, rail) -> port index
    by_key: dict[tuple[str, int], int] = field(default_factory=dict)
    disabled: set[int] = field(default_factory=set)  # ports switched off (isolation): Down/Disabled

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> PortArrays:
        owners: list[str] = []
        numbers: list[int] = []
        peers: list[int] = []
        speeds: list[float] = []
        for link in cluster.fabric.links:
            a = len(owners)
            for end in (link.a, link.b):
                owners.append(end[0])
                numbers.append(end[1])
                speeds.append(link.speed_gbps)
            peers.extend([a + 1, a])
        n = len(owners)
        node_index = {node.name: i for i, node in enumerate(cluster.nodes)}
        ports = cls(
            n=n,
            owner=owners,
            number=np.array(numbers, dtype=np.int32),
            peer=np.array(peers, dtype=np.int64),
            speed_gbps=np.array(speeds, dtype=np.float64),
            is_hca=np.array(["/" in o for o in owners], dtype=bool),
            up=np.ones(n, dtype=bool),
            symbol_rate_per_s=np.zeros(n, dtype=np.float64),
            down_since=np.full(n, np.nan),
            counters={name: np.zeros(n, dtype=np.int64) for name in COUNTERS},
        )
        for i, (owner, number) in enumerate(zip(owners, numbers, strict=True)):
            ports.by_key[(owner, number)] = i
            if "/" in owner:
                node, hca = owner.split("/", 1)
                rail = int(hca.rsplit("_", 1)[1])
                ports.nic_port[(node_index[node], rail)] = i
        return ports

    def add_traffic(self, port_idx: np.ndarray, bytes_out: np.ndarray) -> None:
        """Send `bytes_out` from each HCA port to its leaf, and as much back (AllReduce traffic is symmetric).

        One call carries a whole tick of every job's traffic: a port may repeat (two jobs sharing a node's NICs),
        each entry counting as its own send.
        """
        if port_idx.size == 0:
            return
        up = self.up[port_idx]
        all_up = bool(up.all())
        sent = bytes_out.astype(np.int64) if all_up else np.where(up, bytes_out, 0).astype(np.int64)
        pkts = sent // MTU_BYTES
        peer = self.peer[port_idx]
        both = np.concatenate((port_idx, peer))
        sent2, pkts2 = np.concatenate((sent, sent)), np.concatenate((pkts, pkts))
        c = self.counters
        for name, add in (("xmit_bytes", sent2), ("rcv_bytes", sent2), ("xmit_pkts", pkts2), ("rcv_pkts", pkts2)):
            np.add.at(c[name], both, add)  # unbuffered: a repeated port counts every time
        # Traffic aimed at a dead link is discarded at the switch that would forward it.
        if not all_up:
            down = ~up
            np.add.at(c["xmit_discards"], peer[down], (bytes_out[down] // MTU_BYTES).astype(np.int64))

    def step(self, dt: float, rng: np.random.Generator) -> None:
        if self.symbol_rate_per_s.any():
            errs = rng.poisson(self.symbol_rate_per_s * dt) * self.up
            self.counters["symbol_errors"] += errs
            # Symbol errors that corrupt a packet also show up as receive errors on the same port.
            self.counters["rcv_errors"] += rng.binomial(errs, 0.3)

    def set_link(self, i: int, up: bool, now: float) -> bool:
        """Change the state of the cable that port `i` is on. Returns True if the state changed."""
        j = int(self.peer[i])
        if bool(self.up[i]) == up:
            return False
        self.up[i] = self.up[j] = up
        self.down_since[i] = self.down_since[j] = np.nan if up else now
        if not up:
            self.counters["link_downed"][i] += 1
            self.counters["link_downed"][j] += 1
        else:
            self.counters["link_error_recovery"][i] += 1
        return True

    def leaf_of(self, i: int) -> str:
        return self.owner[int(self.peer[i])]
